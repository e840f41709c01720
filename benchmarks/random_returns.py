"""Measures the returns that ``disco.environments.reference_scores`` records.

  python benchmarks/random_returns.py                        # all environments
  python benchmarks/random_returns.py --envs Breakout-MinAtar --episodes 512

For every gymnax, xminigrid and Brax environment of the normalisation table
this plays ``--episodes`` episodes with the uniform random policy (one action
drawn uniformly from the environment's action space at every step: one of
the discrete actions, or a point of the box of continuous ones; with the
environment's default parameters and time limit) and prints the mean
undiscounted episode return with its standard error. gymnax and xminigrid
are played through their own packages; Brax through ``disco``'s adapter
(``brax/<id>``, its default backend and 1000-step limit), whose time limit
and fresh resets are what disco trains on. Each environment is one
jitted program: the episodes are vmapped and the steps scanned up to the time
limit; a return stops accumulating at the first step that ends its episode.

For the xminigrid environments it also finds the optimal return: it collects
the distinct start layouts among ``--layout_samples`` resets, runs a
breadth-first search over the environment's own ``step`` from each layout
until the goal is reached (the shortest solution), and converts that number of
steps into the return the environment pays. It prints the mean over layouts.

Needs ``gymnax`` (with ``six``), ``xminigrid`` and ``brax``; the numbers it
printed are written into the table by hand.
"""

from __future__ import annotations

from pathlib import Path
import sys

import jax
import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing

GYMNAX_ENVS = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "Breakout-MinAtar",
    "Asterix-MinAtar",
    "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
)
XMINIGRID_ENVS = ("MiniGrid-Empty-8x8", "MiniGrid-DoorKey-5x5")
BRAX_ENVS = (
    "brax/ant",
    "brax/halfcheetah",
    "brax/hopper",
    "brax/walker2d",
    "brax/humanoid",
    "brax/humanoidstandup",
    "brax/inverted_pendulum",
    "brax/inverted_double_pendulum",
    "brax/reacher",
    "brax/pusher",
)


def _episode_returns(reset, step, sample_action, num_steps, num_episodes, seed):
  """Returns ``[num_episodes]`` of the random policy, from one jitted scan.

  Args:
    reset: ``key -> state``.
    step: ``(key, state, action) -> (state, reward, done)``.
    sample_action: ``key -> action``.
    num_steps: scan length; at least the environment's time limit.
    num_episodes: vmapped episodes.
    seed: PRNG seed.
  """

  def one_episode(key):
    key, reset_key = jax.random.split(key)
    state = reset(reset_key)

    def body(carry, _):
      state, key, total, alive = carry
      key, action_key, step_key = jax.random.split(key, 3)
      state, reward, done = step(step_key, state, sample_action(action_key))
      total = total + jnp.where(alive, reward, 0.0)
      return (state, key, total, alive & ~done), None

    init = (state, key, jnp.zeros((), jnp.float32), jnp.ones((), bool))
    (_, _, total, alive), _ = jax.lax.scan(body, init, None, length=num_steps)
    return total, alive

  keys = jax.random.split(jax.random.key(seed), num_episodes)
  totals, alive = jax.jit(jax.vmap(one_episode))(keys)
  if bool(np.any(np.asarray(alive))):
    raise RuntimeError("Some episodes did not end within the scan length.")
  return np.asarray(totals, np.float64)


def gymnax_returns(name, num_episodes, seed):
  import gymnax  # pylint: disable=g-import-not-at-top

  env, params = gymnax.make(name)
  space = env.action_space(params)

  def step(key, state, action):
    _, state, reward, terminated, truncated, _ = env.step(
        key, state, action, params
    )
    return state, reward.astype(jnp.float32), terminated | truncated

  return _episode_returns(
      lambda key: env.reset(key, params)[1],
      step,
      space.sample,
      int(params.max_steps_in_episode) + 1,
      num_episodes,
      seed,
  )


def xminigrid_returns(name, num_episodes, seed):
  import xminigrid  # pylint: disable=g-import-not-at-top

  env, params = xminigrid.make(name)
  num_actions = env.num_actions(params)

  def step(key, timestep, action):
    del key
    timestep = env.step(params, timestep, action)
    return timestep, timestep.reward.astype(jnp.float32), timestep.last()

  return _episode_returns(
      lambda key: env.reset(params, key),
      step,
      lambda key: jax.random.randint(key, (), 0, num_actions),
      int(params.max_steps) + 1,
      num_episodes,
      seed,
  )


def brax_returns(name, num_episodes, seed):
  """``[num_episodes]`` returns of uniform actions in ``[-1, 1]``, one
  episode per stream of ``disco``'s adapter, up to its time limit."""
  from disco import types  # pylint: disable=g-import-not-at-top
  from disco.environments import registry  # pylint: disable=g-import-not-at-top

  env = registry.make_env(name, num_episodes)
  shape = (num_episodes,) + env.action_spec().shape

  def run(key):
    key, reset_key = jax.random.split(key)
    state, _ = env.reset(reset_key)

    def body(carry, step_key):
      state, total, alive = carry
      actions = jax.random.uniform(step_key, shape, minval=-1.0, maxval=1.0)
      state, ts = env.step(state, actions)
      total = total + jnp.where(alive, ts.reward, 0.0)
      return (state, total, alive & (ts.step_type != types.LAST)), None

    init = (state, jnp.zeros(num_episodes), jnp.ones(num_episodes, bool))
    keys = jax.random.split(key, env.episode_length)
    (_, total, alive), _ = jax.lax.scan(body, init, keys)
    return total, alive

  totals, alive = jax.jit(run)(jax.random.key(seed))
  if bool(np.any(np.asarray(alive))):
    raise RuntimeError("Some episodes did not end within the time limit.")
  return np.asarray(totals, np.float64)


def _layout_key(timestep):
  state = timestep.state
  return (
      np.asarray(state.grid).tobytes()
      + np.asarray(state.agent.position).tobytes()
      + np.asarray(state.agent.direction).tobytes()
      + np.asarray(state.agent.pocket).tobytes()
  )


def xminigrid_optimal(name, layout_samples, seed, max_depth=64):
  """``(mean optimal return, optimal returns per distinct layout, counts)``."""
  import xminigrid  # pylint: disable=g-import-not-at-top

  env, params = xminigrid.make(name)
  num_actions = env.num_actions(params)
  keys = jax.random.split(jax.random.key(seed), layout_samples)
  starts = jax.jit(jax.vmap(lambda k: env.reset(params, k)))(keys)
  layouts, counts = {}, {}
  for i in range(layout_samples):
    timestep = jax.tree.map(lambda x, i=i: x[i], starts)
    k = _layout_key(timestep)
    layouts.setdefault(k, timestep)
    counts[k] = counts.get(k, 0) + 1

  actions = jnp.arange(num_actions)
  expand = jax.jit(
      jax.vmap(
          jax.vmap(lambda ts, a: env.step(params, ts, a), in_axes=(None, 0)),
          in_axes=(0, None),
      )
  )
  optimal, weights = [], []
  for k, start in layouts.items():
    frontier = jax.tree.map(lambda x: x[None], start)
    seen = {k}
    steps = None
    for depth in range(1, max_depth + 1):
      nxt = expand(frontier, actions)
      flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), nxt)
      terminated = np.asarray(flat.discount) == 0.0
      if terminated.any():
        steps = depth
        break
      keep = []
      for j in range(terminated.size):
        kj = _layout_key(jax.tree.map(lambda x, j=j: x[j], flat))
        if kj not in seen:
          seen.add(kj)
          keep.append(j)
      frontier = jax.tree.map(lambda x, keep=keep: x[np.asarray(keep)], flat)
    if steps is None:
      raise RuntimeError(f"No solution within {max_depth} steps.")
    optimal.append(1.0 - 0.9 * steps / params.max_steps)
    weights.append(counts[k])
  return float(np.mean(optimal)), np.asarray(optimal), np.asarray(weights)


def main():
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--envs",
      nargs="*",
      default=list(GYMNAX_ENVS + XMINIGRID_ENVS + BRAX_ENVS),
  )
  parser.add_argument("--episodes", type=int, default=4096)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--layout_samples", type=int, default=2048)
  args = parser.parse_args()
  known = GYMNAX_ENVS + XMINIGRID_ENVS + BRAX_ENVS
  unknown = [name for name in args.envs if name not in known]
  if unknown:
    cli.usage_error(
        f"--envs: unknown {', '.join(unknown)}; known: {', '.join(known)}"
    )
  for name in args.envs:
    clock = timing.Stopwatch()
    if name in GYMNAX_ENVS:
      returns = gymnax_returns(name, args.episodes, args.seed)
    elif name in XMINIGRID_ENVS:
      returns = xminigrid_returns(name, args.episodes, args.seed)
    else:
      returns = brax_returns(name, args.episodes, args.seed)
    sem = returns.std(ddof=1) / np.sqrt(returns.size)
    print(
        f"{name}: random return {returns.mean():.4f} +- {sem:.4f} (s.e.m.)"
        f" over {returns.size} episodes, seed {args.seed} "
        f"[{clock.seconds():.0f} s]",
        flush=True,
    )
    if name in XMINIGRID_ENVS:
      mean, per_layout, weights = xminigrid_optimal(
          name, args.layout_samples, args.seed
      )
      print(
          f"{name}: optimal return {mean:.6f} (mean over "
          f"{per_layout.size} distinct start layouts among "
          f"{args.layout_samples} resets; per layout min "
          f"{per_layout.min():.6f} max {per_layout.max():.6f}; layout "
          f"counts min {weights.min()} max {weights.max()}; "
          f"reset-weighted mean "
          f"{np.average(per_layout, weights=weights):.6f})",
          flush=True,
      )


if __name__ == "__main__":
  main()
