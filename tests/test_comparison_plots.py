"""Tests of disco.comparison.plots: every figure is written as a PNG."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from disco.comparison import plots
from disco.scoring import aggregates

REPS = 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def scores():
  rng = np.random.default_rng(0)
  return {
      "disco103": rng.normal(0.6, 0.2, (4, 3)),
      "actor_critic": rng.normal(0.4, 0.2, (4, 3)),
  }


def _assert_png(path, expected):
  assert path == expected
  data = expected.read_bytes()
  assert data[:8] == PNG_MAGIC and len(data) > 2000


def test_plot_aggregate_intervals(scores, tmp_path):
  results = aggregates.aggregate_metrics(scores, reps=REPS)
  target = tmp_path / "new_dir" / "aggregates.png"
  _assert_png(plots.plot_aggregate_intervals(results, target), target)


def test_plot_performance_profiles(scores, tmp_path):
  profiles = aggregates.performance_profiles(scores, reps=REPS)
  target = tmp_path / "profiles.png"
  _assert_png(plots.plot_performance_profiles(profiles, target), target)


def test_plot_probability_of_improvement(scores, tmp_path):
  probabilities = aggregates.probability_of_improvement(scores, reps=REPS)
  target = tmp_path / "poi.png"
  _assert_png(
      plots.plot_probability_of_improvement(probabilities, target), target
  )


def test_plot_sample_efficiency(tmp_path):
  rng = np.random.default_rng(1)
  curves = aggregates.sample_efficiency_curves(
      {"a": rng.normal(size=(4, 2, 5)), "b, v2": rng.normal(size=(4, 2, 5))},
      points=np.arange(5) * 1000,
      reps=REPS,
  )
  target = tmp_path / "curves.png"
  _assert_png(plots.plot_sample_efficiency(curves, str(target)), target)


def test_empty_input_raises(tmp_path):
  with pytest.raises(ValueError, match="No results"):
    plots.plot_aggregate_intervals({}, tmp_path / "x.png")


def test_plot_hyper_parameters(tmp_path):
  steps = np.tile(np.arange(1, 6) * 100, (2, 1))
  metrics = {
      "stac": {
          "env_steps": steps,
          "learner/hyper_params/entropy_cost": np.linspace(
              0.2, 0.1, 10
          ).reshape(2, 5),
          "learner/hyper_params/td_lambda": np.full((2, 5), 0.95),
      },
      "actor_critic": {"env_steps": steps},
  }
  # A rule that learns once its replay has filled logs NaN before that.
  metrics["stac"]["learner/hyper_params/td_lambda"][:, :2] = np.nan
  target = tmp_path / "hyper.png"
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    _assert_png(
        plots.plot_hyper_parameters(metrics, "learner/hyper_params/", target),
        target,
    )
  del metrics["stac"]
  assert (
      plots.plot_hyper_parameters(
          metrics, "learner/hyper_params/", tmp_path / "none.png"
      )
      is None
  )
  assert not (tmp_path / "none.png").exists()
