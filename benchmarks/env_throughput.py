"""Environment throughput: disco's suite adapters against the packages' loops.

For each environment, two jitted ``lax.scan`` loops of ``--steps`` steps over
``--batch`` streams with a uniform-random policy:

  * ours: ``env.step`` of the disco adapter (per-stream keys, automatic
    reset, ``EnvTimestep`` with float32 observations);
  * package: the package's own step, ``jit(vmap(step))`` style with its own
    automatic reset, parameters closed over as constants: gymnax's ``step``
    resets by itself; xminigrid's through ``GymAutoResetWrapper``; Craftax
    built with ``auto_reset=True`` (a new world generated at every step, as
    craftax's gymnax interface does); jumanji's Sokoban through
    ``jumanji.wrappers.AutoResetWrapper``; Brax through
    ``brax.envs.training.wrap`` (its ``EpisodeWrapper`` time limit and
    ``AutoResetWrapper``, which restores the first state rather than
    drawing a new one).

Random actions: uniform over the discrete actions, or uniform in the bounds
of a continuous action space.

Both loops consume the observations and rewards (summed into the carry) so
that neither is dead code. After one compiling call each, ``--rounds``
interleaved rounds time ours then the package's; the figures are the median
env steps/s (steps x batch / seconds) and the ratio ours / package (target:
>= 0.9).

  python benchmarks/env_throughput.py --batch 256 --steps 1000 --rounds 5
  python benchmarks/env_throughput.py --envs gymnax/Asterix-MinAtar
  python benchmarks/env_throughput.py --batch 256 --steps 100 \
      --envs craftax/Craftax-Classic-Symbolic-v1,jumanji/Sokoban-v0
  python benchmarks/env_throughput.py --batch 64 --steps 100 \
      --envs craftax/Craftax-Classic-Symbolic-v1 --env_settings reset_ratio=1
  python benchmarks/env_throughput.py --batch 64 --steps 100 \
      --envs brax/halfcheetah,brax/ant

``--env_settings`` are passed to the adapter (``name=value`` pairs, values
parsed as Python literals), for example Craftax's ``reset_ratio=1`` (a world
per finished stream, the package's behaviour) against the default reset
pool.

XLand environments need ``--benchmark_path`` (a local ruleset file). Timings
are only meaningful on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
import sys
from typing import Any

import jax
import jax.numpy as jnp

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing
from disco import errors
from disco import specs
from disco.environments import registry
from disco.environments import suite_utils
from disco.environments import xminigrid_envs

DEFAULT_ENVS = (
    "gymnax/CartPole-v1,gymnax/Breakout-MinAtar," "xminigrid/MiniGrid-Empty-8x8"
)
TARGET = 0.9


PREFIXES = ("gymnax/", "xminigrid/", "craftax/", "jumanji/", "brax/")


def random_actions(key, env: suite_utils.SuiteEnvironment) -> jax.Array:
  """``[B]`` uniform discrete actions or ``[B, D]`` uniform in the bounds."""
  spec = env.action_spec()
  if env.is_continuous:
    return jax.random.uniform(
        key,
        (env.batch_size, *spec.shape),
        minval=spec.minimum,
        maxval=spec.maximum,
    )
  return jax.random.randint(key, (env.batch_size,), 0, env.num_actions)


def ours_loop(env: suite_utils.SuiteEnvironment, steps: int) -> Callable:
  """``run(carry, key) -> carry`` over the adapter; carry (state, sum)."""

  def body(carry, key):
    state, total = carry
    state, ts = env.step(state, random_actions(key, env))
    return (state, total + ts.observation.sum() + ts.reward.sum()), None

  def run(carry, key):
    return jax.lax.scan(body, carry, jax.random.split(key, steps))[0]

  return jax.jit(run)


def _gymnax_style(package, params, batch):
  """``(init, step)`` of a gymnax-interface environment (gymnax, Craftax)."""

  def init(key):
    _, states = jax.vmap(package.reset, in_axes=(0, None))(
        jax.random.split(key, batch), params
    )
    return states

  def step(states, actions, step_key):
    obs, states, reward, _, _ = jax.vmap(package.step, in_axes=(0, 0, 0, None))(
        jax.random.split(step_key, batch), states, actions, params
    )[:5]
    return states, obs, reward

  return init, step


def _package_steps(env: suite_utils.SuiteEnvironment):
  """``(init(key) -> state, step(state, actions, key) -> (state, obs,
  reward))`` of the package's own batched loop with automatic reset."""
  batch, params = env.batch_size, env.package_params
  if env.name.startswith("gymnax/"):
    return _gymnax_style(env.package_env, params, batch)
  if env.name.startswith("craftax/"):
    from craftax import craftax_env  # pylint: disable=g-import-not-at-top

    package = craftax_env.make_craftax_env_from_name(
        env.name.split("/", 1)[1], auto_reset=True
    )
    return _gymnax_style(package, params, batch)
  if env.name.startswith("jumanji/"):
    import jumanji.wrappers  # pylint: disable=g-import-not-at-top

    package = jumanji.wrappers.AutoResetWrapper(env.package_env)

    def init(key):
      return jax.vmap(package.reset)(jax.random.split(key, batch))

    def step(carry, actions, unused_key):
      states, timesteps = jax.vmap(package.step)(carry[0], actions)
      return (states, timesteps), timesteps.observation.grid, timesteps.reward

    return init, step
  if env.name.startswith("brax/"):
    from brax.envs.wrappers import training  # pylint: disable=g-import-not-at-top

    package = training.wrap(
        env.package_env, episode_length=int(params.episode_length)
    )

    def init(key):
      return package.reset(jax.random.split(key, batch))

    def step(states, actions, unused_key):
      states = package.step(states, actions)
      return states, states.obs, states.reward

    return init, step
  from xminigrid import wrappers  # pylint: disable=g-import-not-at-top

  package = wrappers.GymAutoResetWrapper(env.package_env)

  def init(key):
    return jax.vmap(package.reset, in_axes=(None, 0))(
        params, jax.random.split(key, batch)
    )

  def step(timesteps, actions, unused_key):
    timesteps = jax.vmap(package.step, in_axes=(None, 0, 0))(
        params, timesteps, actions
    )
    return timesteps, timesteps.observation, timesteps.reward

  return init, step


def package_loop(
    env: suite_utils.SuiteEnvironment, steps: int
) -> tuple[Callable, Callable]:
  """``(init(key) -> carry, run(carry, key) -> carry)`` over the package."""
  package_init, package_step = _package_steps(env)

  def init(key):
    return package_init(key), jnp.zeros(())

  def body(carry, key):
    states, total = carry
    action_key, step_key = jax.random.split(key)
    states, obs, reward = package_step(
        states, random_actions(action_key, env), step_key
    )
    total = total + obs.astype(jnp.float32).sum() + reward.sum()
    return (states, total), None

  def run(carry, key):
    return jax.lax.scan(body, carry, jax.random.split(key, steps))[0]

  return jax.jit(init), jax.jit(run)


def _stepper(run, carry, keys) -> timing.Stepper:
  """A candidate: each call runs ``run(carry, key)`` with the next key."""
  keys = iter(keys)
  return timing.Stepper(lambda carry: run(carry, next(keys)), carry)


def benchmark(
    name: str, args: argparse.Namespace, settings: dict[str, Any]
) -> float:
  """Prints and returns the ratio of median steps/s, ours / package."""
  env = registry.make_env(name, args.batch, **settings)
  ours_run = ours_loop(env, args.steps)
  package_init, package_run = package_loop(env, args.steps)
  key = jax.random.PRNGKey(args.seed)
  # The first (compiling) call of each with ``key``, then a key per round.
  keys = [key, *jax.random.split(key, args.rounds)]
  times = timing.interleave(
      dict(
          ours=_stepper(ours_run, (env.reset(key)[0], jnp.zeros(())), keys),
          package=_stepper(package_run, package_init(key), keys),
      ),
      args.rounds,
  )
  ours_s, package_s = times.rounds["ours"], times.rounds["package"]
  ours_first, package_first = times.first["ours"], times.first["package"]
  work = args.steps * args.batch
  ours_rate = work / times.median("ours")
  package_rate = work / times.median("package")
  ratio = ours_rate / package_rate
  per_round = ", ".join(
      f"{p / o:.2f}" for o, p in zip(ours_s, package_s, strict=True)
  )
  print(
      f"{name}: ours {ours_rate:,.0f} steps/s, package "
      f"{package_rate:,.0f} steps/s, ratio {ratio:.3f} "
      f"({'meets' if ratio >= TARGET else 'below'} the {TARGET} target); "
      f"per-round ratios {per_round}; first calls (compile + run) "
      f"{ours_first:.1f} s / {package_first:.1f} s"
  )
  return ratio


def main(argv=None) -> dict[str, float]:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--envs",
      default=DEFAULT_ENVS,
      help="comma-separated names: " + ", ".join(f"{p}<id>" for p in PREFIXES),
  )
  parser.add_argument(
      "--env_settings",
      default="",
      help="comma-separated name=value settings given to every adapter",
  )
  parser.add_argument(
      "--batch", type=int, default=256, help="streams stepped together"
  )
  parser.add_argument(
      "--steps", type=int, default=1000, help="scanned steps per timed call"
  )
  parser.add_argument(
      "--rounds",
      type=int,
      default=5,
      help="interleaved timed rounds (medians reported)",
  )
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
      "--benchmark_path",
      default=None,
      help="ruleset benchmark file for XLand environments",
  )
  parser.add_argument("--ruleset_id", type=int, default=0)
  args = parser.parse_args(argv)
  if min(args.batch, args.steps, args.rounds) < 1:
    parser.error("--batch, --steps and --rounds must be >= 1")
  names = [n.strip() for n in args.envs.split(",") if n.strip()]
  for name in names:
    if not name.startswith(PREFIXES):
      parser.error(f"--envs: {name!r} is not one of {', '.join(PREFIXES)}<id>")
  try:  # disco-compare's "env:key=value,..." parser, without the name
    _, extra = specs.parse_spec(":" + args.env_settings, "--env_settings")
  except errors.UsageError:
    parser.error(
        f"--env_settings: {args.env_settings!r} is not name=value pairs"
    )
  print(
      f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); "
      f"batch={args.batch}, steps per call={args.steps}, "
      f"rounds={args.rounds}"
  )
  ratios = {}
  for name in names:
    settings = dict(extra)
    if name.startswith(xminigrid_envs.PREFIX + xminigrid_envs.XLAND_PREFIX):
      settings.update(
          benchmark_path=args.benchmark_path, ruleset_id=args.ruleset_id
      )
    ratios[name] = benchmark(name, args, settings)
  print(
      "ratios (ours / package): "
      + ", ".join(f"{name}={ratio:.3f}" for name, ratio in ratios.items())
  )
  return ratios


if __name__ == "__main__":
  main()
