"""The benchmark scripts' shared pieces: ``benchmarks/timing.py``,
``benchmarks/cli.py``, ``benchmarks/meta_runs.py`` and the distillation
benchmark's normalised return and the environment suite's run settings (no
script runs)."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest

from benchmarks import cli
from benchmarks import meta_runs
from benchmarks import timing


def test_interleave_warms_up_each_then_times_round_robin():
  calls = []

  def candidate(name, seconds):
    def call():
      calls.append(name)
      return seconds.pop(0)

    return call

  warmed, rounds = [], []
  times = timing.interleave(
      dict(
          a=candidate("a", [9.0, 8.0, 1.0, 3.0, 2.0]),
          b=candidate("b", [5.0, 4.0, 2.0, 2.0, 6.0]),
      ),
      rounds=3,
      warmup=2,
      on_warm=lambda name, s: warmed.append((name, list(s))),
      on_round=lambda i, s: rounds.append((i, dict(s))),
  )
  assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
  assert warmed == [("a", [9.0, 8.0]), ("b", [5.0, 4.0])]
  assert rounds[0] == (0, dict(a=1.0, b=2.0)) and len(rounds) == 3
  assert times.first == dict(a=9.0, b=5.0)
  assert times.rounds == dict(a=[1.0, 3.0, 2.0], b=[2.0, 2.0, 6.0])
  assert times.median("a") == 2.0 and times.mean("b") == pytest.approx(10 / 3)
  assert times.ratio("b", "a") == 1.0
  assert times.compile_seconds("a") == 7.0
  assert timing.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_stepper_advances_its_state_and_keeps_the_logs():
  stepper = timing.Stepper(lambda s: (s + 1, {"step": s}), 0, logs=True)
  first, times = timing.repeat(stepper, 3)
  assert stepper.state == 4 and stepper.logs == {"step": 3}
  assert first >= 0 and len(times) == 3 and min(times) >= 0
  plain = timing.Stepper(lambda s: s * 2, 1)
  plain()
  assert plain.state == 2 and plain.logs is None


def test_stopwatch_laps_and_phases():
  clock = timing.Stopwatch()
  laps = [clock.lap() for _ in range(3)]
  assert min(laps) >= 0 and clock.seconds() >= 0
  with timing.Stopwatch() as phase:
    sum(range(10_000))
  assert phase.wall >= 0 and phase.cpu >= 0


def _flags(name):
  return lambda p: p.add_argument(f"--{name}", default=name)


def test_run_commands_runs_one_command_or_all_in_turn():
  ran = []
  commands = dict(
      run=cli.Command(
          lambda a: ran.append(("run", a.root, a.run)), _flags("run")
      ),
      report=cli.Command(
          lambda a: ran.append(("report", a.root, a.report)), _flags("report")
      ),
  )

  def shared(p):
    p.add_argument("--root", required=True)

  cli.run_commands(
      "A script.\n\nMore.",
      commands,
      shared,
      ("run", "report"),
      ["report", "--root=r"],
  )
  assert ran == [("report", "r", "report")]
  ran.clear()
  args = cli.run_commands(
      "A script.",
      commands,
      shared,
      ("run", "report"),
      ["all", "--root=r", "--run=x", "--report=y"],
  )
  assert ran == [("run", "r", "x"), ("report", "r", "y")]
  assert args.command == "all"
  with pytest.raises(SystemExit):  # the report's own flag is not run's
    cli.run_commands(
        "A script.", commands, shared, (), ["run", "--root=r", "--report=y"]
    )


def test_tables_csv_and_child_results(tmp_path, capsys):
  assert cli.table_header(["a", "b"]) == "| a | b |\n|---|---|"
  assert cli.table_row(["x", 1]) == "| x | 1 |"
  cli.write_csv(tmp_path / "rows.csv", [dict(a=1, b=2), dict(a=3, b=4)])
  with open(tmp_path / "rows.csv", newline="") as f:
    assert list(csv.DictReader(f)) == [dict(a="1", b="2"), dict(a="3", b="4")]
  cli.write_table(tmp_path, "| t |\n")
  assert (tmp_path / "table.md").read_text() == "| t |\n"
  assert "| t |" in capsys.readouterr().out
  figures, proc = cli.child_result(
      [sys.executable, "-c", "print('noise'); print('RESULT {\"x\": 1}')"]
  )
  assert figures == {"x": 1} and proc.returncode == 0
  figures, proc = cli.child_result(
      [sys.executable, "-c", "raise SystemExit(3)"]
  )
  assert figures is None and proc.returncode == 3


def test_run_each_skips_finished_runs_and_keeps_the_order(tmp_path, capsys):
  started = []
  meta_runs.run_each(
      tmp_path,
      meta_runs.seed_major(["a", "b"], 2),
      lambda name, out: out.name == "b-s0",
      lambda name, seed, out: started.append((name, seed, out.name)),
      only=["a-s0", "b-s0", "a-s1"],
  )
  assert started == [("a", 0, "a-s0"), ("a", 1, "a-s1")]
  assert "b-s0: done" in capsys.readouterr().out
  for name in ("a-s1", "a-s0", "b-s0"):
    (tmp_path / name).mkdir()
  assert [p.name for p in meta_runs.run_dirs(tmp_path, "a")] == ["a-s0", "a-s1"]


def test_pick_rules_takes_the_best_validated_run_and_refuses_a_change(
    tmp_path, monkeypatch, capsys
):
  scores = {"a-s0": {0: 0.1, 50: 0.4}, "a-s1": {0: 0.3}, "b-s0": {0: 0.2}}
  monkeypatch.setattr(
      meta_runs, "validation_scores", lambda run_dir: scores[run_dir.name]
  )
  for name in scores:
    (tmp_path / name).mkdir()
    (tmp_path / name / "best_meta_params.npz").write_text(name)
  picked = meta_runs.pick_rules(tmp_path, {"best": ["a", "b"], "only_b": ["b"]})
  assert picked["best"].read_text() == "a-s0"
  assert picked["only_b"].read_text() == "b-s0"
  assert meta_runs.pick_rules(tmp_path, {"best": ["a", "b"]}) == {
      "best": picked["best"]
  }
  scores["b-s0"] = {0: 0.9}  # another run is now the best
  with pytest.raises(SystemExit) as exit_info:
    meta_runs.pick_rules(tmp_path, {"best": ["a", "b"]})
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "best best rule changed" in err[0], err


def test_env_throughput_runs_discrete_and_continuous_adapters(capsys):
  pytest.importorskip("jumanji")
  from benchmarks import env_throughput  # pylint: disable=g-import-not-at-top

  ratios = env_throughput.main(
      [
          "--envs",
          "gymnax/Pendulum-v1,jumanji/Sokoban-v0",
          "--batch",
          "2",
          "--steps",
          "3",
          "--rounds",
          "1",
      ]
  )
  assert set(ratios) == {"gymnax/Pendulum-v1", "jumanji/Sokoban-v0"}
  assert all(r > 0 for r in ratios.values())
  assert "jumanji/Sokoban-v0: ours" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env_settings", "reset_ratio"], "is not name=value"),
        (["--envs", "catch"], "is not one of"),
    ],
)
def test_env_throughput_bad_arguments_are_one_line(args, message, capsys):
  from benchmarks import env_throughput  # pylint: disable=g-import-not-at-top

  with pytest.raises(SystemExit) as raised:
    env_throughput.main(args)
  assert raised.value.code == 2
  assert message in capsys.readouterr().err


def test_normalised_return_and_its_interval():
  from benchmarks import distillation

  teacher = np.array([7.0, 9.0, 8.0])
  # Disco103 against itself is 1 and its interval holds 1.
  point, low, high = distillation.normalised_interval(teacher, teacher, 1.0)
  assert point == pytest.approx(1.0) and low < 1.0 < high
  # Halfway between random (1) and Disco103's mean (8): 0.5, whatever the
  # seeds' order.
  half = np.array([5.0, 4.0, 4.5])
  point, low, high = distillation.normalised_interval(half, teacher, 1.0)
  assert point == pytest.approx(0.5) and low <= 0.5 <= high
  # Equal seeds leave only the teacher's spread in the interval.
  flat = np.full(3, 4.5)
  point, low, high = distillation.normalised_interval(flat, teacher, 1.0)
  assert low == pytest.approx(3.5 / 8.0) and high == pytest.approx(3.5 / 6.0)
  # No ratio where Disco103 is not clearly above random.
  level = np.array([0.5, 1.5, 2.5])
  assert distillation.normalised_interval(half, level, 1.0) is None


@pytest.mark.parametrize(
    "args, message",
    [
        (dict(suite_students="tiny"), "student 'tiny': give h<units>"),
        (dict(suite_students="h7"), "no rule file for student h7"),
        (dict(suite_students="h7_minatr"), "then optionally _minatar"),
        (dict(suite_students="h7_minatar"), "no rule file for student h7_min"),
    ],
)
def test_distillation_suite_bad_students_are_one_line(
    args, message, tmp_path, capsys
):
  from benchmarks import distillation

  namespace = type("Args", (), dict(root=str(tmp_path), controls="", **args))
  with pytest.raises(SystemExit) as exit_info:
    distillation._suite_rules(namespace)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0], err


def test_env_suite_gives_every_rule_the_suites_torso(tmp_path):
  """A rule file exported with a convolutional torso (the MinAtar student)
  runs flat where the suite's observations are flat, and with the suite's
  channels where they are images."""
  from benchmarks import distillation
  from benchmarks import env_suite
  from disco.evaluation import plan as plan_lib

  rule = str(distillation.KEPT_RULES / "student_h32_minatar.npz")
  for env, conv in (("lpg/dense", ()), ("gymnax/Breakout-MinAtar", (8,))):
    config = env_suite.run_config(rule, env, {}, 1000, conv, 1, tmp_path)
    plan = plan_lib.build(config, log=lambda _: None)
    assert tuple(plan.rule.settings.network["conv_channels"]) == conv, env


def test_distillation_suite_checks_every_environment_first(capsys):
  from benchmarks import distillation

  namespace = type("Args", (), dict(suite_envs="lpg/dense,gymnax/Pong"))
  with pytest.raises(SystemExit) as exit_info:
    distillation._suite_envs(namespace)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "'gymnax/Pong' is not in the suite" in err[0], err
