"""One line for bad input and for an interrupt, in every launcher (issue 67,
items 10, 11 and 13).

Each launcher runs from the command line as a user would start it
(``python -m disco.launch.<launcher>``), at tiny sizes or with a setting that
stops it before anything is trained.
"""

from __future__ import annotations

import configparser
import importlib
import inspect
import os
from pathlib import Path
import random
import re
import signal
import subprocess
import sys
import time

from absl import flags
import faults
from ml_collections import config_dict
import pytest

from disco import checks
from disco import errors
from disco import launch
from disco.launch import common

import conftest
from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG_FLAGS
from meta_settings import subprocess_env

PROGRAMS = {
    module.rsplit(".", 1)[1]: p for module, p in launch.PROGRAMS.items()
}


def launch_process(launcher, args, cwd):
  return subprocess.run(
      faults.command(launcher, args),
      cwd=cwd,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=600,
  )


def message_lines(stderr: str, program: str) -> list[str]:
  """stderr's lines without progress bars; a line of ``program`` printed
  right after a progress bar, on its line, counts as a line of its own."""
  lines = []
  for line in stderr.splitlines():
    _, mark, rest = line.partition(f"{program}: ")
    line = mark + rest if mark else line
    if line.strip() and "<" not in line.partition("[")[2][:12]:
      lines.append(line)
  return lines


def assert_one_line(result, status: int, program: str, *match: str) -> str:
  lines = message_lines(result.stderr, program)
  assert result.returncode == status, result.stderr[-3000:]
  assert len(lines) == 1, result.stderr[-3000:]
  assert lines[0].startswith(f"{program}: error: "), lines[0]
  for text in match:
    assert text in lines[0], lines[0]
  return lines[0]


# ------------------------------------------------------------ (a) seeds ----


@pytest.mark.parametrize(
    "launcher, args, match",
    [
        (
            "evaluate",
            [*faults.TINY_EVAL_FLAGS, "--config.seed=9223372036854775807"],
            "config.seed must be <= 4294967294",  # 2 seeds: seed, seed + 1
        ),
        (
            "evaluate",
            [
                *faults.TINY_EVAL_FLAGS,
                "--config.num_seeds=1",
                "--config.seed=4294967296",
            ],
            "config.seed must be <= 4294967295",
        ),
        (
            "meta_train",
            [
                *TINY_FLAGS,
                *TINY_LPG_FLAGS,
                "--config.num_meta_steps=1",
                "--config.init_seed=18446744073709551616",
            ],
            "config.init_seed must be <= 4294967295",
        ),
    ],
)
def test_a_seed_beyond_32_bits_is_one_line_and_writes_nothing(
    launcher, args, match, tmp_path
):
  out = tmp_path / "run"
  result = launch_process(
      launcher, [*args, f"--config.output_dir={out}"], cwd=tmp_path
  )
  assert_one_line(result, 2, PROGRAMS[launcher], match, "32-bit")
  assert not out.exists()


def test_seeds_are_checked_up_to_the_last_one():
  assert checks.check_seed(checks.MAX_SEED) == 2**32 - 1
  assert checks.check_seed(checks.MAX_SEED - 2, count=3) == 2**32 - 3
  with pytest.raises(errors.UsageError, match="seed to seed . 2"):
    checks.check_seed(checks.MAX_SEED - 1, count=3)
  with pytest.raises(errors.UsageError, match="must be >= 0"):
    checks.check_seed(-1)


# ---------------------------------------------------- (b) long names ----


@pytest.mark.parametrize("launcher", sorted(PROGRAMS))
def test_b_a_name_too_long_for_the_file_system_is_one_line(
    launcher, tmp_path, request
):
  """In an existing folder (where ``Path.exists`` raises ENAMETOOLONG
  rather than answering False)."""
  (tmp_path / "x").mkdir()
  folder = tmp_path / "x" / ("a" * 300)
  args = [f"--config.output_dir={folder}"]
  if launcher == "validate":
    args = [str(folder)]
  elif launcher == "evaluate":
    args.append("--config.rule=actor_critic")
  elif launcher == "distill":  # its teacher is loaded first
    request.getfixturevalue("disco103_path")
  result = launch_process(launcher, args, cwd=tmp_path)
  assert_one_line(
      result,
      2,
      PROGRAMS[launcher],
      f"{tmp_path}/x/aaaa",
      "300 bytes; at most 255 bytes per name",
      "choose a shorter name",
  )
  assert not any((tmp_path / "x").iterdir())


# ------------------------------------------ (c) a key under a setting ----


def test_c_a_key_under_a_string_setting_is_one_line_naming_both(tmp_path):
  result = launch_process(
      "meta_train", ["--config.meta_optimizer.learning_rate=0.5"], tmp_path
  )
  assert_one_line(
      result,
      2,
      "disco-meta-train",
      "config.meta_optimizer is a string setting ('adam')",
      "no key 'learning_rate'",
      "--config.meta_optimizer=VALUE",
      "'config.meta_learning_rate'",
  )


# ---------------------------------------- (d) repeated tuple flags ----


def test_d_the_last_of_a_repeated_tuple_flag_wins(tmp_path):
  """Joined, the rules would be ('bogus1', 'bogus2') and the line would
  name the first."""
  result = launch_process(
      "compare",
      [
          "--config.rules=('bogus1',)",
          "--config.rules=('bogus2',)",
          f"--config.output_dir={tmp_path / 'run'}",
      ],
      tmp_path,
  )
  line = assert_one_line(result, 2, "disco-compare", "Unknown rule 'bogus2'")
  assert "bogus1" not in line


def test_d_the_parser_keeps_the_last_value_of_a_tuple_setting():
  flag_values = flags.FlagValues()
  common.parse_config_flags(
      [
          "disco-meta-train",
          "--config.agent.network.dense=(16,)",
          "--config.agent.network.dense=(32,)",
      ],
      checks.config_path("meta_train"),
      "help",
      flag_values=flag_values,
  )
  assert flag_values.config.agent.network.dense == (32,)
  config = config_dict.ConfigDict(
      dict(dense=(8,), agent=dict(dense=(4,)), name="a", n=1)
  )
  argv = [
      "prog",
      "--config.agent.dense=(16,)",
      "--config.dense",
      "(1, 2)",
      "--config.agent.dense=(32,)",
      "--config.dense=(3,)",
      "--config.n=1",
      "--config.n=2",
      "--",
      "--config.dense=(9,)",
  ]
  assert common.last_tuple_overrides(argv, config) == [
      "prog",
      "--config.agent.dense=(32,)",
      "--config.dense=(3,)",
      "--config.n=1",
      "--config.n=2",
      "--",
      "--config.dense=(9,)",
  ]


# ---------------------------------------------------- (e) interrupts ----


def _interrupt_evaluate(out: Path, delay: float) -> tuple[int, str]:
  """Status and stderr of a tiny disco-eval sent SIGINT ``delay`` s after
  it started."""
  process = subprocess.Popen(
      faults.command(
          "evaluate", [*faults.TINY_EVAL_FLAGS, f"--config.output_dir={out}"]
      ),
      cwd=out.parent,
      env=subprocess_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      text=True,
  )
  time.sleep(delay)
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=120)
  return process.returncode, stderr


# What runs before ``disco.launch`` installs its start guard: a SIGINT there
# meets Python's own handler (a KeyboardInterrupt traceback).
_BEFORE_THE_GUARD = {
    os.path.join("disco", "__init__.py"),
    os.path.join("disco", "errors.py"),
    os.path.join("disco", "stopping.py"),
    os.path.join("disco", "launch", "__init__.py"),
}


def _before_the_guard(status: int, stderr: str) -> bool:
  """Interrupted before ``disco.launch`` installed its start guard (while
  Python started, in its ``site`` module or runpy, or while importing the
  modules the guard needs): a KeyboardInterrupt traceback whose only frames
  in ``disco`` are in those modules."""
  if (
      status == 0
      or not stderr.rstrip().endswith("KeyboardInterrupt")
      or "Exception ignored" in stderr
  ):
    return False
  files = re.findall(r'^\s*File "([^"]+)"', stderr, re.MULTILINE)
  ours = [f for f in files if f"{os.sep}disco{os.sep}" in f]
  return all(
      any(f.endswith(os.sep + name) for name in _BEFORE_THE_GUARD) for f in ours
  )


def test_e_sigint_in_the_first_seconds_exits_130_with_at_most_two_lines(
    tmp_path,
):
  """SIGINT at a moment drawn in each of 12 equal spans of 0.05-3 s after
  disco-eval starts (importing, parsing, building, compiling): exit status
  130 and one or two lines, every time, and never a finished run.

  A moment before the start guard is installed (Python's own start-up, about
  0.05 s, more on a busy machine) is drawn again later in its span; a span
  that falls wholly before the guard is left out, at most two of them.
  """
  rng = random.Random()
  low, high, n = 0.05, 3.0, 12
  width = (high - low) / n
  checked = 0
  for k in range(n):
    earliest = low + width * k
    for attempt in range(4):
      delay = earliest + (low + width * (k + 1) - earliest) * rng.random()
      out = tmp_path / f"run{k}-{attempt}"
      status, stderr = _interrupt_evaluate(out, delay)
      if not _before_the_guard(status, stderr):
        break
      earliest = delay  # the guard came later than this moment
    else:
      continue
    checked += 1
    lines = message_lines(stderr, "disco-eval")
    seen = f"SIGINT after {delay:.2f} s: status {status}, {stderr}"
    assert status == 130, seen
    assert 1 <= len(lines) <= 2, seen
    assert all(line.startswith("disco-eval: ") for line in lines), seen
    assert not (out / "summary.json").exists(), seen
  assert checked >= n - 2, f"only {checked} of {n} spans reached the guard"


def test_e_the_start_guard_is_for_launcher_processes_only():
  """Importing the launchers elsewhere leaves SIGINT alone and loads no
  heavy module before the guard; the guard knows every console script."""
  code = (
      "import signal, sys\n"
      "import disco.launch\n"
      "light = sorted(m for m in sys.modules if m.split('.')[0] in "
      "('numpy', 'jax', 'filelock', 'ml_collections', 'absl'))\n"
      "from disco.launch import evaluate\n"
      "print(light, signal.getsignal(signal.SIGINT) is "
      "signal.default_int_handler)\n"
  )
  result = subprocess.run(
      [sys.executable, "-c", code],
      capture_output=True,
      text=True,
      check=True,
      cwd=conftest.REPO_DIR,
      env=subprocess_env(),
  )
  assert result.stdout.split() == ["[]", "True"], result.stdout
  parser = configparser.ConfigParser()
  parser.read(conftest.REPO_DIR / "setup.cfg")
  scripts = parser["options.entry_points"]["console_scripts"].split("\n")
  scripts = dict(line.split(" = ") for line in scripts if line.strip())
  assert {p: m.split(":")[0] for p, m in scripts.items()} == {
      p: m for m, p in launch.PROGRAMS.items()
  }


@pytest.mark.parametrize(
    "command_line, script, program",
    [
        (["python", "-m", "disco.launch.evaluate", "-m"], "-m", "disco-eval"),
        (
            ["python", "-X", "dev", "-mdisco.launch.compare"],
            "",
            "disco-compare",
        ),
        (
            ["python", "/v/bin/disco-validate"],
            "/v/bin/disco-validate",
            "disco-validate",
        ),
        (["python", "-c", "x", "-m", "disco.launch.evaluate"], "-c", None),
        (["python", "-m", "pytest", "-m", "disco.launch.evaluate"], "", None),
        (["python", "x.py", "-m", "disco.launch.evaluate"], "x.py", None),
    ],
)
def test_e_the_launcher_a_process_runs(command_line, script, program):
  assert launch.running_program(command_line, script) == program


def test_e_the_start_guard_names_the_program_of_each_launcher():
  programs = {
      "disco.launch.evaluate": "disco.evaluation.settings",
      "disco.launch.meta_train": "disco.meta.settings",
      "disco.launch.compare": "disco.comparison.settings",
      "disco.launch.validate": "disco.meta.follower",
      "disco.launch.distill": "disco.distillation.settings",
  }
  assert set(programs) == set(launch.PROGRAMS)
  for module, program in launch.PROGRAMS.items():
    settings = importlib.import_module(programs[module])
    assert settings.PROGRAM == program, module
    # The launcher runs under that name.
    source = inspect.getsource(importlib.import_module(module))
    assert ".PROGRAM" in source, module
