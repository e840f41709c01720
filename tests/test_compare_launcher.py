"""The ``disco-compare`` launcher: a grid of runs, resume, aggregation of
existing runs, and bad input (tiny settings throughout)."""

from __future__ import annotations

import bz2
import csv
import json
from pathlib import Path
import pickle
import shutil
import subprocess
import sys
import time

import faults
import jax
import numpy as np
import pytest

from disco import checks
from disco import comparison
from disco import errors
from disco import evaluation
from disco import files
from disco import specs
from disco import weights
from disco.comparison import settings as settings_lib
from disco.launch import common
from disco.meta import validation_record as record_lib
from disco.meta import validation_settings
from disco.training import analysis
from disco.update_rules import migrations
from disco.update_rules import resolve

RULES = ("actor_critic", "policy_gradient")
ENVS = ("catch:rows=5,columns=5", "delayed_chain:chain_length=3")
TINY = [
    f"--config.rules={RULES}",
    f"--config.envs={ENVS}",
    "--config.num_seeds=3",
    "--config.total_env_steps=1200",
    "--config.num_envs=4",
    "--config.rollout_len=6",
    "--config.batch_size=4",
    "--config.replay_capacity=0",
    "--config.min_replay_size=0",
    "--config.iterations_per_call=10",
    "--config.last_episodes=20",
    "--config.bootstrap_reps=50",
    "--config.num_points=5",
]


def tiny_with(args):
  """TINY with ``args`` replacing its flags of the same names."""
  names = {a.partition("=")[0] for a in args}
  return [a for a in TINY if a.partition("=")[0] not in names] + list(args)


def _config(argv):
  from absl import flags

  fv = flags.FlagValues()
  common.parse_config_flags(
      ["disco-compare", *argv],
      checks.config_path(settings_lib.CONFIG_NAME),
      "help",
      flag_values=fv,
  )
  return fv.config


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
  """A sweep killed after its first run finished, then resumed."""
  out = tmp_path_factory.mktemp("compare") / "sweep"
  args = [
      sys.executable,
      "-m",
      "disco.launch.compare",
      *TINY,
      f"--config.output_dir={out}",
  ]
  proc = subprocess.Popen(
      args,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
  )
  first = out / "runs" / "actor_critic" / "catch_5x5" / "summary.json"
  deadline = time.time() + 600
  while not first.exists() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.2)
  proc.kill()
  proc.communicate()
  assert first.exists(), "the first run did not finish before the kill"
  finished_before = {
      p.parent: p.stat().st_mtime_ns
      for p in (out / "runs").rglob("summary.json")
  }
  lines = []
  stats = comparison.compare(
      _config([*TINY, f"--config.output_dir={out}"]),
      log=lines.append,
      progress=False,
  )
  return dict(
      out=out, stats=stats, lines=lines, finished_before=finished_before
  )


def test_resumed_sweep_keeps_finished_runs(sweep):
  out = sweep["out"]
  assert any("finished already" in line for line in sweep["lines"])
  for folder, mtime in sweep["finished_before"].items():
    assert (folder / "summary.json").stat().st_mtime_ns == mtime, folder
  assert len(list((out / "runs").rglob("summary.json"))) == 4


def test_report_results_and_figures(sweep):
  out, stats = sweep["out"], sweep["stats"]
  assert stats["rules"] == list(RULES)
  assert stats["envs"] == ["catch/5x5", "delayed_chain(chain_length=3)"]
  for name in (
      "report.md",
      "results.csv",
      "statistics.json",
      "aggregates.png",
      "profiles.png",
      "improvement.png",
      "sample_efficiency.png",
      "curves_catch_5x5.png",
      "curves_delayed_chain_chain_length_3.png",
  ):
    assert (out / name).is_file(), name
    if name.endswith(".png"):
      assert (out / name).read_bytes()[:4] == b"\x89PNG"
  with open(out / "results.csv") as f:
    rows = list(csv.DictReader(f))
  # rule x environment x seed x evaluation point.
  assert len(rows) == 2 * 2 * 3 * 5
  assert {r["env"] for r in rows} == {
      "catch/5x5",
      "delayed_chain(chain_length=3)",
  }
  report = (out / "report.md").read_text()
  for text in (
      "IQM",
      "Probability of improvement",
      "Pairwise tests: " "catch/5x5",
      "all environments",
      "Holm",
      "seeds needed",
  ):
    assert text in report, text
  for rule in RULES:
    iqm = stats["aggregates"][rule]["iqm"]
    assert iqm["low"] <= iqm["estimate"] <= iqm["high"]
  # Strict JSON: no NaN or Infinity (undefined or infinite values are null).
  assert _strict_json((out / "statistics.json").read_text()) == stats
  assert "two-sided" in report
  # 3 seeds on 2 environments: the intervals cover about 82%, and say so.
  coverage = stats["interval_coverage"][RULES[0]]
  assert coverage["approximate"] == pytest.approx(0.815, abs=0.005)
  assert "covers about 82%, not 95%" in report
  assert "mean a - mean b [95% interval]" in report


def _strict_json(text):
  def refuse(name):
    raise ValueError(f"{name} is not JSON")

  return json.loads(text, parse_constant=refuse)


def test_statistics_settings(sweep, tmp_path):
  runs = sorted(
      str(p.parent) for p in (sweep["out"] / "runs").rglob("summary.json")
  )
  base = [
      f"--config.run_dirs={tuple(runs)}",
      "--config.bootstrap_reps=50",
      "--config.num_points=5",
  ]
  stats = comparison.compare(
      _config(
          [
              *base,
              "--config.confidence=0.8",
              "--config.task_bootstrap=True",
              "--config.min_effect=0.5",
              "--config.holm_across_envs=True",
              f"--config.output_dir={tmp_path / 'agg'}",
          ]
      ),
      log=lambda _: None,
  )
  report = (tmp_path / "agg" / "report.md").read_text()
  assert "80% stratified-bootstrap intervals" in report
  assert "environments resampled too" in report
  assert "over all tables together" in report
  assert "minimum effect of interest |g|=0.5" in report
  assert stats["aggregates"][RULES[0]]["confidence"] == 0.8
  rows = [r for table in stats["tests"].values() for r in table]
  assert all(r["seeds_needed"] == 64 for r in rows)
  from disco.comparison import two_sample

  p_holm = two_sample.holm_bonferroni([r["p_value"] for r in rows])
  assert [r["p_holm"] for r in rows] == pytest.approx(list(p_holm))
  assert all(r["confidence"] == 0.8 for r in rows)
  # The same runs at the defaults: narrower task-free intervals at 80%
  # than the task bootstrap's, Holm within each table.
  default = sweep["stats"]
  for table, rows_ in default["tests"].items():
    assert [r["p_holm"] for r in rows_] == pytest.approx(
        list(two_sample.holm_bonferroni([r["p_value"] for r in rows_]))
    ), table


def test_aggregates_existing_run_folders(sweep, tmp_path):
  runs = sorted(
      str(p.parent) for p in (sweep["out"] / "runs").rglob("summary.json")
  )
  stats = comparison.compare(
      _config(
          [
              f"--config.run_dirs={tuple(runs)}",
              "--config.bootstrap_reps=50",
              "--config.num_points=5",
              f"--config.output_dir={tmp_path / 'agg'}",
          ]
      ),
      log=lambda _: None,
  )
  assert (
      stats["normalized_final_scores"]
      == sweep["stats"]["normalized_final_scores"]
  )
  assert stats["tests"] == sweep["stats"]["tests"]


def _copy_runs(sweep, tmp_path):
  """Copies of the sweep's run folders (to be edited), sorted."""
  runs = []
  for p in sorted((sweep["out"] / "runs").rglob("summary.json")):
    runs.append(tmp_path / p.parent.relative_to(sweep["out"]))
    shutil.copytree(p.parent, runs[-1])
  return runs


def _aggregate(runs, tmp_path, *extra):
  return comparison.compare(
      _config(
          [
              f"--config.run_dirs={tuple(str(r) for r in runs)}",
              "--config.bootstrap_reps=50",
              *extra,
              f"--config.output_dir={tmp_path / 'agg'}",
          ]
      ),
      log=lambda _: None,
  )


def test_a_diverged_seed_is_named_not_compared(sweep, tmp_path):
  runs = _copy_runs(sweep, tmp_path)
  metrics = analysis.read_metrics_csv(runs[0] / "metrics.csv")
  metrics["diverged"][1, 2:] = 1
  analysis.write_metrics_csv(runs[0] / "metrics.csv", metrics)
  with pytest.raises(errors.UsageError, match="Diverged") as info:
    _aggregate(runs, tmp_path)
  step = int(metrics["env_steps"][1, 2])
  assert f"seed {int(metrics['seed'][1, 0])} of " in str(info.value)
  assert f"at env step {step}" in str(info.value)


def _no_episodes_until(run, seed_index, iterations):
  """Moves the episodes one seed of ``run`` ended in its first
  ``iterations`` iterations to the iteration after them."""
  metrics = analysis.read_metrics_csv(run / "metrics.csv")
  for name in ("episodes", "return_sum"):
    x = metrics[name]
    x[seed_index, iterations] += x[seed_index, :iterations].sum()
    x[seed_index, :iterations] = 0
  analysis.write_metrics_csv(run / "metrics.csv", metrics)
  return metrics


def test_curve_points_before_any_episode_ended_are_left_out(sweep, tmp_path):
  # A budget short against the episodes: one seed ends its first episode
  # after the first evaluation point (240 of 1200 env steps).
  runs = _copy_runs(sweep, tmp_path)
  metrics = _no_episodes_until(runs[0], 1, 12)
  stats = _aggregate(runs, tmp_path, "--config.num_points=5")
  first_end = int(metrics["env_steps"][1, 12])
  points = stats["evaluation_points"]
  assert points == [480, 720, 960, 1200] and points[0] >= first_end
  with open(tmp_path / "agg" / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert {int(r["env_steps"]) for r in rows} == set(points)
  assert all(r["return"] for r in rows)


def test_a_seed_that_ended_no_episode_is_named(sweep, tmp_path):
  runs = _copy_runs(sweep, tmp_path)
  metrics = analysis.read_metrics_csv(runs[1] / "metrics.csv")
  for name in ("episodes", "return_sum"):
    metrics[name][2] = 0
  analysis.write_metrics_csv(runs[1] / "metrics.csv", metrics)
  with pytest.raises(errors.UsageError, match="raise total_env_steps") as info:
    _aggregate(runs, tmp_path)
  assert f"seed {int(metrics['seed'][2, 0])} of " in str(info.value)


def test_sharded_processes_split_the_runs(tmp_path):
  plans = [
      comparison.build(
          _config(
              [
                  *TINY,
                  f"--config.shard={i}/3",
                  f"--config.output_dir={tmp_path}",
              ]
          )
      )
      for i in range(3)
  ]
  cells = [c.output_dir for p in plans for c in p.my_cells()]
  assert sorted(cells) == sorted(c.output_dir for c in plans[0].cells)
  assert len(set(cells)) == 4


def test_one_environment_with_two_settings_gives_two_runs(tmp_path):
  envs = ("delayed_chain:chain_length=3", "delayed_chain:chain_length=4")
  plan = comparison.build(
      _config(
          tiny_with(
              [f"--config.envs={envs}", f"--config.output_dir={tmp_path}"]
          )
      )
  )
  folders = {c.output_dir.name for c in plan.cells}
  assert folders == {
      "delayed_chain_chain_length_3",
      "delayed_chain_chain_length_4",
  }


def test_two_runs_rule_files_of_one_name_are_told_apart(tmp_path):
  """meta_params.npz of two meta-training runs: each named by its folder."""
  rules = [
      str(_lpg_rule_file(tmp_path / run / "meta_params.npz"))
      for run in ("run-a", "run-b")
  ]
  flags = [
      f
      for f in faults.TINY_COMPARE_FLAGS
      if not f.startswith("--config.rules=")
  ]
  plan = comparison.build(
      _config(
          [
              *flags,
              f"--config.rules={tuple(rules)!r}",
              f"--config.output_dir={tmp_path / 'out'}",
          ]
      )
  )
  assert sorted({c.label for c in plan.cells}) == [
      "run-a-meta_params",
      "run-b-meta_params",
  ]


def test_ppo_gets_its_own_loop(tmp_path):
  """rule_overrides give PPO its epochs, minibatches and reward
  normalisation, the other rules keep one learner step per batch."""
  plan = comparison.build(
      _config(
          tiny_with(
              [
                  "--config.rules=('actor_critic', 'ppo')",
                  "--config.rule_overrides=('ppo:update_epochs=2,"
                  "num_minibatches=2,normalize_rewards=True,"
                  "anneal_learning_rate=False',)",
                  f"--config.output_dir={tmp_path}",
              ]
          )
      )
  )
  plans = {
      c.rule: evaluation.build(c.eval_config(plan.settings)) for c in plan.cells
  }
  loops = {rule: p.loop_config for rule, p in plans.items()}
  assert (loops["ppo"].update_epochs, loops["ppo"].num_minibatches) == (2, 2)
  assert loops["ppo"].normalize_rewards
  assert not plans["ppo"].rule.settings.anneal_learning_rate
  assert loops["actor_critic"].updates_per_learning_iteration == 1
  assert not loops["actor_critic"].normalize_rewards


@pytest.mark.parametrize(
    "args, match",
    [
        (["--config.rules=('actor_critic', 'nope')"], "Unknown rule 'nope'"),
        (["--config.envs=('catch', 'pongg')"], "Unknown environment 'pongg'"),
        (["--config.envs=('catch:rowz=5',)"], "did you mean 'rows'"),
        (["--config.num_seeds=1"], "too few for the welch test"),
        (
            ["--config.rules=('actor_critic',)", "--config.num_seeds=1"],
            "bootstrap intervals.*at least 2",
        ),
        (["--config.test=mann_whitney", "--config.num_seeds=3"], "at least 4"),
        (
            ["--config.envs=('lpg/sparse',)"],
            "No normalisation entry.*references",
        ),
        (["--config.rule_overrides=('ppo:num_envs=4',)"], "not one of"),
        (
            [
                "--config.rules=('actor_critic', 'ppo')",
                "--config.rule_overrides=('ppo:num_minibatches=3',)",
            ],
            "divisible by num_minibatches",
        ),
        (
            ["--config.rule_overrides=('actor_critic:nope=4',)"],
            "unknown setting",
        ),
        (["--config.shard=3/3"], "0 <= i < n"),
        (["--config.confidence=95"], "confidence must be in"),
        (["--config.alpha=1.5"], "alpha must be in"),
        (["--config.min_effect=-0.5"], "min_effect must be a number > 0"),
        (["--config.test=bootstrap", "--config.num_seeds=2"], "at least 3"),
        (
            [
                "--config.envs=('catch:rows=5,columns=5', 'catch:columns=5,rows=5')"
            ],
            "run actor_critic on catch/5x5 twice",
        ),
        (["--config.run_dirs=('/nonexistent/run',)"], "Cannot read the run"),
    ],
)
def test_bad_input_is_one_line(args, match, tmp_path):
  with pytest.raises(errors.UsageError, match=match) as info:
    comparison.compare(
        _config(tiny_with([*args, f"--config.output_dir={tmp_path / 'x'}"])),
        log=lambda _: None,
    )
  assert "\n" not in str(info.value)
  assert not (tmp_path / "x" / "runs").exists()


def test_command_line_error_exits_2(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.compare",
          "--config.rules=('bogus',)",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      timeout=300,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("disco-compare: error:")


def test_parse_spec():
  assert specs.parse_spec("catch:rows=5,columns=6", "env") == (
      "catch",
      dict(rows=5, columns=6),
  )
  assert specs.parse_spec("x:a=(1, 2),b=text", "env") == (
      "x",
      dict(a=(1, 2), b="text"),
  )
  assert specs.parse_spec("gymnax/CartPole-v1", "env") == (
      "gymnax/CartPole-v1",
      {},
  )
  with pytest.raises(errors.UsageError, match="name:key=value"):
    specs.parse_spec("catch:rows", "environment")
  assert json.loads(json.dumps(specs.parse_spec("a:b=1", "x")))


def test_settings_report_every_bad_value_at_once(tmp_path):
  config = _config(
      tiny_with(
          [
              "--config.alpha=1.5",
              "--config.confidence=95",
              "--config.shard=3/3",
              "--config.rule_overrides=('actor_critic:nope=4',)",
              # A disco-eval setting of every run: reported once.
              "--config.iterations_per_call=0",
              f"--config.output_dir={tmp_path / 'x'}",
          ]
      )
  )
  with pytest.raises(errors.UsageError) as info:
    comparison.CompareSettings.from_config(config)
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith("5 problems: (1) "), message
  for text in (
      "alpha must be in (0, 1)",
      "confidence must be in (0, 1)",
      "0 <= i < n",
      "unknown setting(s) ['nope']",
      "config.iterations_per_call must be >= 1",
  ):
    assert message.count(text) == 1, text


def test_runs_saved_with_old_rule_settings_stay_finished(sweep, tmp_path):
  """A run folder written before policy gradient's entropy_cost and pg_cost
  became hyper-parameters (they were rule_kwargs) is not run again."""
  out = tmp_path / "sweep"
  shutil.copytree(sweep["out"], out)
  plan = comparison.build(_config([*TINY, f"--config.output_dir={out}"]))
  (cell,) = [
      c for c in plan.cells if c.rule == "policy_gradient" and c.env == "catch"
  ]
  assert cell.status(plan.settings) == (True, None)
  path = cell.output_dir / "config.json"
  record = json.loads(path.read_text())
  saved = record["rule_settings"]
  for key in ("entropy_cost", "pg_cost"):
    saved["rule_kwargs"][key] = saved["hyper_params"].pop(key)
  path.write_text(json.dumps(record))
  # Read as today's keys, with a warning naming the folder and both keys.
  with pytest.warns(migrations.OldSettingWarning) as caught:
    assert cell.status(plan.settings) == (True, None)
  messages = [str(w.message) for w in caught]
  for key in ("entropy_cost", "pg_cost"):
    assert any(
        m.startswith(str(path))
        and f"rule_kwargs.{key} is read as hyper_params.{key}" in m
        for m in messages
    ), messages
  saved["rule_kwargs"]["normalize_adv"] = not saved["rule_kwargs"][
      "normalize_adv"
  ]
  path.write_text(json.dumps(record))
  with pytest.warns(migrations.OldSettingWarning):
    finished, why = cell.status(plan.settings)
  assert not finished and "normalize_adv" in why, why


def test_runs_saved_before_presets_and_normalisation_stay_finished(
    sweep, tmp_path
):
  """A run folder written before the preset and normalisation keys existed is
  not run again; one that ran with normalisation on is."""
  out = tmp_path / "sweep"
  shutil.copytree(sweep["out"], out)
  plan = comparison.build(_config([*TINY, f"--config.output_dir={out}"]))
  cell = plan.cells[0]
  path = cell.output_dir / "config.json"
  record = json.loads(path.read_text())
  for key in ("preset", *migrations.ADDED_EVAL_KEYS):
    del record["config"][key]
  path.write_text(json.dumps(record))
  assert cell.status(plan.settings) == (True, None)
  record["config"]["normalize_rewards"] = True
  path.write_text(json.dumps(record))
  finished, why = cell.status(plan.settings)
  assert not finished and "normalize_rewards" in why, why


# ------------------------------------------- input files by digest ----


def _lpg_rule_file(path, shift=0.0):
  """An LPG rule file: random meta-parameters (plus ``shift``) and metadata
  naming the rule, so that ``shift`` changes the contents, not the
  settings."""
  params = jax.tree.map(
      lambda x: np.asarray(x) + np.asarray(shift, np.asarray(x).dtype),
      resolve.resolve_rule("lpg").meta_params,
  )
  return weights.save_meta_params(path, params, metadata=dict(rule="lpg"))


def _tiny_compare_config(rule, out):
  flags = [
      f
      for f in faults.TINY_COMPARE_FLAGS
      if not f.startswith("--config.rules=")
  ]
  return _config(
      [*flags, f"--config.rules=({str(rule)!r},)", f"--config.output_dir={out}"]
  )


def test_a_rule_file_changed_at_the_same_path_runs_again(tmp_path, monkeypatch):
  """Issue 67: config.json records the rule file by SHA-256; rerunning
  keeps the run while the file is the same, and runs it again, naming the
  file, once it is rewritten at the same path with other contents."""
  monkeypatch.chdir(tmp_path)
  rule = _lpg_rule_file(Path("rules") / "mine.npz")  # relative, as typed
  out = tmp_path / "sweep"
  cell = out / "runs" / "mine" / "catch_5x5"

  def rerun():
    lines = []
    comparison.compare(
        _tiny_compare_config(rule, out), log=lines.append, progress=False
    )
    return lines

  rerun()
  record = json.loads((cell / "config.json").read_text())
  old = files.file_digest(rule)
  assert record["run"]["input_files"] == {
      "rule": {"path": str(rule), "sha256": old}
  }
  finished_at = (cell / "summary.json").stat().st_mtime_ns
  lines = rerun()
  assert any("1 finished already" in line for line in lines), lines
  assert not any("again" in line for line in lines), lines
  assert (cell / "summary.json").stat().st_mtime_ns == finished_at

  _lpg_rule_file(rule, shift=1.0)  # same path, same settings, new contents
  new = files.file_digest(rule)
  assert new != old
  lines = rerun()
  assert any("0 finished already" in line for line in lines), lines
  (again,) = [line for line in lines if "again" in line]
  assert (
      f"rule file {rule} changed since the run (sha256 {old[:12]}... -> "
      f"{new[:12]}...)" in again
  ), again
  assert "other settings" not in again
  record = json.loads((cell / "config.json").read_text())
  assert record["run"]["input_files"]["rule"]["sha256"] == new

  # A run folder written before digests were recorded cannot be verified.
  del record["run"]["input_files"]
  (cell / "config.json").write_text(json.dumps(record))
  plan = comparison.build(_tiny_compare_config(rule, out))
  finished, why = plan.cells[0].status(plan.settings)
  assert not finished
  assert (
      why
      == f"no digest of rule file {rule} was recorded, so it cannot be verified"
  )


def _ruleset_file(path, goal):
  """An XLand ruleset benchmark file (xminigrid's format) of two rulesets
  whose goals are all ``goal``."""
  benchmark = dict(
      goals=np.full((2, 5), goal, np.uint8),
      rules=np.zeros((2, 1, 7), np.uint8),
      init_tiles=np.zeros((2, 2, 2), np.uint8),
      num_rules=np.zeros((2, 1), np.uint8),
  )
  with bz2.open(path, "wb") as f:
    pickle.dump(benchmark, f)
  return path


def test_validation_rows_refuse_a_ruleset_file_changed_since(tmp_path):
  """Issue 67: disco-validate keeps the rows of validated meta-steps; they
  are kept only while the held-out environments' files (an XLand ruleset
  file) have the digests validation.json recorded."""
  ruleset = _ruleset_file(tmp_path / "ruleset.bz2", 1)
  settings = validation_settings.parse_settings(
      dict(
          validation_settings.default_config(),
          envs=(
              dict(
                  env="xminigrid/XLand-MiniGrid-R1-9x9",
                  env_settings=dict(benchmark_path=str(ruleset)),
              ),
          ),
      )
  )

  def export(path, params, step, **extra):
    return weights.save_meta_params(
        path, params, metadata=dict(rule="lpg", meta_step=step, **extra)
    )

  run = tmp_path / "run"
  record = record_lib.Record(run, settings, export)
  key, scores = settings.envs[0].key, np.array([0.5, 0.5])
  result = record_lib.StepResult(
      meta_step=0,
      returns={key: scores},
      normalized={key: scores},
      aggregate=0.5,
  )
  assert record.add(result, {"m": {"w": np.zeros(2, np.float32)}})
  role = "validation.envs[0].env_settings.benchmark_path"
  old = files.file_digest(ruleset)
  saved = json.loads(record.settings_path.read_text())
  assert saved["input_files"] == {role: {"path": str(ruleset), "sha256": old}}
  record_lib.Record(run, settings, export)  # the same file: the rows stand

  _ruleset_file(ruleset, 2)
  new = files.file_digest(ruleset)
  with pytest.raises(errors.UsageError) as info:
    record_lib.Record(run, settings, export)
  message = str(info.value)
  assert "\n" not in message
  assert (
      f"{role} file {ruleset} changed since its rows were made (sha256 "
      f"{old[:12]}... -> {new[:12]}...)" in message
  ), message

  # A validation.json written before digests were recorded: unverifiable.
  del saved["input_files"]
  record.settings_path.write_text(json.dumps(saved))
  with pytest.raises(errors.UsageError, match="cannot be verified"):
    record_lib.Record(run, settings, export)
