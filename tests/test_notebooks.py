"""Executes the notebooks headless with tiny settings.

Needs the ``python3`` Jupyter kernel of this environment; install it with
``python -m ipykernel install --sys-prefix`` (the test skips, or fails on CI,
when it is missing).
"""

from __future__ import annotations

import nbformat
import pytest

import conftest

COLABS = conftest.REPO_DIR / "colabs"
EVAL_NOTEBOOK = COLABS / "eval.ipynb"

# Tiny settings: Catch 5x5, 2 envs x 5 steps, 6 iterations in 2 calls, two
# seeds (so the plot has a band and the summary a confidence interval).
TINY_PARAMETERS = """\
total_env_steps = 60
num_seeds = 2
seed = 0
catch_rows, catch_columns = 5, 5
num_envs = 2
rollout_len = 5
batch_size = 4
replay_capacity = 16
min_replay_size = 4
iterations_per_call = 3
last_episodes = 10
disco_learning_rate = 1e-2
compare_actor_critic = True
actor_critic_learning_rate = 1e-2
"""


def test_eval_notebook_is_valid_and_up_to_date(monkeypatch):
  nb = nbformat.read(EVAL_NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  assert nb.nbformat == 4
  conftest.parameters_cell(nb)
  conftest.check_notebook_is_generated(
      nb, EVAL_NOTEBOOK, COLABS / "make_eval_notebook.py", monkeypatch
  )


# A learning run (its run time dominates), at the pipeline of
# test_compare_notebook.py's, whose Catch programs it shares.
@pytest.mark.xla_optimized
def test_eval_notebook_runs(disco103_path, monkeypatch):
  conftest.require_python3_kernel()
  nb = nbformat.read(EVAL_NOTEBOOK, as_version=4)
  conftest.parameters_cell(nb).source = TINY_PARAMETERS
  # The kernel inherits the environment: find the weights without a download
  # and share the test session's compilation cache.
  monkeypatch.setenv("DISCO_WEIGHTS", str(disco103_path))
  text, images = conftest.run_notebook(nb, monkeypatch)
  assert "disco103: learning rate 0.01, 6 iterations of 2 x 5 steps" in text
  assert "Disco103: mean return over the last 10 episodes" in text
  assert "Actor-critic: mean return over the last 10 episodes" in text
  assert "60 env steps, 5 learner steps per seed" in text
  assert "95% bootstrap CI" in text
  assert images >= 1  # the learning curves
