"""The tutorial (docs/getting-started/tutorial.md) as a user follows it: its
module saved as ``tutorial_envs.py`` in a working folder, then each of its
commands run there as written, through the installed console scripts, with
flags appended that shrink the budgets."""

from __future__ import annotations

import json
from pathlib import Path
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from meta_settings import TINY_LPG_FLAGS
from meta_settings import subprocess_env

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "getting-started" / "tutorial.md"
MODULE = "tutorial_envs.py"

# Appended to each program's commands: the same work at a tiny budget.
TINY_BUDGETS = {
    "disco-eval": [
        "--config.total_env_steps=512",
        "--config.iterations_per_call=1",
    ],
    "disco-compare": [
        "--config.num_seeds=3",
        "--config.total_env_steps=232",
        "--config.iterations_per_call=4",
        "--config.bootstrap_reps=50",
    ],
    "disco-meta-train": [
        "--config.batch_size=2",
        "--config.rollout_len=3",
        "--config.inner_steps=1",
        "--config.max_unrolled_inner_steps=1",
        "--config.lifetime_updates=(1, 3)",
        *TINY_LPG_FLAGS,
        "--config.num_meta_steps=2",
        "--config.checkpoint_every=0",
    ],
}


def blocks(text: str, language: str) -> list[str]:
  """The fenced code blocks of ``text`` in ``language``, in page order."""
  return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def tutorial_module(text: str) -> str:
  """The Python block that follows "Save this as `tutorial_envs.py`"."""
  after = text.split(f"Save this as `{MODULE}`", 1)[1]
  return blocks(after, "python")[0]


def tutorial_commands(text: str) -> list[list[str]]:
  """Each bash block of the page as one command's arguments."""
  return [shlex.split(b.replace("\\\n", " ")) for b in blocks(text, "bash")]


def test_the_page_holds_the_module_and_a_command_per_step():
  text = PAGE.read_text()
  assert "registry.register_env(" in tutorial_module(text)
  programs = [c[0] for c in tutorial_commands(text)]
  assert programs == [
      "disco-eval",
      "disco-eval",
      "disco-compare",
      "disco-meta-train",
      "disco-compare",
  ]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, disco103_path) -> Path:
  """A user's working folder: the module, and the checkout's configs."""
  del disco103_path  # the weights come through DISCO_WEIGHTS
  folder = tmp_path_factory.mktemp("tutorial")
  (folder / MODULE).write_text(tutorial_module(PAGE.read_text()))
  (folder / "configs").symlink_to(REPO / "configs")
  return folder


def _run(command: list[str], folder: Path, weights: Path):
  program = Path(sys.executable).parent / command[0]
  if not program.exists():
    pytest.fail(f"{command[0]} is not installed beside {sys.executable}")
  env = subprocess_env(DISCO_WEIGHTS=str(weights))
  env.pop("PYTHONPATH", None)  # the module is found in the current folder
  return subprocess.run(
      [str(program), *command[1:], *TINY_BUDGETS.get(command[0], [])],
      cwd=folder,
      env=env,
      capture_output=True,
      text=True,
      timeout=900,
  )


def test_every_command_runs_as_written(folder, disco103_path):
  """The steps in order; each one's outputs are what the next one reads."""
  commands = tutorial_commands(PAGE.read_text())
  listing = _run(commands[0], folder, disco103_path)
  assert listing.returncode == 0, listing.stderr[-3000:]
  assert "corridor" in listing.stdout and "my_cartpole" in listing.stdout

  for command in commands[1:]:
    result = _run(command, folder, disco103_path)
    assert result.returncode == 0, (command, result.stderr[-3000:])

  runs = folder / "runs"
  saved = json.loads((runs / "tutorial-cartpole" / "config.json").read_text())
  assert saved["config"]["env_settings"] == {"pole_length": 1.0}
  assert (
      len(
          json.loads((runs / "tutorial-cartpole" / "summary.json").read_text())[
              "final_return_per_seed"
          ]
      )
      == 3
  )
  for name in ("tutorial-compare", "tutorial-compare-lpg"):
    stats = json.loads((runs / name / "statistics.json").read_text())
    assert len(stats["rules"]) == 2, stats["rules"]
  with np.load(runs / "tutorial-lpg" / "meta_params.npz") as meta_params:
    assert meta_params.files


def test_a_module_that_is_not_found_gets_one_line(folder, disco103_path):
  result = _run(
      ["disco-eval", "--config.imports=not_here", "--config.env=list"],
      folder,
      disco103_path,
  )
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      "disco-eval: error: Cannot import module 'not_here' (config.imports): "
      "ModuleNotFoundError: No module named 'not_here'. Check the name and "
      "that it is in the current directory or on PYTHONPATH."
  ]
