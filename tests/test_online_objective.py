"""``configs/meta_train_online.py``: an update rule meta-learned online within
one agent's single lifetime (FRODO-style), as a configuration of the
meta-trainer."""

from __future__ import annotations

import csv
import runpy

import pytest

from disco import meta
from disco.meta import settings as settings_lib

import conftest

ONLINE_CONFIG = conftest.REPO_DIR / "configs" / "meta_train_online.py"


def _config(out, **overrides):
  config = runpy.run_path(str(ONLINE_CONFIG))["get_config"]()
  config.output_dir = str(out)
  config.update(overrides)
  return config


def test_one_agent_one_lifetime_and_no_validation(tmp_path):
  settings = settings_lib.MetaTrainSettings.from_config(_config(tmp_path))
  assert [g.num_agents for g in settings.groups] == [1]
  population = settings.population
  assert population.lifetime_meta_steps == 0  # never reset
  assert population.lifetime_updates is None
  assert settings.estimator == "backprop"
  assert settings.validation.every == 0  # nothing held out
  lifetime = settings.num_meta_steps * population.inner_steps
  assert lifetime == 2_000


@pytest.mark.slow
def test_a_tiny_online_run_trains_its_one_agent_throughout(tmp_path):
  config = _config(
      tmp_path / "run",
      num_meta_steps=3,
      batch_size=2,
      rollout_len=3,
      inner_steps=2,
      max_unrolled_inner_steps=2,
  )
  config.rule_kwargs = dict(net=dict(hidden_size=8))
  meta.train(config)
  with open(tmp_path / "run" / "metrics.csv") as f:
    rows = list(csv.DictReader(f))
  assert [int(r["meta_step"]) for r in rows] == [1, 2, 3]
  # One agent never reset: its episode count only grows.
  episodes = [float(r["catch-5x5/episodes"]) for r in rows]
  assert episodes == sorted(episodes) and episodes[-1] > episodes[0]
  assert (tmp_path / "run" / "meta_params.npz").is_file()
