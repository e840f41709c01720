"""Executes ``colabs/compare.ipynb`` headless with tiny settings.

Needs the ``python3`` Jupyter kernel of this environment; install it with
``python -m ipykernel install --sys-prefix`` (the test skips, or fails on CI,
when it is missing). The Catch loop equals ``tests/test_notebooks.py``'s, so
its compiled programs come from the persistent compilation cache when both
run.
"""

from __future__ import annotations

import json

import nbformat
import pytest

import conftest

COLABS = conftest.REPO_DIR / "colabs"
NOTEBOOK = COLABS / "compare.ipynb"


def tiny_parameters(output_dir) -> str:
  return f"""\
rules = ('disco103', 'actor_critic')
envs = ('catch:rows=5,columns=5', 'delayed_chain:chain_length=3')
num_seeds = 3
seed = 0
total_env_steps = 60
num_envs = 2
rollout_len = 5
batch_size = 4
replay_capacity = 16
min_replay_size = 4
iterations_per_call = 3
last_episodes = 10
rule_overrides = ('actor_critic:learning_rate=0.01',)
test = 'welch'
bootstrap_reps = 50
output_dir = {str(output_dir)!r}
"""


def test_compare_notebook_is_valid_and_up_to_date(monkeypatch):
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  conftest.check_notebook_is_generated(
      nb, NOTEBOOK, COLABS / "make_compare_notebook.py", monkeypatch
  )
  namespace = {}
  exec(conftest.parameters_cell(nb).source, namespace)
  assert {"disco103", "actor_critic", "ppo"} <= set(namespace["rules"])
  assert namespace["envs"][0] == "catch" and len(namespace["envs"]) >= 3


# Its learning runs, not its compiles, take the time (92 s on the cheap
# pipeline, 76 s on the full one); test_notebooks.py's Catch programs are
# compiled at the same level.
@pytest.mark.xla_optimized
def test_compare_notebook_runs(disco103_path, tmp_path, monkeypatch):
  conftest.require_python3_kernel()
  nb = nbformat.read(NOTEBOOK, as_version=4)
  out = tmp_path / "compare"
  conftest.parameters_cell(nb).source = tiny_parameters(out)
  monkeypatch.setenv("DISCO_WEIGHTS", str(disco103_path))
  text, images = conftest.run_notebook(nb, monkeypatch)
  for rule in ("disco103", "actor_critic"):
    for env in ("catch_5x5", "delayed_chain_chain_length_3"):
      assert (out / "runs" / rule / env / "summary.json").is_file()
  assert "disco103 on catch {'rows': 5, 'columns': 5}: to run" in text
  assert "IQM normalised score" in text
  stats = json.loads((out / "statistics.json").read_text())
  assert set(stats["rules"]) == {"disco103", "actor_critic"}
  assert (out / "report.md").read_text().startswith("# Comparison of")
  # One image per figure: aggregates, profiles, sample efficiency,
  # improvement, and two environments' curves.
  assert images == len(stats["figures"]) == 6
