"""``benchmarks/published_notebook.py``: running a notebook's cells in steps.

No published code is needed: the cells here are stand-ins with the same
structure as the notebooks' loop cells.
"""

from __future__ import annotations

import pytest

from benchmarks import published_notebook as nb

LOOP_CELL = """\
seen = []
num_steps = 1000
# Run the loop.
for step in tqdm.tqdm(range(num_steps)):
  seen.append(step)
# Collect the logs.
collected = list(seen)
"""


def test_split_cuts_before_each_marker():
  assert nb.split("a M1 b M2 c", "M1", "M2") == ["a ", "M1 b ", "M2 c"]
  with pytest.raises(nb.NotebookError, match="exactly one 'M3'"):
    nb.split("a M1 b", "M3")
  with pytest.raises(nb.NotebookError, match="exactly one"):
    nb.replace("x = 1; x = 1", "x = 1", "x = 2")


def test_stepped_loop_continues_and_times_each_iteration():
  real_tqdm = object()
  ns = {"tqdm": real_tqdm}
  loop = nb.SteppedLoop(
      ns, LOOP_CELL, "# Run the loop.", "# Collect the logs.", "<test>"
  )
  assert ns["seen"] == [] and ns["num_steps"] == 1000  # the setup ran once
  assert len(loop.run(3)) == 3
  assert ns["seen"] == [0, 1, 2]
  assert len(loop.run(2)) == 2
  assert ns["seen"] == [0, 1, 2, 3, 4]
  assert ns["tqdm"] is real_tqdm
  assert "collected" not in ns  # what follows the loop never runs


def test_stepped_loop_needs_the_counted_tqdm_loop():
  with pytest.raises(nb.NotebookError, match="range"):
    nb.SteppedLoop(
        {},
        LOOP_CELL.replace("range(num_steps)", "range(10)"),
        "# Run the loop.",
        "# Collect the logs.",
        "<test>",
    )
