"""The Python API's examples (``docs/guides/python-api.md``, whose first
example the README shows) run as written, at a tiny budget: the page's code
blocks are executed with every config made by ``make_config`` given tiny
settings over the example's own."""

from __future__ import annotations

from pathlib import Path
import re

import pytest

from disco import errors
from disco.comparison import settings as compare_settings
from disco.evaluation import settings as eval_settings

import meta_settings

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "guides" / "python-api.md"
README = REPO / "README.md"

# One tiny loop for every run (so that the runs of a rule share compiled
# programs), and a few seeds.
TINY_LOOP = dict(
    total_env_steps=60,
    num_seeds=3,
    num_envs=2,
    rollout_len=5,
    batch_size=4,
    replay_capacity=16,
    min_replay_size=4,
    iterations_per_call=3,
    last_episodes=10,
)
TINY = dict(
    evaluation=TINY_LOOP,
    comparison=dict(TINY_LOOP, bootstrap_reps=50, num_points=5),
)


def code_blocks(path: Path) -> list[str]:
  return re.findall(r"```python\n(.*?)\n```", path.read_text(), re.S)


def test_the_readme_shows_the_first_example():
  first = code_blocks(PAGE)[0]
  assert first in code_blocks(README)


def _tiny(make, extra):
  def make_config(config=None, **overrides):
    return make(config, **{**overrides, **extra})

  return make_config


def test_the_examples_run(disco103_path, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # the examples write into runs/
  monkeypatch.setenv("DISCO_WEIGHTS", str(disco103_path))
  from disco import evaluation

  tiny_eval = _tiny(eval_settings.make_config, TINY["evaluation"])
  monkeypatch.setattr(eval_settings, "make_config", tiny_eval)
  monkeypatch.setattr(evaluation, "make_config", tiny_eval)
  monkeypatch.setattr(
      compare_settings,
      "make_config",
      _tiny(compare_settings.make_config, TINY["comparison"]),
  )
  from disco import meta

  meta_train = meta.meta_train
  monkeypatch.setattr(
      meta,
      "meta_train",
      lambda config=None, **overrides: meta_train(
          meta_settings.tiny_config(),
          **{**overrides, "num_meta_steps": 2, "log_every": 1},
      ),
  )
  blocks = code_blocks(PAGE)
  assert len(blocks) == 4
  namespace = {}
  exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)
  summary, stats = namespace["summary"], namespace["stats"]
  assert summary["rule"] == "disco103" and summary["seeds"] == [0, 1, 2]
  assert summary["env_steps"] == 60
  assert (tmp_path / "runs" / "api-eval" / "summary.json").is_file()
  assert stats["rules"] == ["actor_critic", "ppo"]
  assert (tmp_path / "runs" / "api-compare" / "report.md").is_file()
  run, found = namespace["run"], namespace["found"]
  assert run["meta_steps"] == 2
  assert (tmp_path / "runs" / "api-meta" / "meta_params.npz").is_file()
  assert found["rule"] == "meta_params" and found["env_steps"] == 60
  hook, lines = namespace["PrintLoss"](), []
  progress = type("P", (), dict(step=3, row={"meta_loss": 0.5}))
  monkeypatch.setattr("builtins.print", lambda *args: lines.append(args))
  hook.after_step(progress)
  assert lines == [(3, 0.5)]
  plan, result = namespace["plan"], namespace["result"]
  assert plan.label == "ppo" and result.metrics["mean_return"].shape == (
      3,
      plan.iterations,
  )


def test_a_mistyped_keyword_names_the_key():
  from disco import evaluation

  with pytest.raises(
      errors.UsageError, match="Did you mean 'config.num_seeds'"
  ):
    evaluation.evaluate(num_seed=3)
