"""Tiny meta-training settings and helpers shared by the meta-training test
modules."""

from __future__ import annotations

import os
from pathlib import Path
import subprocess
import sys

from ml_collections import config_dict

from disco.meta import settings as settings_lib

REPO_DIR = Path(__file__).resolve().parents[1]

TINY = dict(
    batch_size=2,
    rollout_len=3,
    inner_steps=1,
    agent=dict(
        network=dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))
    ),
    value_fn=dict(dense=(8, 8)),
)


def as_flags(settings: dict, prefix: str = "--config") -> list[str]:
  """Launcher flags that set the (nested) ``settings``."""
  flags = []
  for key, value in settings.items():
    if isinstance(value, dict):
      flags += as_flags(value, f"{prefix}.{key}")
    else:
      flags.append(f"{prefix}.{key}={value}")
  return flags


TINY_FLAGS = as_flags(TINY)


# The rule of the tests of meta-training machinery that does not depend on
# the rule (sharding, group weights, lifetimes, divergence handling): LPG
# with a GRU of 8, whose tiny meta-step traces and compiles about 2.6x faster
# than Disco's (16 s against 42 s of CPU). Disco's own meta-step is tested
# by test_parity, test_disco_rule, test_meta_train and the notebook.
TINY_LPG = dict(rule="lpg", rule_kwargs=dict(net=dict(hidden_size=8)))
TINY_LPG_FLAGS = as_flags(TINY_LPG)


def tiny_config(**overrides) -> config_dict.ConfigDict:
  """The default meta-training config at ``TINY`` sizes, with overrides."""
  config = settings_lib.default_config()
  config.batch_size = TINY["batch_size"]
  config.rollout_len = TINY["rollout_len"]
  config.inner_steps = TINY["inner_steps"]
  config.agent.network.update(TINY["agent"]["network"])
  config.value_fn.dense = TINY["value_fn"]["dense"]
  config.update(overrides)
  return config


# Two groups of two agents; the first counts three times as much.
MIXED = (
    dict(
        env="catch",
        env_settings=dict(rows=5, columns=5),
        num_agents=2,
        weight=3.0,
    ),
    dict(
        env="catch",
        env_settings=dict(rows=6, columns=6),
        num_agents=2,
        weight=1.0,
    ),
)


def subprocess_env(**extra) -> dict[str, str]:
  """The environment of a launcher subprocess (which inherits the session's
  compilation cache folder through it, tests/conftest.py), on CPU."""
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env.update(extra)
  return env


def run_launcher(args, cwd, timeout=600):
  """``disco-meta-train ARGS`` in a subprocess."""
  return subprocess.run(
      [sys.executable, "-m", "disco.launch.meta_train", *args],
      cwd=cwd,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=timeout,
  )


def flip_one_bit(checkpoint: Path) -> Path:
  """Flips the lowest bit of the middle byte of the largest array data file
  of the checkpoint folder ``checkpoint`` (orbax's ``.../d/<hash>`` files),
  as a disk or a copy might; orbax reads such a file back without complaint,
  with other values. Returns the file."""
  data = [p for p in (checkpoint / "state").rglob("*") if p.parent.name == "d"]
  path = max(data, key=lambda p: (p.stat().st_size, str(p)))
  content = bytearray(path.read_bytes())
  content[len(content) // 2] ^= 1
  path.write_bytes(bytes(content))
  return path
