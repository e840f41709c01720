"""Settings the off-Catch benchmark scripts share (one place for them).

``env_suite.py``, ``offcatch_ablation.py`` and ``minigrid_embedding.py``
import these: the environment suite (budgets, torsos), its loops, the
networks swapped between rules, and the baselines' tuning grid. ``run``
trains one ``disco-eval`` run into a folder (unless it holds a finished
run).
"""

from __future__ import annotations

from pathlib import Path
import re
from typing import Any

from benchmarks import cli
from disco import evaluation
from disco.comparison import results as results_lib
from disco.environments import registry

# (name, settings, env steps per seed, conv torso channels).
SUITE = (
    ("gymnax/CartPole-v1", {}, 200_000, ()),
    ("gymnax/Breakout-MinAtar", {}, 300_000, (16,)),
    ("gymnax/Asterix-MinAtar", {}, 300_000, (16,)),
    ("gymnax/SpaceInvaders-MinAtar", {}, 300_000, (16,)),
    ("gymnax/Freeway-MinAtar", {}, 300_000, (16,)),
    ("xminigrid/MiniGrid-Empty-8x8", {}, 200_000, (16,)),
    ("xminigrid/MiniGrid-DoorKey-5x5", {}, 300_000, (16,)),
    ("lpg/dense", {}, 300_000, ()),
    ("lpg/sparse", {}, 300_000, ()),
    ("delayed_chain", {}, 100_000, ()),
)
# The environment suite's loop: 8 environments x 16 steps per iteration,
# every rollout learnt from once.
ON_POLICY = dict(
    num_envs=8,
    rollout_len=16,
    batch_size=8,
    replay_capacity=0,
    min_replay_size=0,
)
# The published evaluation notebook's loop (the disco-eval default):
# Disco103 learns nothing on the on-policy loop above, even on Catch 8x8, and
# learns with a replay (BENCHMARKS.md, issue 30).
REPLAY = dict(
    num_envs=2,
    rollout_len=29,
    batch_size=64,
    replay_capacity=1024,
    min_replay_size=64,
)
# "replay_batch8": the same with learner batches of 8 trajectories, at about
# the on-policy loop's compute per learner step.
LOOPS = dict(
    on_policy=ON_POLICY,
    replay=REPLAY,
    replay_batch8=dict(REPLAY, batch_size=8, min_replay_size=8),
    own={},  # the rule's registered loop (PPO's: 4 x 128, 4 epochs)
)
# The convolutional torso the suite gives MiniGrid (image-like ids).
MINIGRID_NET = dict(conv_channels=(16,))
# xland-minigrid's encoder instead: tile and colour id embeddings, then its
# PPO's 2x2 convolutions (agent_nets.NetConfig.obs_embedding).
MINIGRID_EMBEDDING_NET = dict(conv_channels=(), obs_embedding="minigrid")
# PPO's registered network (purejaxrl's), for the network swap.
PPO_NET = dict(
    dense=(64, 64), activation="tanh", activate_final=True, head_w_init_std=0.0
)
# The published actor-critic network (the registry's SMALL_NETWORK).
SMALL_NET = dict(
    dense=(64, 32, 32), model_lstm_size=64, model_head_hiddens=(64,)
)
# The hand-designed baselines' tuning (``env_suite.py --tuned``): learning
# rate x entropy cost on tuning seeds kept apart from the reported ones.
TUNE_RULES = ("actor_critic", "ppo")
TUNE_GRID = dict(learning_rate=(3e-4, 1e-3), entropy_cost=(0.01, 0.05))
TUNE_SEEDS = 2
TUNE_SEED = 100  # tuning seeds 100, 101; reported seeds start at 0


def slug(name: str) -> str:
  """``name`` (a rule or environment) as one folder or file name."""
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def suite_entry(env: str) -> tuple[str, dict, int, tuple]:
  """``SUITE``'s entry of ``env``."""
  for entry in SUITE:
    if entry[0] == env:
      return entry
  cli.usage_error(
      f"environment {env!r} is not in the suite; give one of "
      f"{', '.join(e[0] for e in SUITE)}"
  )


def eval_config(
    rule: str,
    env: str,
    steps: int,
    seeds: int,
    folder: Path,
    last_episodes: int,
    loop: dict | None = None,
    network: dict | None = None,
    hyper_params: dict | None = None,
    env_settings: dict | None = None,
    **overrides: Any,
):
  """The ``disco-eval`` config of a run. ``loop`` None: the rule's own."""
  config = evaluation.default_config()
  config.update(
      dict(
          rule=rule,
          env=env,
          total_env_steps=int(steps),
          num_seeds=seeds,
          last_episodes=last_episodes,
          iterations_per_call=100,
          output_dir=str(folder),
          overwrite=True,
          **(loop or {}),
      )
  )
  config.env_settings = {
      **registry.get_entry(env).settings,
      **(env_settings or {}),
  }
  for key, value in (network or {}).items():
    config.network[key] = value
  with config.unlocked():
    config.hyper_params = dict(hyper_params or {})
  config.update(overrides)
  return config


def run(config, folder: Path) -> Path:
  """Trains ``config`` into ``folder`` (unless it holds a finished run)."""
  if (folder / results_lib.SUMMARY).is_file():
    return folder
  plan = evaluation.build(config, log=lambda _: None)
  evaluation.write_config(plan)
  evaluation.write(
      plan, evaluation.run(plan, lambda _: None, True), lambda _: None
  )
  return folder
