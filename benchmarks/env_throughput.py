"""Environment throughput: disco's gymnax/xminigrid adapters vs the packages.

For each environment, two jitted ``lax.scan`` loops of ``--steps`` steps over
``--batch`` streams with a uniform-random policy:

  * ours: ``env.step`` of the disco adapter (per-stream keys, automatic
    reset, ``EnvTimestep`` with float32 observations);
  * package: the package's own step, ``jit(vmap(step))`` style with its own
    automatic reset (gymnax's ``step`` resets by itself; xminigrid's through
    ``GymAutoResetWrapper``), parameters closed over as constants.

Both loops consume the observations and rewards (summed into the carry) so
that neither is dead code. After one compiling call each, ``--rounds``
interleaved rounds time ours then the package's; the figures are the median
env steps/s (steps x batch / seconds) and the ratio ours / package (target:
>= 0.9).

  python benchmarks/env_throughput.py --batch 256 --steps 1000 --rounds 5
  python benchmarks/env_throughput.py --envs gymnax/Asterix-MinAtar

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
from disco.environments import gymnax_envs
from disco.environments import suite_utils
from disco.environments import xminigrid_envs

DEFAULT_ENVS = (
    "gymnax/CartPole-v1,gymnax/Breakout-MinAtar," "xminigrid/MiniGrid-Empty-8x8"
)
TARGET = 0.9


def make_env(
    name: str, batch: int, settings: dict[str, Any]
) -> suite_utils.SuiteEnvironment:
  if name.startswith(gymnax_envs.PREFIX):
    return gymnax_envs.make(name, batch)
  if name.startswith(xminigrid_envs.PREFIX):
    return xminigrid_envs.make(name, batch, **settings)
  raise ValueError(
      f"--envs: {name!r} is neither gymnax/<id> nor " "xminigrid/<id>."
  )


def ours_loop(env: suite_utils.SuiteEnvironment, steps: int) -> Callable:
  """``run(carry, key) -> carry`` over the adapter; carry (state, sum)."""

  def body(carry, key):
    state, total = carry
    actions = jax.random.randint(key, (env.batch_size,), 0, env.num_actions)
    state, ts = env.step(state, actions)
    return (state, total + ts.observation.sum() + ts.reward.sum()), None

  def run(carry, key):
    return jax.lax.scan(body, carry, jax.random.split(key, steps))[0]

  return jax.jit(run)


def package_loop(
    env: suite_utils.SuiteEnvironment, steps: int
) -> tuple[Callable, Callable]:
  """``(init(key) -> carry, run(carry, key) -> carry)`` over the package."""
  batch, num_actions = env.batch_size, env.num_actions
  params = env.package_params
  if env.name.startswith(gymnax_envs.PREFIX):
    package = env.package_env

    def init(key):
      _, states = jax.vmap(package.reset, in_axes=(0, None))(
          jax.random.split(key, batch), params
      )
      return states, jnp.zeros(())

    def step(states, action_key, step_key):
      actions = jax.random.randint(action_key, (batch,), 0, num_actions)
      obs, states, reward, _, _, _ = jax.vmap(
          package.step, in_axes=(0, 0, 0, None)
      )(jax.random.split(step_key, batch), states, actions, params)
      return states, obs, reward

  else:
    from xminigrid import wrappers  # pylint: disable=g-import-not-at-top

    package = wrappers.GymAutoResetWrapper(env.package_env)

    def init(key):
      timesteps = jax.vmap(package.reset, in_axes=(None, 0))(
          params, jax.random.split(key, batch)
      )
      return timesteps, jnp.zeros(())

    def step(timesteps, action_key, unused_step_key):
      actions = jax.random.randint(action_key, (batch,), 0, num_actions)
      timesteps = jax.vmap(package.step, in_axes=(None, 0, 0))(
          params, timesteps, actions
      )
      return timesteps, timesteps.observation, timesteps.reward

  def body(carry, key):
    states, total = carry
    action_key, step_key = jax.random.split(key)
    states, obs, reward = step(states, action_key, step_key)
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
  env = make_env(name, args.batch, settings)
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
      help="comma-separated gymnax/<id> and xminigrid/<id>",
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
  print(
      f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); "
      f"batch={args.batch}, steps per call={args.steps}, "
      f"rounds={args.rounds}"
  )
  ratios = {}
  for name in names:
    settings = {}
    if name.startswith(xminigrid_envs.PREFIX + xminigrid_envs.XLAND_PREFIX):
      settings = dict(
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
