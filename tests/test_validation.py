"""Meta-validation on held-out environments (``disco.meta.validation``), in
``disco-meta-train`` and in the ``disco-validate`` follower: outputs, best
rule, the same loop as ``disco-eval``, unchanged meta-training, resume and
bad input (tiny settings throughout).

The expensive pieces are shared: two 4-step meta-training runs (with and
without validation every 2 meta-steps on a held-out Catch 6x6, with the tiny
LPG rule of ``meta_settings``: validation does not depend on the rule) serve
every test; the held-out loop compiles once per process (persistent cache).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

from absl import flags
import numpy as np
import pytest

from disco import checks
from disco import errors
from disco import evaluation
from disco import weights as weights_lib
from disco.launch import common
from disco.launch import validate as validate_launcher
from disco.meta import follower
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import trainer as mt
from disco.meta import validation_record as record_lib
from disco.meta import validation_settings
from disco.scoring import aggregates
from disco.update_rules import resolve

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import run_launcher
from meta_settings import subprocess_env
from meta_settings import tiny_config

HELD_OUT = ({"env": "catch", "env_settings": {"rows": 6, "columns": 6}},)
LOOP = dict(
    num_envs=2,
    rollout_len=4,
    batch_size=2,
    replay_capacity=0,
    iterations_per_call=15,
)
VALIDATION = dict(
    envs=HELD_OUT, num_seeds=2, total_env_steps=120, last_episodes=4, **LOOP
)
VALIDATION_FLAGS = [
    f"--config.validation.{k}={v!r}" for k, v in VALIDATION.items()
]


def config_with(out, validation=True, **overrides):
  config = tiny_config(
      **TINY_LPG,
      num_meta_steps=4,
      checkpoint_every=2,
      output_dir=str(out),
      **overrides,
  )
  if validation:
    config.validation.update(VALIDATION, every=2)
  return config


def files_equal(a, b) -> bool:
  return a.read_bytes() == b.read_bytes()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The same 4-step run with and without validation every 2 meta-steps."""
  root = tmp_path_factory.mktemp("validation")
  lines = []
  with_summary = mt.train(
      config_with(root / "with", tracking="tensorboard"),
      log=lines.append,
      progress=False,
  )
  mt.train(
      config_with(root / "without", validation=False),
      log=lambda _: None,
      progress=False,
  )
  return dict(
      root=root,
      on=root / "with",
      off=root / "without",
      summary=with_summary,
      lines=lines,
  )


# ----------------------------------------------- in meta-training ----


def test_validation_never_changes_meta_training(runs):
  on, off = runs["on"], runs["off"]
  assert files_equal(
      on / run_folder.METRICS_FILE, off / run_folder.METRICS_FILE
  )
  a = weights_lib.load_meta_params(on / run_folder.META_PARAMS_FILE)
  b = weights_lib.load_meta_params(off / run_folder.META_PARAMS_FILE)
  assert a.keys() == b.keys()
  for k in a:
    for name in a[k]:
      np.testing.assert_array_equal(a[k][name], b[k][name])  # bitwise
  assert not (off / record_lib.CSV_FILE).exists()


def test_validation_scores_are_tracked(runs):
  from tensorboard.backend.event_processing import event_accumulator

  acc = event_accumulator.EventAccumulator(
      str(runs["on"] / "tensorboard"), size_guidance={"scalars": 0}
  )
  acc.Reload()
  rows = record_lib.read_rows(runs["on"] / record_lib.CSV_FILE)
  want = {r["meta_step"]: r["aggregate"] for r in rows}
  got = {e.step: e.value for e in acc.Scalars("validation/aggregate")}
  assert got.keys() == want.keys() == {0, 2, 4}
  for step, value in want.items():
    assert got[step] == pytest.approx(value, rel=1e-6, abs=1e-7)
  assert "validation/catch/6x6/normalized_score" in acc.Tags()["scalars"]


def test_validation_outputs(runs):
  on = runs["on"]
  rows = record_lib.read_rows(on / record_lib.CSV_FILE)
  assert [(r["meta_step"], r["env"], r["seed"]) for r in rows] == [
      (step, "catch/6x6", seed) for step in (0, 2, 4) for seed in (1000, 1001)
  ]
  assert list(rows[0]) == list(record_lib.COLUMNS)
  for r in rows:
    # Catch 6x6: random return 2/6 - 1, reference +1.
    random = 2 / 6 - 1
    assert r["normalized_score"] == pytest.approx(
        (r["return"] - random) / (1 - random)
    )
    assert -1 <= r["return"] <= 1
  for step in (0, 2, 4):
    scores = [r["normalized_score"] for r in rows if r["meta_step"] == step]
    aggregate = {r["aggregate"] for r in rows if r["meta_step"] == step}
    assert aggregate == {aggregates.iqm(np.array([scores]))}
  # The best file: the first meta-step with the highest aggregate.
  by_step = {r["meta_step"]: r["aggregate"] for r in rows}
  finite = [s for s in by_step if math.isfinite(by_step[s])]
  best_step = max(finite, key=lambda s: (by_step[s], -s))
  metadata = weights_lib.load_metadata(on / record_lib.BEST_FILE)
  assert metadata["meta_step"] == best_step
  assert metadata["validation_score"] == by_step[best_step]
  assert metadata["validation_envs"] == ["catch/6x6"]
  assert (
      metadata["rule"] == TINY_LPG["rule"]
      and metadata["source"] == settings_lib.PROGRAM
  )
  # disco-eval takes it as it takes meta_params.npz.
  resolved = resolve.resolve_rule(str(on / record_lib.BEST_FILE))
  assert (
      resolved.settings.rule == TINY_LPG["rule"] and resolved.source == "file"
  )
  assert (on / record_lib.PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert runs["summary"]["validation"]["validated_meta_steps"] == [0, 2, 4]
  assert runs["summary"]["validation"]["best_meta_step"] == best_step
  assert any(
      line.startswith("Validation at meta-step 4: IQM normalised score")
      for line in runs["lines"]
  )


def test_validation_is_the_disco_eval_loop(runs, tmp_path):
  """disco-eval of best_meta_params.npz with the validation's agent, loop and
  seeds gives the returns validation.csv holds for its meta-step."""
  on = runs["on"]
  best = weights_lib.load_metadata(on / record_lib.BEST_FILE)["meta_step"]
  config = evaluation.default_config()
  config.env_settings = {"rows": 6, "columns": 6}
  config.network.dense = (16,)
  config.network.model_lstm_size = 8
  config.network.model_head_hiddens = (8,)
  config.update(
      rule=str(on / record_lib.BEST_FILE),
      env="catch",
      num_seeds=2,
      seed=1000,
      total_env_steps=120,
      last_episodes=4,
      learning_rate=5e-4,
      loss_mask="published",
      output_dir=str(tmp_path / "eval"),
      **LOOP,
  )
  summary = evaluation.evaluate(config, log=lambda _: None, progress=False)
  rows = record_lib.read_rows(on / record_lib.CSV_FILE)
  assert summary["final_return_per_seed"] == [
      r["return"] for r in rows if r["meta_step"] == best
  ]


def test_held_out_loop_compiles_once(runs, tmp_path):
  plan = plan_lib.build(config_with(tmp_path / "x"))
  validator = plan.validation.validator
  first = validator.validate(plan.meta_params, 0)
  shifted = {
      k: {n: x + 0.01 for n, x in v.items()}
      for k, v in weights_lib.load_meta_params(
          runs["on"] / run_folder.META_PARAMS_FILE
      ).items()
  }
  validator.validate(shifted, 1)
  for loop in (p.loop for p in validator.plans.values()):
    assert loop._run._cache_size() == 1
  rows = record_lib.read_rows(runs["on"] / record_lib.CSV_FILE)
  assert list(first.returns["catch/6x6"]) == [
      r["return"] for r in rows if r["meta_step"] == 0
  ]


# ------------------------------------------------------- resume ----


def _killed_copy(runs, dest, checkpoint, keep_rows_upto):
  """The run as a kill after ``checkpoint`` leaves it: that checkpoint,
  the metrics, the validation rows up to ``keep_rows_upto`` and the best
  file written with them."""
  src = runs["on"]
  dest.mkdir()
  for name in (run_folder.CONFIG_FILE, run_folder.METRICS_FILE):
    shutil.copy(src / name, dest / name)
  shutil.copytree(
      src / run_folder.CHECKPOINT_DIR / str(checkpoint),
      dest / run_folder.CHECKPOINT_DIR / str(checkpoint),
  )
  rows = [
      r
      for r in record_lib.read_rows(src / record_lib.CSV_FILE)
      if r["meta_step"] <= keep_rows_upto
  ]
  record_lib._write_rows(dest / record_lib.CSV_FILE, rows)
  shutil.copy(src / record_lib.SETTINGS_FILE, dest / record_lib.SETTINGS_FILE)
  return rows


def test_resume_neither_loses_nor_duplicates_rows(runs, tmp_path):
  """Killed while validating meta-step 2 (after its checkpoint): the resumed
  run validates 2 and 4 once each, exactly as the straight run did."""
  src, out = runs["on"], tmp_path / "resumed"
  (row,) = _killed_copy(runs, out, checkpoint=2, keep_rows_upto=0)[:1]
  if math.isfinite(row["aggregate"]):  # the best file as step 0 left it
    plan = plan_lib.build(config_with(tmp_path / "x"))
    plan_lib.exporter(plan)(
        out / record_lib.BEST_FILE,
        plan.meta_params,
        0,
        validation_score=row["aggregate"],
        validation_envs=["catch/6x6"],
        validation_seeds=[1000, 1001],
    )
  lines = []
  mt.train(config_with(out, resume=True), log=lines.append, progress=False)
  assert files_equal(out / record_lib.CSV_FILE, src / record_lib.CSV_FILE)
  assert files_equal(out / record_lib.BEST_FILE, src / record_lib.BEST_FILE)
  assert sum(line.startswith("Validation at") for line in lines) == 2


def test_resume_keeps_rows_and_best_after_the_checkpoint(runs, tmp_path):
  """Killed after validating meta-step 4 but before its checkpoint: the
  resumed run repeats meta-steps 3 and 4 but not their validation; the rows
  and the best file stay as they were."""
  src, out = runs["on"], tmp_path / "resumed"
  _killed_copy(runs, out, checkpoint=2, keep_rows_upto=4)
  shutil.copy(src / record_lib.BEST_FILE, out / record_lib.BEST_FILE)
  before = (out / record_lib.BEST_FILE).read_bytes()
  lines = []
  summary = mt.train(
      config_with(out, resume=True), log=lines.append, progress=False
  )
  assert not any(line.startswith("Validation at") for line in lines)
  assert files_equal(out / record_lib.CSV_FILE, src / record_lib.CSV_FILE)
  assert (out / record_lib.BEST_FILE).read_bytes() == before
  assert summary["validation"]["validated_meta_steps"] == [0, 2, 4]


def test_resume_with_other_validation_settings_is_refused(runs, tmp_path):
  out = tmp_path / "run"
  shutil.copytree(runs["on"], out)
  config = config_with(out, resume=True)
  config.validation.num_seeds = 3
  with pytest.raises(errors.UsageError, match="other validation settings"):
    mt.train(config, log=lambda _: None, progress=False)
  # How often is not part of the rows: it may change.
  config = config_with(out, resume=True)
  config.validation.every = 1
  summary = mt.train(config, log=lambda _: None, progress=False)
  assert summary["steps_this_run"] == 0


# --------------------------------------------------- the record ----


def _result(step, aggregate, score=0.5):
  x = np.array([score, score])
  return record_lib.StepResult(
      meta_step=step,
      returns={"catch/6x6": x},
      normalized={"catch/6x6": x},
      aggregate=aggregate,
  )


def test_record_keeps_the_best_and_each_step_once(tmp_path):
  settings = validation_settings.parse_settings(
      dict(validation_settings.default_config(), **VALIDATION)
  )
  saved = []

  def export(path, params, step, **extra):
    saved.append(step)
    return weights_lib.save_meta_params(
        path, params, metadata=dict(rule="disco", meta_step=step, **extra)
    )

  record = record_lib.Record(tmp_path, settings, export)
  params = {"m/w": {"w": np.zeros(2, np.float32)}}
  assert record.add(_result(0, math.nan), params) is False  # NaN: never best
  assert record.add(_result(2, 0.3), params) is True
  assert record.add(_result(4, 0.2), params) is False
  assert record.add(_result(6, 0.3), params) is False  # ties keep the first
  assert record.add(_result(2, 0.9), params) is False  # recorded already
  assert record.add(_result(8, 0.5), params) is True
  assert saved == [2, 8] and record.best() == (8, 0.5)
  assert sorted(record.validated_steps()) == [0, 2, 4, 6, 8]
  assert len(record.rows()) == 10
  # A record with other settings refuses the folder.
  other = validation_settings.parse_settings(
      dict(validation_settings.default_config(), **VALIDATION, seed=7)
  )
  with pytest.raises(errors.UsageError, match="seed: saved 1000, now 7"):
    record_lib.Record(tmp_path, other, export)


# -------------------------------------------------- the follower ----


def _follow_config(run_dir, **overrides):
  config = follower.default_config()
  config.run_dir = str(run_dir)
  config.update(overrides)
  return config


def test_follower_writes_what_the_run_writes(runs, tmp_path):
  """disco-validate --follow on the finished run validates step 0 and every
  checkpoint, with the rows the in-process validation wrote."""
  out = tmp_path / "run"
  shutil.copytree(runs["on"], out)
  for name in (
      record_lib.CSV_FILE,
      record_lib.PLOT_FILE,
      record_lib.BEST_FILE,
      record_lib.SETTINGS_FILE,
  ):
    (out / name).unlink()
  lines = []
  summary = follower.validate(
      _follow_config(out, follow=True), log=lines.append, progress=False
  )
  assert summary["validated_meta_steps"] == [0, 2, 4]
  assert files_equal(
      out / record_lib.CSV_FILE, runs["on"] / record_lib.CSV_FILE
  )
  assert files_equal(
      out / record_lib.BEST_FILE, runs["on"] / record_lib.BEST_FILE
  )
  assert any("has finished" in line for line in lines)
  # Once more: nothing new.
  lines.clear()
  follower.validate(_follow_config(out), log=lines.append, progress=False)
  assert any("is validated" in line for line in lines)
  assert files_equal(
      out / record_lib.CSV_FILE, runs["on"] / record_lib.CSV_FILE
  )


def test_follower_waits_for_new_checkpoints(runs, tmp_path):
  """A run that has not finished: the follower validates what is there,
  then stops after max_idle_seconds; started again when a checkpoint came,
  it validates only that one."""
  out = tmp_path / "run"
  out.mkdir()
  shutil.copy(runs["on"] / run_folder.CONFIG_FILE, out / run_folder.CONFIG_FILE)
  shutil.copytree(
      runs["on"] / run_folder.CHECKPOINT_DIR / "2",
      out / run_folder.CHECKPOINT_DIR / "2",
  )
  config = _follow_config(
      out,
      follow=True,
      poll_seconds=0.01,
      max_idle_seconds=0.05,
  )
  config.validation.at_start = False
  lines = []
  summary = follower.validate(config, log=lines.append, progress=False)
  assert summary["validated_meta_steps"] == [2]
  assert any("No new checkpoint" in line for line in lines)
  shutil.copytree(
      runs["on"] / run_folder.CHECKPOINT_DIR / "4",
      out / run_folder.CHECKPOINT_DIR / "4",
  )
  lines.clear()
  summary = follower.validate(config, log=lines.append, progress=False)
  assert summary["validated_meta_steps"] == [2, 4]
  assert sum(line.startswith("Validation at") for line in lines) == 1
  expected = [
      r
      for r in record_lib.read_rows(runs["on"] / record_lib.CSV_FILE)
      if r["meta_step"]
  ]
  assert record_lib.read_rows(out / record_lib.CSV_FILE) == expected


def test_follower_command_line(runs, tmp_path):
  assert validate_launcher._argv(["p", "RUN", "--follow", "--config.x=1"]) == [
      "p",
      "--config.run_dir=RUN",
      "--config.follow=True",
      "--config.x=1",
  ]
  assert validate_launcher._argv(["p", "--config", "f.py", "RUN"]) == [
      "p",
      "--config",
      "f.py",
      "--config.run_dir=RUN",
  ]
  for args, match in (
      ([str(tmp_path / "nowhere")], "holds no meta-training run"),
      (
          [
              str(runs["on"]),
              "--config.validation.envs=({'env': 'pong'},)",
          ],
          "Unknown environment 'pong'",
      ),
  ):
    result = subprocess.run(
        [sys.executable, "-m", "disco.launch.validate", *args],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("disco-validate: error: ")
    assert match in lines[0]


# ---------------------------------------------------- bad input ----


def _train_from_argv(args):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["disco-meta-train", *args],
      checks.config_path(settings_lib.CONFIG_NAME),
      "help",
      fv,
  )
  return mt.train(fv.config, log=lambda _: None, progress=False)


@pytest.mark.parametrize(
    "args, match",
    [
        (
            ["--config.validation.envs=({'env': 'pong'},)"],
            r"validation.envs\[0\]: Unknown environment 'pong'",
        ),
        (["--config.validation.every=-1"], "validation.every must be >= 0"),
        (["--config.validation.num_seeds=0"], "num_seeds must be >= 1"),
        (
            ["--config.validation.total_env_steps=7"],
            "fewer than one iteration of the loop",
        ),
        (
            [
                "--config.validation.replay_capacity=64",
                "--config.validation.batch_size=8",
                "--config.validation.min_replay_size=64",
            ],
            "ends before the agents' first update",
        ),
        (
            ["--config.validation.envs=({'env': 'lpg/dense'},)"],
            "No normalisation entry for environment 'lpg/dense'",
        ),
        (
            ["--config.validation.envs=({'env': 'catch', 'steps': 1},)"],
            "must have keys env, env_settings",
        ),
        (
            ["--config.validation.envs=()"],
            "config.validation.envs is empty",
        ),
    ],
)
def test_bad_validation_input(args, match, tmp_path):
  given = {a.split("=")[0] for a in args}
  flags_ = [
      *TINY_FLAGS,
      *(f for f in VALIDATION_FLAGS if f.split("=")[0] not in given),
      "--config.validation.every=2",
      f"--config.output_dir={tmp_path / 'o'}",
  ]
  with pytest.raises(errors.UsageError, match=match):
    _train_from_argv([*flags_, *args])
  assert not (tmp_path / "o").exists()


def test_bad_validation_input_exit_code(tmp_path):
  result = run_launcher(
      [
          *TINY_FLAGS,
          "--config.validation.every=2",
          "--config.validation.envs=({'env': 'pong'},)",
          f"--config.output_dir={tmp_path / 'o'}",
      ],
      cwd=tmp_path,
  )
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, lines
  assert lines[0].startswith("disco-meta-train: error: config.validation")
  assert not (tmp_path / "o").exists()


def test_held_out_env_reference_from_config(tmp_path):
  """An environment the normalisation table lacks runs with a reference
  given in config.validation.references (disco-compare's syntax)."""
  config = tiny_config(output_dir=str(tmp_path / "o"))
  config.validation.update(
      VALIDATION,
      every=2,
      envs=({"env": "lpg/dense"},),
      references=("lpg/dense:random=0,reference=1,source=test",),
  )
  plan = plan_lib.build(config)
  assert list(plan.validation.validator.plans) == ["lpg/dense"]
  assert json.dumps(plan.validation.settings.record())
