"""Continuous-action PPO: this harness's ``ppo`` rule against purejaxrl's
``ppo_continuous_action.py``, side by side in one run.

  python -m benchmarks.ppo_continuous_vs_purejaxrl --purejaxrl PATH \
      --env gymnax/Pendulum-v1 --total_env_steps 500000
  python -m benchmarks.ppo_continuous_vs_purejaxrl --purejaxrl PATH \
      --env brax/hopper --num_envs 64 --total_env_steps 300000

``PATH`` is a checkout of https://github.com/luchris429/purejaxrl (not on
PyPI; fetched outside the package). Its ``purejaxrl/ppo_continuous_action.py``
is imported from there and run as published, with runtime shims only:

* its environment is ``BraxGymnaxWrapper(ENV_NAME)`` (Brax, the
  ``positional`` backend, 1000-step episodes, auto-reset); for a gymnax
  environment (``gymnax/Pendulum-v1``) a stand-in wrapper with the same
  interface steps gymnax's environment instead (``done = terminated or
  truncated``, as purejaxrl's other scripts see gymnax);
* its ``ClipAction`` clips to ``[-1, 1]`` whatever the environment's bounds;
  the shim clips to the environment's own bounds (Brax's are ``[-1, 1]``, so
  only Pendulum's ``[-2, 2]`` differs), as our environments do.

Both use purejaxrl's published settings (Adam 3e-4, eps 1e-5, no annealing,
gradients clipped to global norm 0.5, 4 epochs x 32 minibatches, gamma 0.99,
GAE lambda 0.95, clip 0.2, no entropy bonus, value cost 0.5, separate
256x256 tanh actor and critic, a state-independent log-std starting at 0,
``NUM_STEPS`` 10) except the number of environments (``--num_envs``;
purejaxrl's 2048 is for accelerators) and observation and reward
normalisation, off for both unless ``--normalize`` turns it on for both
(purejaxrl's ``NORMALIZE_ENV``, as published; our loop's
``normalize_observations`` and ``normalize_rewards``, as PPO's Brax preset
has them). Differences that remain, and that the numbers include: the
networks' initialisation (purejaxrl: orthogonal; ours: haiku's defaults with
truncated-normal heads), a rollout of ``NUM_STEPS`` steps gives our learner
``NUM_STEPS - 1`` transitions per environment, our minibatches split
environments rather than transitions, and a time limit is a truncation for us
and a termination for purejaxrl.

Prints the final return of every seed (the mean of its last
``--last_episodes`` episodes) with a 95% t-interval of the mean over seeds,
compile time, and env steps/s of each over all seeds (median of the timed
calls, compilation excluded) with the ratio; ``--csv`` appends the figures.
"""

from __future__ import annotations

import csv
import datetime
from pathlib import Path
import platform
import sys

import jax
import jax.numpy as jnp

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import ppo_vs_purejaxrl as discrete

# purejaxrl's published settings (ppo_continuous_action.py, __main__).
PUREJAXRL_CONFIG = {
    "LR": 3e-4,
    "NUM_ENVS": 2048,
    "NUM_STEPS": 10,
    "TOTAL_TIMESTEPS": 50_000_000,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 32,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.0,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "hopper",
    "ANNEAL_LR": False,
    "NORMALIZE_ENV": False,  # published: True (see the module docstring)
    "DEBUG": False,
}
BRAX_BACKEND = "positional"  # purejaxrl's BraxGymnaxWrapper default


class _GymnaxAsBrax:
  """A gymnax continuous environment behind the interface purejaxrl's
  ``BraxGymnaxWrapper`` gives its training code."""

  def __init__(self, env_id: str):
    import gymnax  # pylint: disable=g-import-not-at-top

    self._env, self._params = gymnax.make(env_id)

  def reset(self, key, params=None):
    del params
    return self._env.reset(key, self._params)

  def step(self, key, state, action, params=None):
    del params
    obs, state, reward, terminated, truncated, info = self._env.step(
        key, state, action, self._params
    )
    return obs, state, reward, jnp.logical_or(terminated, truncated), info

  def observation_space(self, params):
    del params
    return self._env.observation_space(self._params)

  def action_space(self, params):
    del params
    return self._env.action_space(self._params)


def _clip_to_bounds(module):
  """purejaxrl's ``ClipAction``, clipping to the environment's bounds."""
  base = module.ClipAction

  class ClipToBounds(base):

    def __init__(self, env, low=-1.0, high=1.0):
      space = env.action_space(None)
      super().__init__(env, space.low, space.high)
      del low, high

  return ClipToBounds


def purejaxrl_module(checkout: Path, env: str):
  """purejaxrl's ``ppo_continuous_action`` set up for ``env``."""
  module = discrete.import_purejaxrl(checkout, "ppo_continuous_action")
  module.ClipAction = _clip_to_bounds(module)
  if env.startswith("gymnax/"):
    module.BraxGymnaxWrapper = lambda name: _GymnaxAsBrax(name)
  return module


def package_name(env: str) -> str:
  """purejaxrl's ``ENV_NAME`` for one of our environment names."""
  return env.split("/", 1)[1]


def env_settings(env: str) -> dict[str, object]:
  """Our environment's settings matching purejaxrl's wrapper."""
  if env.startswith("brax/"):
    return dict(backend=BRAX_BACKEND, episode_length=1000)
  return {}


def main(argv=None) -> dict[str, float]:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--purejaxrl", required=True, type=Path, help="purejaxrl checkout"
  )
  parser.add_argument(
      "--env",
      default="gymnax/Pendulum-v1",
      help="gymnax/<continuous id> or brax/<name>",
  )
  parser.add_argument("--seeds", type=int, default=3, help="vmapped seeds")
  parser.add_argument(
      "--num_envs",
      type=int,
      default=64,
      help="environments per seed (a multiple of 32: minibatches split them)",
  )
  parser.add_argument(
      "--total_env_steps", type=int, default=500_000, help="per seed"
  )
  parser.add_argument(
      "--repeats", type=int, default=3, help="calls of each (first compiles)"
  )
  parser.add_argument(
      "--last_episodes", type=int, default=20, help="final return: per seed"
  )
  parser.add_argument(
      "--no_timing", action="store_true", help="one call each, returns only"
  )
  parser.add_argument(
      "--normalize",
      action="store_true",
      help="normalise observations and rewards on both sides",
  )
  parser.add_argument("--csv", type=Path, help="append the figures here")
  args = parser.parse_args(argv)
  repeats = 1 if args.no_timing else args.repeats
  if args.num_envs % PUREJAXRL_CONFIG["NUM_MINIBATCHES"]:
    parser.error("--num_envs must be a multiple of 32 (the minibatches)")
  if not args.env.startswith(("gymnax/", "brax/")):
    parser.error("--env must be gymnax/<id> or brax/<name>")
  config = dict(
      PUREJAXRL_CONFIG,
      NUM_ENVS=args.num_envs,
      NORMALIZE_ENV=args.normalize,
      TOTAL_TIMESTEPS=args.total_env_steps,
      ENV_NAME=package_name(args.env),
  )
  seeds = list(range(args.seeds))
  module = purejaxrl_module(args.purejaxrl.expanduser().resolve(), args.env)
  runners = {
      "ours": discrete.ours_runner(
          config,
          seeds,
          args.env,
          env_settings(args.env),
          dense=(256, 256),
          normalize=args.normalize,
      ),
      "purejaxrl": discrete.purejaxrl_runner(module, config, seeds),
  }
  print(
      f"continuous PPO on {args.env}: {args.seeds} vmapped seeds, "
      f"{config['NUM_ENVS']} envs x {config['NUM_STEPS']} steps per update, "
      f"{args.total_env_steps} env steps per seed; devices: {jax.devices()}"
  )
  figures = discrete.side_by_side(
      runners, config, args.seeds, repeats, args.last_episodes
  )
  if args.csv:
    row = dict(
        date=datetime.date.today().isoformat(),
        machine=platform.processor() or platform.machine(),
        env=args.env,
        seeds=args.seeds,
        num_envs=args.num_envs,
        total_env_steps=args.total_env_steps,
        normalize=args.normalize,
        **figures,
    )
    new = not args.csv.exists()
    with args.csv.open("a", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(row))
      if new:
        writer.writeheader()
      writer.writerow(row)
  return figures


if __name__ == "__main__":
  main()
