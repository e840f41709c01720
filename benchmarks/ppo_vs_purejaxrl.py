"""PPO on gymnax: this harness's ``ppo`` rule against purejaxrl's PPO.

  python benchmarks/ppo_vs_purejaxrl.py --purejaxrl PATH [--seeds 3]
  python benchmarks/ppo_vs_purejaxrl.py --purejaxrl PATH --env Breakout-MinAtar

``PATH`` is a checkout of https://github.com/luchris429/purejaxrl (it is not
on PyPI); its ``purejaxrl/ppo.py`` is imported from there, never copied. Both
train with purejaxrl's published CartPole-v1 settings (4 environments x 128
steps per update, 4 epochs x 4 minibatches, Adam(2.5e-4, eps 1e-5) annealed
to 0, gradients clipped to global norm 0.5, gamma 0.99, GAE lambda 0.95, clip
0.2, entropy 0.01, value 0.5, separate 64x64 tanh actor and critic, 500k env
steps) and the same number of vmapped seeds, each run as one compiled
program. ``--env`` picks another gymnax environment with the same settings
(purejaxrl's ``ppo.py`` flattens image observations, as our MLP torso
does). The runs alternate (ours, theirs, ours, ...) ``--repeats`` times.

Prints, for both: the final return of every seed (mean over the last
``--last_episodes`` episodes, counted alike for both), the compile time (the
first call minus the median of the others, which rerun the same compiled
program) and env steps/s over all seeds (median call, compilation excluded),
and the ratio of the two rates. Timings are only meaningful on an otherwise
idle machine; the returns do not depend on load.

purejaxrl's code is run as published, with runtime shims only:

* gymnax 1.x returns ``(obs, state, reward, terminated, truncated, info)``
  from ``step``; purejaxrl expects gymnax 0.0.x's five values, so its
  ``gymnax.make`` gets environments whose ``step`` returns ``done =
  terminated or truncated`` (what gymnax 0.0.x reported);
* its ``wrappers.py`` imports ``brax`` and ``navix`` for wrappers that PPO on
  CartPole never uses; where they are not installed, empty stand-in modules
  let the import succeed.

Our loop differs in two ways that the numbers include: a rollout of 128
steps gives the learner 127 transitions per environment (the last step's
transition is completed in the next rollout, which starts after it), and
minibatches split the 4 environments' trajectories rather than single
transitions.
"""

from __future__ import annotations

import importlib
from pathlib import Path
import sys
import types as pytypes

import jax
import numpy as np
from scipy import stats

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing
from disco import agent as agent_lib
from disco.environments import registry as env_registry
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.update_rules import registry as rule_registry

ENV = "CartPole-v1"  # the default --env
# purejaxrl's published PPO settings for CartPole-v1 (purejaxrl/ppo.py).
PUREJAXRL_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 500_000,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": ENV,
    "ANNEAL_LR": True,
    "DEBUG": False,
}


# --------------------------------------------------------- purejaxrl ----


class _FiveValueStep:
  """A gymnax 1.x environment whose ``step`` returns gymnax 0.0.x's five
  values ``(obs, state, reward, done, info)``."""

  def __init__(self, env):
    self._env = env

  def __getattr__(self, name):
    return getattr(self._env, name)

  def step(self, key, state, action, params=None):
    obs, state, reward, terminated, truncated, info = self._env.step(
        key, state, action, params
    )
    return obs, state, reward, terminated | truncated, info


def _stub_missing(name: str, attributes: tuple[str, ...] = ()) -> None:
  """An empty module ``name`` (and its parents) where it does not import."""
  try:
    importlib.import_module(name)
    return
  except ImportError:
    pass
  parts = name.split(".")
  for i in range(1, len(parts) + 1):
    sys.modules.setdefault(
        ".".join(parts[:i]), pytypes.ModuleType(".".join(parts[:i]))
    )
  for i in range(1, len(parts)):
    setattr(sys.modules[".".join(parts[:i])], parts[i], sys.modules[name])
  for attribute in attributes:
    setattr(sys.modules[name], attribute, None)


def import_purejaxrl(checkout: Path, module: str):
  """purejaxrl's ``module`` (``ppo``, ``ppo_continuous_action``) from a
  checkout; its wrappers' imports of packages that are not installed (brax,
  navix) get empty stand-ins."""
  source = checkout / "purejaxrl"
  if not (source / f"{module}.py").is_file():
    cli.usage_error(
        f"--purejaxrl {checkout}: no purejaxrl/{module}.py there; pass the "
        "root of a checkout of https://github.com/luchris429/purejaxrl."
    )
  _stub_missing("brax.envs", ("get_environment",))
  _stub_missing(
      "brax.envs.wrappers.training", ("EpisodeWrapper", "AutoResetWrapper")
  )
  _stub_missing("navix")
  sys.path.insert(0, str(source))  # it imports its sibling `wrappers`
  try:
    return importlib.import_module(module)
  finally:
    sys.path.remove(str(source))


def import_purejaxrl_ppo(checkout: Path):
  """purejaxrl's ``ppo`` module from a checkout, with the shims above."""
  ppo = import_purejaxrl(checkout, "ppo")
  make = ppo.gymnax.make
  ppo.gymnax = pytypes.SimpleNamespace(
      make=lambda *a, **k: (lambda env, params: (_FiveValueStep(env), params))(
          *make(*a, **k)
      )
  )
  return ppo


def purejaxrl_runner(ppo, config, seeds):
  """``run() -> (metrics, seconds)`` of purejaxrl's vmapped training, with
  this harness's per-update ``episodes`` and ``return_sum`` ``[S, updates]``
  and the seconds of the compiled call."""
  train = jax.jit(jax.vmap(ppo.make_train(dict(config))))
  rngs = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds))

  def run():
    out, seconds = timing.timed(train, rngs)
    info = out["metrics"]
    done = np.asarray(info["returned_episode"])  # [S, updates, steps, envs]
    returns = np.asarray(info["returned_episode_returns"])
    metrics = dict(
        episodes=done.sum(axis=(2, 3)),
        return_sum=np.where(done, returns, 0.0).sum(axis=(2, 3)),
    )
    return metrics, seconds

  return run


# --------------------------------------------------------------- ours ----


def ours_runner(
    config, seeds, env_name=None, env_settings=None, dense=None, normalize=False
):
  """``run() -> (metrics, seconds)`` of our ``ppo`` rule with the same
  settings (the seconds of the compiled call), on ``env_name`` (default:
  ``gymnax/<ENV_NAME>``) with ``env_settings``, the torso ``dense``
  (default: the rule's 64x64), and observations and rewards normalised by
  the loop with ``normalize``."""
  loop_config = loop_lib.LoopConfig(
      num_envs=config["NUM_ENVS"],
      rollout_len=config["NUM_STEPS"],
      batch_size=config["NUM_ENVS"],
      replay_capacity=0,
      min_replay_size=0,
      update_epochs=config["UPDATE_EPOCHS"],
      num_minibatches=config["NUM_MINIBATCHES"],
      normalize_observations=normalize,
      normalize_rewards=normalize,
  )
  iterations = config["TOTAL_TIMESTEPS"] // loop_config.env_steps_per_iteration
  settings = rule_registry.default_settings("ppo")
  network = dict(settings.network, activation=config["ACTIVATION"])
  if dense is not None:
    network["dense"] = tuple(dense)
  settings = settings.replace(
      learning_rate=config["LR"],
      max_grad_norm=config["MAX_GRAD_NORM"],
      anneal_learning_rate=config["ANNEAL_LR"],
      network=network,
      hyper_params=dict(
          settings.hyper_params,
          discount_factor=config["GAMMA"],
          gae_lambda=config["GAE_LAMBDA"],
          clip_epsilon=config["CLIP_EPS"],
          entropy_cost=config["ENT_COEF"],
          value_cost=config["VF_COEF"],
      ),
  )
  env = env_registry.make_env(
      env_name or "gymnax/" + config["ENV_NAME"],
      config["NUM_ENVS"],
      **(env_settings or {}),
  )
  agent = agent_lib.make_agent(
      settings,
      action_spec=env.action_spec(),
      num_updates=loop_config.num_updates(iterations),
  )
  loop = loop_lib.EvalLoop(agent, env, loop_config)

  def run():
    states = timing.block(loop.init_seeds(seeds))
    (_, metrics), seconds = timing.timed(loop.run, states, {}, iterations)
    return metrics, seconds

  return run


# ----------------------------------------------------------- harness ----


def mean_interval(scores, level: float = 0.95) -> tuple[float, float]:
  """A t-interval of the mean of ``scores`` (the mean twice for one)."""
  scores = np.asarray(scores, np.float64)
  mean = float(scores.mean())
  if scores.size < 2:
    return mean, mean
  half = stats.t.ppf((1 + level) / 2, scores.size - 1) * stats.sem(scores)
  return mean - float(half), mean + float(half)


def side_by_side(
    runners, config, num_seeds: int, repeats: int, last_episodes: int
) -> dict[str, float]:
  """Runs ``runners`` (``name -> run() -> (metrics, seconds)``) interleaved
  ``repeats`` times (the first call of each compiles), prints each one's
  final return per seed and env steps/s, and the ratio ours / purejaxrl;
  returns those figures."""
  results = {}

  def candidate(name, run):
    def call():  # keeps the latest call's metrics
      results[name], seconds = run()
      return seconds

    return call

  # Interleaved: the first call of each compiles, the others are timed.
  times = timing.interleave(
      {name: candidate(name, run) for name, run in runners.items()},
      repeats - 1,
  )
  figures = {}
  for name, metrics in results.items():
    scores = analysis.final_scores(metrics, last_episodes)
    env_steps = int(
        metrics["episodes"].shape[1]
        * config["NUM_ENVS"]
        * config["NUM_STEPS"]
        * num_seeds
    )
    per_seed = ", ".join(f"{s:.1f}" for s in scores)
    low, high = mean_interval(scores)
    print(
        f"{name}: final return (last {last_episodes} episodes) per "
        f"seed: {per_seed}; mean {np.mean(scores):.1f} (95% t-interval "
        f"{low:.1f} to {high:.1f})"
    )
    figures[f"{name}_final_return"] = float(np.mean(scores))
    figures[f"{name}_final_return_low"] = low
    figures[f"{name}_final_return_high"] = high
    if repeats > 1:
      steady = times.median(name)
      rate = env_steps / steady
      print(
          f"{name}: compile {times.compile_seconds(name):.1f} s; "
          f"{rate:.0f} env steps/s over all seeds (median of "
          f"{repeats - 1} calls of {steady:.2f} s)"
      )
      figures[f"{name}_env_steps_per_s"] = rate
  if repeats > 1:
    ratio = (
        figures["ours_env_steps_per_s"] / figures["purejaxrl_env_steps_per_s"]
    )
    print(f"ratio (ours / purejaxrl env steps/s): {ratio:.2f}")
    figures["ratio"] = ratio
  return figures


def main(argv=None) -> dict[str, float]:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--purejaxrl", required=True, type=Path, help="purejaxrl checkout"
  )
  parser.add_argument("--seeds", type=int, default=3, help="vmapped seeds")
  parser.add_argument(
      "--env", default=ENV, help="gymnax environment name (CartPole-v1)"
  )
  parser.add_argument(
      "--total_env_steps",
      type=int,
      default=PUREJAXRL_CONFIG["TOTAL_TIMESTEPS"],
      help="env steps per seed",
  )
  parser.add_argument(
      "--repeats",
      type=int,
      default=3,
      help="calls of each (the first compiles; >= 2 to time)",
  )
  parser.add_argument(
      "--last_episodes",
      type=int,
      default=100,
      help="final return: mean over each seed's last episodes",
  )
  parser.add_argument(
      "--no_timing",
      action="store_true",
      help="one call each, returns only (e.g. on a busy machine)",
  )
  args = parser.parse_args(argv)
  repeats = 1 if args.no_timing else args.repeats
  if min(args.seeds, repeats, args.last_episodes) < 1:
    parser.error("--seeds, --repeats and --last_episodes must be >= 1")
  config = dict(
      PUREJAXRL_CONFIG, TOTAL_TIMESTEPS=args.total_env_steps, ENV_NAME=args.env
  )
  seeds = list(range(args.seeds))
  runners = {
      "ours": ours_runner(config, seeds),
      "purejaxrl": purejaxrl_runner(
          import_purejaxrl_ppo(args.purejaxrl.expanduser().resolve()),
          config,
          seeds,
      ),
  }
  print(
      f"PPO on {args.env}: {args.seeds} vmapped seeds, {config['NUM_ENVS']} envs x "
      f"{config['NUM_STEPS']} steps per update, {config['UPDATE_EPOCHS']} "
      f"epochs x {config['NUM_MINIBATCHES']} minibatches, "
      f"{args.total_env_steps} env steps per seed; devices: {jax.devices()}"
  )
  figures = side_by_side(
      runners, config, args.seeds, repeats, args.last_episodes
  )
  return figures


if __name__ == "__main__":
  main()
