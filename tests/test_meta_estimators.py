"""The ``es`` and ``pes`` estimators in the meta-training launcher, end to
end on Catch at tiny sizes (with the tiny LPG rule of ``meta_settings``):
outputs, export, bit-exact resume and bad input.

One run per estimator (4 meta-steps, checkpoints at 2 and 4) is shared by
the tests of that estimator; the resumed run reuses its compiled program
through the test session's compilation cache.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from disco import errors
from disco import weights as weights_lib
from disco.meta import checkpoints as ckpt_lib
from disco.meta import history as history_lib
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import trainer as mt
from disco.update_rules import resolve

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import run_launcher
from meta_settings import tiny_config

ES_SETTINGS = dict(
    estimator="es",
    rollout_len=4,
    es=dict(
        strategy="open_es",
        population_size=4,
        # With the agents' learning rate of _config, large enough that a
        # pair's agents act, and so score, differently.
        sigma=0.5,
        lifetime_iterations=4,
        fitness="final_return",
        final_iterations=2,
        rank_shaping=True,
        antithetic=True,
    ),
)
PES_SETTINGS = dict(
    estimator="pes",
    rollout_len=8,  # every rollout ends an episode: a reward to score
    # The second rollout of a truncation acts with the perturbed update, and
    # a large learning rate makes the pair's agents act differently (with
    # the same acting keys, a pair whose actions agree scores alike and
    # adds nothing to the estimate).
    inner_steps=2,
    lifetime_meta_steps=2,
    population=(
        dict(env="catch", env_settings=dict(rows=5, columns=5), num_agents=4),
    ),
    # Perturbations large enough that a pair's tiny agents act differently.
    pes=dict(sigma=0.5, antithetic=True),
)
# An evosax strategy by name: its own update and state (checkpointed).
SNES_SETTINGS = dict(ES_SETTINGS, es=dict(ES_SETTINGS["es"], strategy="SNES"))
SETTINGS = {"es": ES_SETTINGS, "pes": PES_SETTINGS, "snes": SNES_SETTINGS}


def tree_equal(a, b) -> bool:
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
      np.array_equal(np.asarray(x), np.asarray(y))
      for x, y in zip(la, lb, strict=True)
  )


def _config(kind, **overrides):
  config = tiny_config(**TINY_LPG)
  config.update(SETTINGS[kind])
  config.agent.learning_rate = 0.05
  config.update(overrides)
  return config


@pytest.fixture(scope="module", params=["es", "pes", "snes"])
def run(request, tmp_path_factory):
  estimator = request.param
  out = tmp_path_factory.mktemp(estimator) / "straight"
  config = _config(
      estimator,
      num_meta_steps=4,
      checkpoint_every=2,
      output_dir=str(out),
  )
  summary = mt.train(config, log=lambda _: None, progress=False)
  return dict(estimator=estimator, out=out, summary=summary)


def test_outputs_and_export(run):
  out = run["out"]
  for name in (
      run_folder.CONFIG_FILE,
      run_folder.METRICS_FILE,
      run_folder.META_PARAMS_FILE,
      run_folder.SUMMARY_FILE,
  ):
    assert (out / name).is_file(), name
  history = history_lib.MetricsHistory.read_csv(out / run_folder.METRICS_FILE)
  assert list(history.steps) == [1, 2, 3, 4]
  columns = ["meta_loss", "meta_update_norm"]
  if run["estimator"] != "snes":  # evosax's own update has no gradient
    columns.append("meta_grad_norm")
  for column in columns:
    values = history.column(column)
    assert np.all(np.isfinite(values)), column
  # The meta-parameters moved on a real estimate. A pair whose agents act
  # alike scores alike up to rounding: gradient norms of about 1e-5 (or 0,
  # depending on the XLA pipeline), which Adam still turns into full-sized
  # steps, so the update norms alone would not show it. (PES's first
  # truncation scores its pairs alike.)
  norms = history.column("meta_update_norm")
  assert np.all(norms[1:] > 0), norms
  if run["estimator"] != "snes":
    grad_norms = history.column("meta_grad_norm")
    assert grad_norms.max() > 1.0, grad_norms
  assert history.column("meta_update_skipped").sum() == 0
  if run["estimator"] == "snes":  # the strategy's state is checkpointed
    plan = plan_lib.build(_config("snes", output_dir=str(out.parent / "x")))
    template = plan_lib.abstract_state(plan.population, plan.rule)
    restored = ckpt_lib.restore_latest(
        out / run_folder.CHECKPOINT_DIR, template
    )
    assert int(restored.state.estimator.generation_counter) == 4
    assert tree_equal(
        plan.population.strategy_mean(
            restored.state.estimator, restored.state.meta_params
        ),
        restored.state.meta_params,
    )
  summary = json.loads((out / run_folder.SUMMARY_FILE).read_text())
  assert summary["meta_steps"] == 4
  # The export loads as disco-eval resolves it.
  resolved = resolve.resolve_rule(str(out / run_folder.META_PARAMS_FILE))
  assert resolved.settings.rule == TINY_LPG["rule"]
  assert (
      weights_lib.load_metadata(out / run_folder.META_PARAMS_FILE)["meta_step"]
      == 4
  )
  # ... and holds the meta-trained rule, not the initial one.
  plan = plan_lib.build(
      _config(run["estimator"], output_dir=str(out.parent / "y"))
  )
  assert not tree_equal(jax.device_get(plan.meta_params), resolved.meta_params)


def test_resume_is_bit_exact(run, tmp_path):
  """Resume from the step-2 checkpoint to step 4: same metrics, state and
  export as the uninterrupted run."""
  src, out = run["out"], tmp_path / "resumed"
  out.mkdir()
  shutil.copy(src / run_folder.CONFIG_FILE, out / run_folder.CONFIG_FILE)
  shutil.copy(src / run_folder.METRICS_FILE, out / run_folder.METRICS_FILE)
  (out / run_folder.CHECKPOINT_DIR).mkdir()
  shutil.copytree(
      src / run_folder.CHECKPOINT_DIR / "2",
      out / run_folder.CHECKPOINT_DIR / "2",
  )
  config = _config(
      run["estimator"],
      num_meta_steps=4,
      checkpoint_every=2,
      output_dir=str(out),
      resume=True,
  )
  summary = mt.train(config, log=lambda _: None, progress=False)
  assert summary["resumed_from"] == 2 and summary["steps_this_run"] == 2
  assert (out / run_folder.METRICS_FILE).read_text() == (
      src / run_folder.METRICS_FILE
  ).read_text()
  assert tree_equal(
      weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE),
      weights_lib.load_meta_params(src / run_folder.META_PARAMS_FILE),
  )
  plan = plan_lib.build(
      _config(run["estimator"], output_dir=str(tmp_path / "x"))
  )
  template = plan_lib.abstract_state(plan.population, plan.rule)
  a = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  b = ckpt_lib.restore_latest(src / run_folder.CHECKPOINT_DIR, template)
  assert a.step == b.step == 4
  assert tree_equal(a.state, b.state)


@pytest.mark.parametrize(
    "estimator, overrides, match",
    [
        ("es", dict(estimator="evolve"), "config.estimator: Unknown estimator"),
        ("es", dict(es=dict(ES_SETTINGS["es"], strategy="Nope")), "not an"),
        (
            "es",
            dict(es=dict(ES_SETTINGS["es"], strategy="SimpleGA")),
            "population-based",
        ),
        (
            "es",
            dict(es=dict(ES_SETTINGS["es"], population_size=5)),
            "antithetic pairs",
        ),
        ("es", dict(es=dict(ES_SETTINGS["es"], fitness="best")), "fitness"),
        ("pes", dict(lifetime_meta_steps=0), "lifetime_meta_steps >= 1"),
        (
            "pes",
            dict(
                population=(
                    dict(
                        env="catch",
                        env_settings=dict(rows=5, columns=5),
                        num_agents=2,
                    ),
                )
            ),
            "antithetic pairs",
        ),
    ],
)
def test_bad_settings(estimator, overrides, match, tmp_path):
  config = _config(estimator, output_dir=str(tmp_path / "o"), **overrides)
  with pytest.raises(errors.UsageError, match=match):
    plan_lib.build(config)


def test_bad_estimator_settings_exit_2_with_one_line(tmp_path):
  # One launcher process: test_bad_settings checks the other messages in
  # this process (the launcher turns every such error into this one line).
  result = run_launcher(
      [*TINY_FLAGS, "--config.estimator=es", "--config.es.strategy=Nope"],
      cwd=tmp_path,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, lines
  assert lines[0].startswith("disco-meta-train: error: ")
  assert "Nope" in lines[0]
