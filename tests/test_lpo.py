"""LPO meta-trained with ES on PPO's loop, its export, and distillation."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from disco import checks
from disco import errors
from disco import evaluation
from disco import run_folders
from disco import weights as weights_lib
from disco.distillation import drift_fit
from disco.meta import follower
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import trainer as mt
from disco.update_rules import mirror_learning

from meta_settings import REPO_DIR
from meta_settings import run_launcher

# configs/meta_train_lpo.py at a size CI affords: Catch 5x5, 4 members,
# lifetimes of 3 iterations of 4 environments x 8 steps, 2 x 2 minibatches.
TINY_LPO = [
    f"--config={REPO_DIR / 'configs' / 'meta_train_lpo.py'}",
    "--config.population=({'env': 'catch', 'env_settings': {'rows': 5, "
    "'columns': 5}},)",
    "--config.rollout_len=8",
    "--config.agent.network.dense=(16,)",
    "--config.rule_kwargs.hidden_size=8",
    "--config.es.population_size=4",
    "--config.es.lifetime_iterations=3",
    "--config.es.final_iterations=2",
    "--config.es.update_epochs=2",
    "--config.es.num_minibatches=2",
    "--config.num_meta_steps=2",
]


def _config(tmp_path):
  config = checks.load_config_file(
      REPO_DIR / "configs" / "meta_train_lpo.py", None
  )
  config.population = (dict(env="catch", env_settings=dict(rows=5, columns=5)),)
  config.rollout_len = 8
  config.agent.network.dense = (16,)
  config.rule_kwargs = dict(hidden_size=8)
  config.es.update(
      population_size=4,
      lifetime_iterations=3,
      final_iterations=2,
      update_epochs=2,
      num_minibatches=2,
  )
  config.num_meta_steps = 2
  config.output_dir = str(tmp_path / "run")
  return config


@pytest.fixture(scope="module")
def lpo_run(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp("lpo")
  config = _config(tmp_path)
  summary = mt.train(config, log=lambda _: None, progress=False)
  return dict(out=tmp_path / "run", summary=summary, config=config)


def test_es_members_train_on_ppos_loop(tmp_path):
  """Each member's agents take update_epochs x num_minibatches learner steps
  per iteration (the rule's loop: 4 x 4 unless set) and anneal the learning
  rate over the lifetime."""
  plan = plan_lib.build(_config(tmp_path))
  (loop,) = plan.population.loops
  assert loop.config.update_epochs == 2 and loop.config.num_minibatches == 2
  config = _config(tmp_path)
  config.es.update_epochs = None
  config.es.num_minibatches = None
  config.output_dir = str(tmp_path / "defaults")
  (loop,) = plan_lib.build(config).population.loops
  assert loop.config.update_epochs == 4 and loop.config.num_minibatches == 4
  # The agents anneal their learning rate over a lifetime's 3 x 4 x 4
  # optimiser steps (make_agent refuses anneal_learning_rate without them).
  assert plan_lib.build(config).population.es_config.lifetime_updates == 3 * 16


def test_lpo_meta_trains_and_its_export_evaluates(lpo_run, tmp_path):
  out = lpo_run["out"]
  assert lpo_run["summary"]["meta_steps"] == 2
  exported = out / run_folder.META_PARAMS_FILE
  params = weights_lib.load_meta_params(exported)
  # ES moved the drift away from zero (PPO's).
  assert max(float(np.abs(x).max()) for x in jax.tree.leaves(params)) > 0
  metadata = weights_lib.load_metadata(exported)
  assert metadata["rule"] == "lpo"
  assert metadata["rule_kwargs"]["hidden_size"] == 8
  config = evaluation.default_config()
  config.update(
      rule=str(exported),
      env_settings=dict(rows=5, columns=5),
      total_env_steps=2 * 4 * 16,
      num_seeds=1,
      num_envs=4,
      rollout_len=16,
      batch_size=4,
      last_episodes=5,
      output_dir=str(tmp_path / "eval"),
  )
  summary = evaluation.evaluate(config, log=lambda _: None, progress=False)
  assert summary["num_diverged_seeds"] == 0
  assert np.isfinite(summary["final_return_mean"])


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--config.rule_kwargs.features=cubic", "Unknown drift features"),
        ("--config.es.population_size=3", "antithetic pairs"),
    ],
)
def test_bad_lpo_settings_exit_2_with_one_line(flag, message, tmp_path):
  result = run_launcher([*TINY_LPO, flag], cwd=tmp_path)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, lines
  assert message in lines[0]


# ---------------------------------------------------------- distillation ---


def _teacher(hidden_size, seed=0):
  rule = mirror_learning.LPO(hidden_size=hidden_size, init="random")
  params = rule.init_meta_params(jax.random.PRNGKey(seed))
  return rule, jax.tree.map(lambda w: 2.0 * w, params)


def test_closed_form_recovers_a_linear_teacher():
  teacher, params = _teacher(0)
  student = mirror_learning.LPO(hidden_size=0)
  got, agreement = drift_fit.distill(teacher, params, student)
  np.testing.assert_allclose(
      jax.tree.leaves(got)[0], jax.tree.leaves(params)[0], atol=1e-5
  )
  assert agreement.r2 > 1 - 1e-9 and agreement.max_abs < 1e-4


def test_small_student_fits_the_teachers_drift():
  teacher, params = _teacher(64)
  student = mirror_learning.LPO(hidden_size=8)
  got, agreement = drift_fit.distill(teacher, params, student, steps=1500)
  sizes = sum(x.size for x in jax.tree.leaves(got))
  assert sizes == 8 * 8 + 8
  assert agreement.r2 > 0.99, agreement
  # The student is a valid drift (the conditions hold by construction).
  log_r, advs = drift_fit.Grid().points()
  assert bool((student.drift_from_params(got, log_r, advs) >= 0).all())


def test_distillation_refuses_a_student_of_another_layout():
  teacher, params = _teacher(0)
  student = mirror_learning.LPO(features="goldie2025", hidden_size=0)
  with pytest.raises(ValueError, match="differ in features"):
    drift_fit.distill(teacher, params, student)


def test_drift_figure(tmp_path):
  teacher, params = _teacher(16)
  drifts = drift_fit.standard_drifts()
  drifts["LPO"] = lambda x, a: teacher.drift_from_params(params, x, a)
  drift_fit.plot_drifts(drifts, tmp_path / "drifts.png")
  assert (tmp_path / "drifts.png").stat().st_size > 10_000


def test_runs_saved_before_the_new_keys_still_resume(tmp_path):
  """A run saved before es.update_epochs, es.num_minibatches and
  agent.anneal_learning_rate existed compares equal to the same command
  today; setting one of them to another value is a difference."""
  config = _config(tmp_path)
  config.es.update_epochs = None
  config.es.num_minibatches = None
  saved = json.loads(json.dumps(run_folders.to_jsonable(config)))
  del saved["es"]["update_epochs"], saved["es"]["num_minibatches"]
  del saved["agent"]["anneal_learning_rate"]
  # ... and with the test-only fault settings configs had then.
  saved["debug"] = dict(
      poison_meta_grad_at_steps=[],
      poison_agent_at_steps=[],
      corrupt_checkpoint_at_step=0,
  )
  run_folder.check_same_config(saved, config, "old run")
  # disco-validate rebuilds such a run from its config.json.
  (tmp_path / "old").mkdir()
  (tmp_path / "old" / "config.json").write_text(json.dumps(dict(config=saved)))
  rebuilt = follower.run_config(tmp_path / "old", {})
  assert "debug" not in rebuilt and rebuilt.es.population_size == (
      config.es.population_size
  )
  config.es.update_epochs = 2
  with pytest.raises(errors.UsageError, match="Cannot resume"):
    run_folder.check_same_config(saved, config, "old run")
