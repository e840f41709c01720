"""``disco-compare``'s per-rule hyper-parameters from flags and its baseline
tuning (a tiny grid on Catch 5x5)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
import subprocess
import sys

from absl import flags
import numpy as np
import pytest

from disco import checks
from disco import comparison
from disco import errors
from disco.comparison import results as results_lib
from disco.comparison import settings as settings_lib
from disco.environments import reference_scores
from disco.launch import common
from disco.launch import compare

import test_compare_launcher

# test_compare_launcher's tiny grid, with one rule and one environment.
TINY = test_compare_launcher.tiny_with(
    [
        "--config.rules=('actor_critic',)",
        "--config.envs=('catch:rows=5,columns=5',)",
    ]
)
TUNE = [
    "--config.tune.rules=('actor_critic',)",
    "--config.tune.grid=learning_rate=(1e-4,3e-2)",
    "--config.tune.num_seeds=2",
    "--config.tune.seed=10",
    "--config.tune.keep_untuned=True",
    "--config.hyper_params.actor_critic.entropy_cost=0.05",
]
ENV = "catch/5x5"


def _config(argv):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["disco-compare", *argv],
      checks.config_path(settings_lib.CONFIG_NAME),
      "help",
      flag_values=fv,
      prepare=compare.prepare_config,
  )
  return fv.config


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
  out = tmp_path_factory.mktemp("tune") / "cmp"
  lines = []
  stats = comparison.compare(
      _config([*TINY, *TUNE, f"--config.output_dir={out}"]),
      log=lines.append,
      progress=False,
  )
  return dict(out=out, stats=stats, lines=lines)


def _run_config(folder: Path) -> dict:
  return json.loads((folder / "config.json").read_text())


def test_choice_is_the_argmax_of_the_grid_scores(tuned):
  out = tuned["out"]
  folders = sorted((out / "tuning" / "actor_critic" / "catch_5x5").iterdir())
  assert len(folders) == 2
  scores = {}
  for folder in folders:
    run = results_lib.load_run(folder)
    lr = _run_config(folder)["config"]["learning_rate"]
    scores[lr] = reference_scores.normalize(run.final_scores(), ENV).mean()
  assert len(set(scores.values())) == 2, scores  # the grid discriminates
  best = max(scores, key=scores.get)
  (choice,) = tuned["stats"]["tuning"]["choices"]
  assert choice["point"] == dict(learning_rate=best)
  assert choice["score"] == pytest.approx(scores[best])
  reported = _run_config(out / "runs" / "actor_critic-tuned" / "catch_5x5")
  assert reported["config"]["learning_rate"] == best
  # The rule's flag-given hyper-parameter reaches every run.
  for folder in [*folders, out / "runs" / "actor_critic" / "catch_5x5"]:
    settings = _run_config(folder)["rule_settings"]
    assert settings["hyper_params"]["entropy_cost"] == 0.05


def test_tuning_seeds_are_kept_apart(tuned):
  out = tuned["out"]
  tuning = [
      results_lib.load_run(f).seeds
      for f in (out / "tuning" / "actor_critic" / "catch_5x5").iterdir()
  ]
  assert tuning == [(10, 11), (10, 11)]
  for label in ("actor_critic", "actor_critic-tuned"):
    run = results_lib.load_run(out / "runs" / label / "catch_5x5")
    assert run.seeds == (0, 1, 2)


def test_report_holds_the_choice(tuned):
  out, stats = tuned["out"], tuned["stats"]
  (choice,) = stats["tuning"]["choices"]
  lr = choice["point"]["learning_rate"]
  assert set(stats["aggregates"]) == {"actor_critic", "actor_critic-tuned"}
  report = (out / "report.md").read_text()
  assert "## Tuned baselines" in report
  assert f"| actor_critic-tuned | {ENV} | learning_rate={lr:g} |" in report
  saved = json.loads((out / "statistics.json").read_text())["tuning"]
  assert saved["choices"][0]["point"] == dict(learning_rate=lr)
  assert saved["seeds"] == [10, 11]
  with open(out / "tuning.csv") as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 2
  chosen = [r for r in rows if r["chosen"] == "1"]
  assert len(chosen) == 1 and float(chosen[0]["learning_rate"]) == lr
  assert np.argmax([float(r["score"]) for r in rows]) == rows.index(chosen[0])
  # The chosen point on the reported seeds too, and how the grid trained.
  reported = saved["choices"][0]["reported"]
  assert len(reported["per_seed"]) == 3
  assert float(chosen[0]["reported_score"]) == pytest.approx(reported["score"])
  assert "| one vmapped program (2 points) |" in report
  assert any(
      "2 point(s)" in line and "as one vmapped program" in line
      for line in tuned["lines"]
  )


def test_resumed_tuning_trains_nothing_again(tuned):
  out = tuned["out"]
  before = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
  lines = []
  comparison.compare(
      _config([*TINY, *TUNE, f"--config.output_dir={out}"]),
      log=lines.append,
      progress=False,
  )
  after = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
  assert before == after and len(before) == 4


@pytest.mark.parametrize(
    "args, match",
    [
        (
            ["--config.tune.grid=learning_rate=()"],
            "learning_rate has no values",
        ),
        (["--config.tune.grid=nope=(1,2)"], r"unknown setting\(s\) \['nope'\]"),
        (["--config.tune.grid="], "config.tune.grid is empty"),
        (["--config.tune.grid=learning_rate=(a,b)"], "must be numbers"),
        (["--config.tune.seed=2"], "overlap the reported seeds"),
        (["--config.tune.rules=('ppo',)"], "not one of config.rules"),
    ],
)
def test_bad_grid_is_one_line_before_training(args, match, tmp_path):
  argv = [
      a
      for a in TUNE
      if a.partition("=")[0] not in {b.partition("=")[0] for b in args}
  ]
  with pytest.raises(errors.UsageError, match=match) as info:
    comparison.compare(
        _config([*TINY, *argv, *args, f"--config.output_dir={tmp_path}/x"]),
        log=lambda _: None,
    )
  assert "\n" not in str(info.value)
  assert not (tmp_path / "x").exists()


def test_unknown_hyper_parameter_flag_exits_2(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.compare",
          "--config.rules=('actor_critic', 'ppo')",
          "--config.hyper_params.ppo.entropy=0.1",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      env=dict(os.environ),
      timeout=300,
  )
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert "config.hyper_params.ppo.entropy" in line
  assert "clip_epsilon, discount_factor, entropy_cost" in line


def test_per_rule_settings_reach_each_rules_runs(tmp_path):
  config = _config(
      [
          "--config.rules=('actor_critic', 'ppo')",
          "--config.envs=('catch:rows=5,columns=5',)",
          "--config.hyper_params.ppo.clip_epsilon=0.1",
          "--config.rule_kwargs.ppo.normalize_advantages=False",
          "--config.hyper_params.actor_critic.entropy_cost=0.03",
          f"--config.output_dir={tmp_path}",
      ]
  )
  plan = comparison.build(config)
  settings = {c.label: c.build(plan.settings).rule.settings for c in plan.cells}
  assert settings["ppo"].hyper_params["clip_epsilon"] == 0.1
  assert settings["ppo"].rule_kwargs["normalize_advantages"] is False
  assert settings["actor_critic"].hyper_params["entropy_cost"] == 0.03
  assert settings["ppo"].hyper_params["entropy_cost"] == 0.01  # its default
  assert settings["actor_critic"].rule_kwargs["normalize_adv"] is False


@pytest.mark.parametrize("rules", ["ppo", "'ppo'", "('ppo',)"])
def test_per_rule_settings_follow_every_spelling_of_the_rules(rules):
  """``--config.rules=ppo`` is ``('ppo',)`` to the flag parser, so its
  per-rule settings exist too."""
  config = _config(
      [
          f"--config.rules={rules}",
          "--config.rule_kwargs.ppo.normalize_advantages=False",
          "--config.hyper_params.ppo.clip_epsilon=0.1",
      ]
  )
  assert tuple(config.rules) == ("ppo",)
  assert config.rule_kwargs.ppo.normalize_advantages is False
  assert config.hyper_params.ppo.clip_epsilon == 0.1
