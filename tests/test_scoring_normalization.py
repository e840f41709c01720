"""Tests of disco.scoring.normalization and the reference table it reads
(disco.environments.reference_scores)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from disco import errors
from disco.environments import catch
from disco.environments import reference_scores
from disco.scoring import normalization

EXPECTED_ENVS = (
    "catch/8x8",
    "catch/5x5",
    "gymnax/CartPole-v1",
    "gymnax/Acrobot-v1",
    "gymnax/MountainCar-v0",
    "gymnax/Breakout-MinAtar",
    "gymnax/Asterix-MinAtar",
    "gymnax/Freeway-MinAtar",
    "gymnax/SpaceInvaders-MinAtar",
    "xminigrid/MiniGrid-Empty-8x8",
    "xminigrid/MiniGrid-DoorKey-5x5",
)


def test_table_has_every_environment_with_sources():
  assert set(EXPECTED_ENVS) <= set(reference_scores.REFERENCE_TABLE)
  for key, entry in reference_scores.REFERENCE_TABLE.items():
    assert entry.env == key
    assert entry.source and entry.random_source and entry.reference_algorithm
    if entry.reference_return is not None:
      assert entry.reference_return > entry.random_return


@pytest.mark.parametrize("env", EXPECTED_ENVS)
def test_random_maps_to_zero_and_reference_to_one(env):
  entry = reference_scores.REFERENCE_TABLE[env]
  normalized = reference_scores.normalize(
      [entry.random_return, entry.reference_return], env
  )
  np.testing.assert_allclose(normalized, [0.0, 1.0], atol=1e-12)


def test_normalize_is_affine_and_keeps_shape():
  entry = reference_scores.REFERENCE_TABLE["gymnax/Breakout-MinAtar"]
  middle = (entry.random_return + entry.reference_return) / 2
  scores = np.full((3, 2), middle)
  np.testing.assert_allclose(
      reference_scores.normalize(scores, "gymnax/Breakout-MinAtar"),
      np.full((3, 2), 0.5),
  )


def test_catch_entries_are_exact():
  assert reference_scores.REFERENCE_TABLE["catch/8x8"].random_return == -0.75
  assert reference_scores.REFERENCE_TABLE[
      "catch/5x5"
  ].random_return == pytest.approx(-0.6)
  assert reference_scores.REFERENCE_TABLE["catch/8x8"].reference_return == 1.0
  assert reference_scores.REFERENCE_TABLE["catch/5x5"].reference_return == 1.0
  assert (
      reference_scores.get_entry("catch")
      == reference_scores.REFERENCE_TABLE["catch/8x8"]
  )
  # Any size is derived; on 2 rows the paddle moves once, so from column 3
  # of 8 it reaches columns 2..4 only.
  wide = reference_scores.get_entry("catch/2x8")
  assert wide.reference_return == pytest.approx(2 * 3 / 8 - 1)
  assert wide.random_return == pytest.approx(2 / 8 - 1)


def test_catch_random_return_matches_the_environment():
  """The random policy's return on disco's own Catch 5x5 is 2/5 - 1."""
  num_episodes, rows, columns = 4000, 5, 5
  env = catch.Catch(num_episodes, rows=rows, columns=columns)
  state, _ = env.reset(jax.random.key(0))
  actions = np.random.default_rng(0).integers(0, 3, (rows - 1, num_episodes))
  total = np.zeros(num_episodes)
  for t in range(rows - 1):  # one whole episode per stream
    state, timestep = env.step(state, actions[t])
    total += np.asarray(timestep.reward)
  assert set(np.unique(total)) <= {-1.0, 1.0}
  sem = total.std() / np.sqrt(num_episodes)
  expected = reference_scores.REFERENCE_TABLE["catch/5x5"].random_return
  assert abs(total.mean() - expected) < 4 * sem


def test_missing_reference_raises_with_instructions():
  entry = dataclasses.replace(
      reference_scores.REFERENCE_TABLE["gymnax/Breakout-MinAtar"],
      reference_return=None,
      notes="no published number for this budget",
  )
  overrides = {"gymnax/Breakout-MinAtar": entry}
  with pytest.raises(
      reference_scores.MissingReferenceError,
      match="no trustworthy reference.*overrides=",
  ):
    reference_scores.normalize([1.0], "gymnax/Breakout-MinAtar", overrides)
  with pytest.raises(ValueError, match="No normalisation entry for .*Pong"):
    reference_scores.normalize([1.0], "gymnax/Pong-MinAtar")


def test_user_entries_override_the_table():
  mine = reference_scores.ReferenceEntry(
      env="gymnax/Breakout-MinAtar",
      random_return=0.0,
      random_source="mine",
      reference_return=10.0,
      reference_algorithm="my PPO",
      budget_env_steps=1_000_000,
      source="my run",
  )
  np.testing.assert_allclose(
      reference_scores.normalize(
          [5.0], "gymnax/Breakout-MinAtar", {"gymnax/Breakout-MinAtar": mine}
      ),
      [0.5],
  )
  new = dataclasses.replace(mine, env="my/env")
  assert reference_scores.get_entry("my/env", {"my/env": new}) is new
  rows = normalization.table_rows({"my/env": new})
  assert (
      rows[-1]["env"] == "my/env"
      and len(rows) == len(reference_scores.REFERENCE_TABLE) + 1
  )


def test_references_given_as_specs():
  given = normalization.parse_references(
      ("my/env:random=-1,reference=3,source=my run,budget=100",)
  )
  entry = given["my/env"]
  assert (entry.random_return, entry.reference_return) == (-1.0, 3.0)
  assert (entry.source, entry.budget_env_steps) == ("my run", 100)
  assert entry.random_source == entry.reference_algorithm == "given"
  np.testing.assert_allclose(
      reference_scores.normalize([1.0], "my/env", given), [0.5]
  )
  for bad in ("my/env:random=-1", "my/env:random=low,reference=1", "my/env:x"):
    with pytest.raises(errors.UsageError, match="Bad reference") as e:
      normalization.parse_references((bad,))
    assert "\n" not in str(e.value)


def test_degenerate_entry_raises():
  flat = dataclasses.replace(
      reference_scores.REFERENCE_TABLE["catch/8x8"], reference_return=-0.75
  )
  with pytest.raises(ValueError, match="must be finite and differ"):
    reference_scores.normalize([0.0], "catch/8x8", {"catch/8x8": flat})


def test_normalize_score_dict_per_column():
  envs = ["catch/8x8", "catch/5x5"]
  raw = {"r": np.array([[1.0, -0.6], [-0.75, 1.0], [1.0, 1.0]])}
  normalized = normalization.normalize_score_dict(raw, envs)
  np.testing.assert_allclose(
      normalized["r"], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
  )
  curves = {"r": np.ones((2, 2, 5))}
  assert normalization.normalize_score_dict(curves, envs)["r"].shape == (
      2,
      2,
      5,
  )
  with pytest.raises(ValueError, match="expected"):
    normalization.normalize_score_dict({"r": np.ones((2, 3))}, envs)


def test_env_key_names_the_settings_that_differ_from_the_defaults():
  key = reference_scores.env_key
  assert key("catch", {"rows": 5, "columns": 5}) == "catch/5x5"
  assert key("delayed_chain", {"variant": "short", "chain_length": None}) == (
      "delayed_chain"
  )
  assert key("delayed_chain", {"variant": "long", "chain_length": 3}) == (
      "delayed_chain(chain_length=3,variant='long')"
  )
  cartpole = {"max_steps_in_episode": 500, "gravity": 9.8}
  assert key("gymnax/CartPole-v1", cartpole) == "gymnax/CartPole-v1"
  assert key("gymnax/CartPole-v1", {"max_steps_in_episode": 200}) == (
      "gymnax/CartPole-v1(max_steps_in_episode=200)"
  )
  assert key("my/env", {"size": (3, 4)}) == "my/env(size=(3, 4))"


def test_keys_with_settings_use_an_entry_only_where_it_holds():
  # Delayed chain's anchors hold for every variant and length.
  entry = reference_scores.get_entry("delayed_chain(chain_length=3)")
  assert (
      entry is reference_scores.REFERENCE_TABLE["delayed_chain"]
      and entry.any_settings
  )
  # CartPole's reference is its maximum return at 500 steps: not for 200.
  with pytest.raises(
      reference_scores.MissingReferenceError, match="default settings only"
  ):
    reference_scores.get_entry("gymnax/CartPole-v1(max_steps_in_episode=200)")
  mine = dataclasses.replace(
      reference_scores.REFERENCE_TABLE["gymnax/CartPole-v1"],
      env="gymnax/CartPole-v1(max_steps_in_episode=200)",
      reference_return=200.0,
  )
  assert reference_scores.get_entry(mine.env, {mine.env: mine}) is mine


def test_array_defaults_match_their_saved_lists():
  """gymnax's Acrobot-v1 default available_torque is a JAX array; a run's
  config.json holds it as a list: the same key (so the same reference)."""
  from disco.environments import registry as env_registry

  defaults = env_registry.get_entry("gymnax/Acrobot-v1").settings
  as_saved = {k: np.asarray(v).tolist() for k, v in defaults.items()}
  assert reference_scores.env_key("gymnax/Acrobot-v1", defaults) == (
      "gymnax/Acrobot-v1"
  )
  assert reference_scores.env_key("gymnax/Acrobot-v1", as_saved) == (
      "gymnax/Acrobot-v1"
  )
