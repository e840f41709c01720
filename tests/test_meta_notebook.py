"""Executes ``colabs/meta_train.ipynb`` headless with tiny settings.

Needs the ``python3`` Jupyter kernel of this environment; install it with
``python -m ipykernel install --sys-prefix`` (the test skips, or fails on CI,
when it is missing). CI runs it with a tiny population of Catch 5x5; the
full check (``-m slow``) with a population that mixes Catch 5x5 and the
delayed chain (other observation shapes and action counts, weighted groups)
and with the ES and LPO sections.
"""

from __future__ import annotations

import nbformat
import pytest

import conftest

COLABS = conftest.REPO_DIR / "colabs"
NOTEBOOK = COLABS / "meta_train.ipynb"


CATCH_GROUP = (
    "dict(env='catch', env_settings=dict(rows=5, columns=5), num_agents=2)"
)
CHAIN_GROUP = (
    "dict(env='delayed_chain', env_settings=dict(chain_length=3), "
    "num_agents=2, weight=1.0)"
)


def tiny_parameters(output_dir, full: bool) -> str:
  """The notebook's parameters cell at tiny settings. ``full``: a mixed
  population (Catch and the delayed chain: two meta-step programs) and the
  ES and LPO sections; otherwise Catch alone and those sections skipped (0
  generations)."""
  population = (
      f"({CATCH_GROUP}, {CHAIN_GROUP})" if full else f"({CATCH_GROUP},)"
  )
  return f"""\
init_meta_params = 'random'
num_meta_steps = 3
population = {population}
agent_loss_mask = 'valid'
batch_size = 2
rollout_len = 3
inner_steps = 1
replay_capacity = 0
replay_batch_size = 0
agent_network = dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))
agent_learning_rate = 5e-4
value_fn_dense = (8, 8)
meta_learning_rate = 5e-4
seed = 4
output_dir = {str(output_dir)!r}
checkpoint_every = 2
eval_env, eval_env_settings = 'catch', dict(rows=5, columns=5)
eval_env_steps = 60
eval_num_seeds = 1
eval_num_envs = 2
eval_rollout_len = 5
eval_batch_size = 4
eval_replay_capacity = 16
eval_min_replay_size = 4
eval_iterations_per_call = 3
eval_last_episodes = 5
eval_network = dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))
compare_with_initial_rule = True
es_generations = {2 if full else 0}
es_population_size = 2
es_sigma = 0.05
es_lifetime_iterations = 2
es_meta_learning_rate = 1e-2
lpo_generations = {1 if full else 0}
lpo_population = (dict(env='catch', env_settings=dict(rows=5, columns=5)),)
lpo_rollout_len = 8
lpo_population_size = 2
lpo_lifetime_iterations = 2
"""


def test_meta_train_notebook_is_valid_and_up_to_date(monkeypatch):
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  conftest.parameters_cell(nb)
  conftest.check_notebook_is_generated(
      nb, NOTEBOOK, COLABS / "make_meta_train_notebook.py", monkeypatch
  )
  # The published settings, apart from the number of meta-steps.
  namespace = {}
  exec(conftest.parameters_cell(nb).source, namespace)
  assert namespace["batch_size"] == 32 and namespace["rollout_len"] == 16
  assert namespace["inner_steps"] == 2
  assert namespace["population"] == (
      dict(env="catch", env_settings=dict(rows=5, columns=5), num_agents=2),
  )
  assert namespace["agent_network"]["dense"] == (512, 512)


def run_tiny(tmp_path, monkeypatch, full: bool) -> tuple[str, int]:
  conftest.require_python3_kernel()
  nb = nbformat.read(NOTEBOOK, as_version=4)
  out = tmp_path / "run"
  conftest.parameters_cell(nb).source = tiny_parameters(out, full)
  text, images = conftest.run_notebook(nb, monkeypatch)
  assert "2 x catch-5x5" in text
  assert ("2 x delayed_chain" in text) == full
  assert "3 meta-steps; checkpoints: [2, 3]" in text
  assert "Reward per actor step:" in text
  assert "Exported" in text and "'rule': 'disco'" in text
  assert "discovered (meta-step 3): mean return over the last 5" in text
  assert "initial (random): mean return" in text
  for name in (
      "metrics.csv",
      "rewards.png",
      "meta_loss.png",
      "meta_params.npz",
  ):
    assert (out / name).is_file(), name
  return text, images


def test_meta_train_notebook_runs(tmp_path, monkeypatch):
  # One population group (each group traces its own meta-step program, about
  # 20 CPU s for a Disco rule), the ES and LPO sections skipped: their
  # estimators and mixed populations have their own tests, and the slow test
  # below runs the notebook whole.
  text, images = run_tiny(tmp_path, monkeypatch, full=False)
  assert "ES:" not in text and "LPO:" not in text
  assert images >= 3  # rewards, meta loss, evaluation curves


@pytest.mark.slow
def test_meta_train_notebook_runs_whole(tmp_path, monkeypatch):
  text, images = run_tiny(tmp_path, monkeypatch, full=True)
  assert "ES: 2 generations of 2 members; mean fitness" in text
  assert "LPO: 1 generations of 2 members; exported" in text
  assert images >= 5  # and ES fitness, LPO drifts
