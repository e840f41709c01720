"""How many programs a launcher hands XLA: its start-up is a few compiled
programs (the loop or the meta-step, and one initialisation each), not one
per operation run eagerly.

Programs counted are those compiled plus those loaded from the compilation
cache (the launchers' last line), so the count does not depend on what the
tests' cache already holds. The launchers run on one device, as on a CPU
by default (with several, orbax adds a slicing program per replicated
array at each checkpoint).
"""

from __future__ import annotations

import re
import subprocess
import sys

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG_FLAGS
from meta_settings import subprocess_env

_LINE = re.compile(r"; (\d+) programs loaded, (\d+) compiled ")
# The loop and the initial states of its seeds.
EVAL_BOUND = 3
# The meta-step, the initial state and its key, the random meta-parameters,
# the checkpoint's finiteness check.
META_TRAIN_BOUND = 6


def _programs(module: str, args: list[str], cwd) -> int:
  result = subprocess.run(
      [sys.executable, "-m", module, *args],
      cwd=cwd,
      env=subprocess_env(XLA_FLAGS=""),
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  found = _LINE.search(result.stdout)
  assert found, result.stdout[-2000:]
  return int(found[1]) + int(found[2])


def test_a_tiny_disco103_evaluation_hands_xla_a_few_programs(
    tmp_path, disco103_path
):
  programs = _programs(
      "disco.launch.evaluate",
      [
          f"--config.weights={disco103_path}",
          "--config.env_settings.rows=5",
          "--config.env_settings.columns=5",
          "--config.num_seeds=2",
          "--config.total_env_steps=120",
          "--config.num_envs=2",
          "--config.rollout_len=5",
          "--config.batch_size=4",
          "--config.replay_capacity=16",
          "--config.min_replay_size=4",
          "--config.iterations_per_call=6",
          "--config.last_episodes=2",
          f"--config.output_dir={tmp_path / 'eval'}",
      ],
      tmp_path,
  )
  assert 1 <= programs <= EVAL_BOUND, programs


def test_a_tiny_meta_training_hands_xla_a_few_programs(tmp_path):
  programs = _programs(
      "disco.launch.meta_train",
      [
          *TINY_FLAGS,
          *TINY_LPG_FLAGS,
          "--config.num_meta_steps=1",
          f"--config.output_dir={tmp_path / 'meta'}",
      ],
      tmp_path,
  )
  assert 1 <= programs <= META_TRAIN_BOUND, programs
