"""Named reference sets (DiscoGen's PPO baselines) selectable as the
normalisation of a comparison, and the report's reference rows."""

from __future__ import annotations

import types

import pytest

from disco import errors
from disco.comparison import report
from disco.comparison import settings as compare_settings
from disco.environments import reference_scores
from disco.environments import reference_sets


def test_discogen_entries_state_algorithm_budget_and_source():
  discogen = reference_sets.reference_set("discogen")
  assert len(discogen) == 13
  for env, entry in discogen.items():
    assert entry.env == env and env in reference_scores.REFERENCE_TABLE
    assert entry.reference_algorithm == "PPO (DiscoGen baseline)"
    assert entry.budget_env_steps >= 10_000_000
    assert "c24e6508" in entry.source
    # The random anchor is the table's (measured here).
    table = reference_scores.REFERENCE_TABLE[env]
    assert entry.random_return == table.random_return
  assert discogen["gymnax/Breakout-MinAtar"].reference_return == 61.078125
  assert reference_scores.normalize(
      2398.254395, "brax/hopper", discogen
  ) == pytest.approx(1.0)
  assert reference_sets.reference_set("default") == {}
  with pytest.raises(ValueError, match="use one of default, discogen"):
    reference_sets.reference_set("discogn")


def test_a_comparison_normalises_by_the_chosen_set(tmp_path):
  def references(**overrides):
    config = compare_settings.make_config(output_dir=str(tmp_path), **overrides)
    return compare_settings.CompareSettings.from_config(config).references

  assert references() == {}
  chosen = references(reference_set="discogen")
  assert chosen["brax/ant"].reference_return == 6957.005371
  # A reference given on the command line wins over the set's.
  chosen = references(
      reference_set="discogen",
      references=("brax/ant:random=0,reference=10,source=mine",),
  )
  assert chosen["brax/ant"].reference_return == 10.0
  with pytest.raises(errors.UsageError, match="config.reference_set"):
    references(reference_set="nope")


def test_the_report_names_each_references_budget():
  results = types.SimpleNamespace(envs=["brax/hopper", "catch"])
  lines = report._normalisation_section(
      results, reference_sets.reference_set("discogen")
  )
  text = "\n".join(lines)
  assert "budget (env steps)" in text
  assert "| 50,000,000 |" in text and "none (an optimum)" in text
