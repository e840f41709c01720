"""Tests for disco.environments.craftax_envs (Craftax, with achievements).

Craftax compiles slowly (a step and a world generation take tens of seconds),
so the tests share two compiled environments of Craftax-Classic-Symbolic-v1
with two streams and a 3-step time limit, and only trace the other games.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import craftax_envs
from disco.environments import registry
from disco.environments import suite_utils
from disco.training import acting

import test_env_contract as contract

pytest.importorskip("craftax", reason="craftax/... needs craftax")

CLASSIC = "Craftax-Classic-Symbolic-v1"
B = 2
LIMIT = 3
NOOP = 0


@pytest.fixture(scope="module")
def pooled():
  """The default reset pool: ``ceil(2 / 16) = 1`` world per step."""
  return craftax_envs.make(CLASSIC, B, max_timesteps=LIMIT)


@pytest.fixture(scope="module")
def own_worlds():
  """A world per stream (``reset_ratio=1``)."""
  return craftax_envs.make(CLASSIC, B, max_timesteps=LIMIT, reset_ratio=1)


def _replace_state(state, **fields):
  """``state`` with fields of craftax's state replaced (``[B]`` values)."""
  return state.replace(
      env_state=state.env_state.replace(
          **{
              k: jnp.asarray(v, getattr(state.env_state, k).dtype)
              for k, v in fields.items()
          }
      )
  )


def _steps(env, state, count, actions=None):
  """``count`` steps: the final state and the stacked timesteps ``[T, B]``."""
  actions = jnp.full((B,), NOOP, jnp.int32) if actions is None else actions
  out = []
  for _ in range(count):
    state, ts = env.step(state, actions)
    out.append(ts)
  return state, jax.device_get(jax.tree.map(lambda *x: jnp.stack(x), *out))


# ------------------------------------------------------------ registry ----


def test_names_and_settings():
  assert craftax_envs.ENV_NAMES == tuple(
      "craftax/" + i for i in craftax_envs.ENV_IDS
  )
  for name in craftax_envs.ENV_NAMES:
    assert name in registry.env_names()
  classic = registry.get_entry("craftax/" + CLASSIC).settings
  full = registry.get_entry("craftax/Craftax-Symbolic-v1").settings
  assert classic["reset_ratio"] == full["reset_ratio"] == 16
  assert classic["max_timesteps"] == 10000 and full["max_timesteps"] == 100000
  assert "fractal_noise_angles" not in classic


@pytest.mark.parametrize(
    "env_id",
    [
        # Building a pixel game renders craftax's textures (minutes in a
        # fresh install): the full check only.
        pytest.param(i, marks=pytest.mark.slow) if "Pixels" in i else i
        for i in craftax_envs.ENV_IDS
    ],
)
def test_the_listed_parameters_are_the_packages(env_id):
  # Listed without importing craftax (docs, launchers): checked here.
  import dataclasses  # pylint: disable=g-import-not-at-top

  params = craftax_envs._package_env(env_id).default_params
  fields = {
      f.name: getattr(params, f.name)
      for f in dataclasses.fields(params)
      if f.name != "fractal_noise_angles"
  }
  settings = craftax_envs.env_specs()["craftax/" + env_id][1]
  assert settings == {**fields, "reset_ratio": 16}


@pytest.mark.parametrize(
    "settings, match",
    [
        (dict(reset_ratio=0), "reset_ratio=0.*>= 1"),
        (dict(reset_ratio=2.5), "reset_ratio=2.5.*integer"),
        (dict(max_timesteps=0), "max_timesteps=0.*>= 1"),
        (dict(max_steps=5), "Unknown setting"),
    ],
)
def test_bad_settings(settings, match):
  with pytest.raises(ValueError, match=match):
    craftax_envs.make(CLASSIC, B, **settings)


def test_pool_size():
  assert craftax_envs.make(CLASSIC, 64).pool_size == 4
  assert craftax_envs.make(CLASSIC, 65, reset_ratio=16).pool_size == 5
  assert craftax_envs.make(CLASSIC, 3, reset_ratio=1).pool_size == 0


@pytest.mark.parametrize(
    "env_id, obs_shape, actions, achievements",
    [
        ("Craftax-Symbolic-v1", (8268,), 43, 67),
        # The pixel games render craftax's textures first (minutes in a fresh
        # install): the full check only.
        pytest.param(
            "Craftax-Classic-Pixels-v1",
            (63, 63, 3),
            17,
            22,
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "Craftax-Pixels-v1", (130, 110, 3), 43, 67, marks=pytest.mark.slow
        ),
    ],
)
def test_the_other_games_trace(env_id, obs_shape, actions, achievements):
  # Traced, not compiled: the environment contract runs the Classic game.
  env = craftax_envs.make(env_id, B)
  assert env.observation_spec().shape == obs_shape
  assert env.num_actions == actions and len(env.achievements) == achievements
  state, first = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
  _, ts = jax.eval_shape(env.step, state, jnp.zeros(B, jnp.int32))
  for t in (first, ts):
    assert t.observation.shape == (B, *obs_shape)
    assert t.observation.dtype == np.float32
    assert len(t.info) == achievements
  assert "achievement/collect_wood" in ts.info


# ----------------------------------------------------------- episodes ----


def test_the_time_limit_truncates(pooled):
  state, first = pooled.reset(jax.random.PRNGKey(0))
  assert set(first.info) == {"achievement/" + a for a in pooled.achievements}
  _, ts = _steps(pooled, state, LIMIT)
  np.testing.assert_array_equal(
      ts.step_type, [[types.MID] * B] * (LIMIT - 1) + [[types.LAST] * B]
  )
  np.testing.assert_array_equal(ts.discount, 1.0)  # truncated


def test_death_terminates_even_at_the_time_limit(pooled):
  state, _ = pooled.reset(jax.random.PRNGKey(0))
  # Stream 0 dies mid-episode, stream 1 dies at the time limit.
  state = _replace_state(state, player_health=[0, 0], timestep=[0, LIMIT - 1])
  _, ts = _steps(pooled, state, 1)
  np.testing.assert_array_equal(ts.step_type[0], types.LAST)
  np.testing.assert_array_equal(ts.discount[0], 0.0)


def test_the_pool_gives_new_worlds_shared_when_it_is_short(pooled):
  state, first = pooled.reset(jax.random.PRNGKey(0))
  assert not np.array_equal(*np.asarray(first.observation))  # two worlds
  state, ts = _steps(pooled, state, LIMIT)
  # Both streams ended in the same step; the pool holds one world.
  obs = np.asarray(ts.observation[-1])
  np.testing.assert_array_equal(obs[0], obs[1])
  assert not np.array_equal(obs[0], np.asarray(first.observation[0]))
  np.testing.assert_array_equal(state.env_state.timestep, 0)
  # The next pool is another world.
  _, again = _steps(pooled, state, LIMIT)
  assert not np.array_equal(again.observation[-1][0], obs[0])


def test_reset_ratio_one_resets_every_stream_as_craftax_does(
    pooled, own_worlds
):
  # ``step`` batches what ``_step_stream`` does for one stream: the
  # package's step, then a new world from the stream's own key where the
  # episode ended (craftax's auto-reset). The base class's per-stream step
  # (``_step``: vmapped ``_step_stream``) is the reference.
  state, _ = pooled.reset(jax.random.PRNGKey(1))
  actions = jnp.asarray([NOOP, 5], jnp.int32)
  expected, reference = state, []
  for _ in range(LIMIT + 1):
    expected, ts = own_worlds._step(expected, actions)
    reference.append(ts)
  final, ts = _steps(own_worlds, state, LIMIT + 1, actions)
  jax.tree.map(np.testing.assert_array_equal, final, expected)
  reference = jax.tree.map(lambda *x: np.stack(x), *reference)
  jax.tree.map(np.testing.assert_array_equal, ts.replace(info=None), reference)
  # Both ended at step LIMIT, each in a world of its own.
  assert (ts.step_type[LIMIT - 1] == types.LAST).all()
  assert not np.array_equal(*ts.observation[LIMIT - 1])


# -------------------------------------------------------- achievements ----


def test_achievements_reach_the_episode_statistics(pooled):
  state, _ = pooled.reset(jax.random.PRNGKey(0))
  names = pooled.achievements
  wood, table = names.index("collect_wood"), names.index("place_table")
  unlocked = np.zeros((B, len(names)), bool)
  unlocked[0, wood] = unlocked[1, wood] = unlocked[1, table] = True
  state = _replace_state(state, achievements=unlocked)
  _, ts = _steps(pooled, state, LIMIT + 1)
  last = ts.step_type == types.LAST
  np.testing.assert_array_equal(ts.info["achievement/collect_wood"][last], 1)
  # The statistics of the rollout: both episodes ended once.
  rollout = acting.with_env_info(
      types.ActorTimestep(
          observations=ts.observation,
          actions=jnp.zeros(ts.reward.shape, jnp.int32),
          rewards=ts.reward,
          step_types=ts.step_type,
          discounts=ts.discount,
          agent_outs={},
          logits=jnp.zeros(ts.reward.shape + (pooled.num_actions,)),
      ),
      ts,
  )
  actor = acting.ActorCarry(
      env_state=None,
      timestep=None,
      episode_return=jnp.zeros(B),
      episode_length=jnp.zeros(B, jnp.int32),
  )
  _, stats = acting.episode_stats(actor, rollout)
  assert stats["episodes"] == 2
  assert stats["episode/achievement/collect_wood"] == 1.0
  assert stats["episode/achievement/place_table"] == 0.5
  assert stats["episode/achievement/collect_diamond"] == 0.0
  assert len([k for k in stats if k.startswith("episode/")]) == len(names)


# ---------------------------------------------------- missing package ----


def test_a_missing_craftax_is_one_line_and_exit_status_2(tmp_path):
  result = contract.eval_without(
      ("craftax",), "craftax/" + CLASSIC, tmp_path / "run"
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert "pip install -e '.[craftax]'" in lines[0]
  assert not (tmp_path / "run").exists()


def test_the_missing_package_error_is_a_value_error(monkeypatch):
  monkeypatch.setitem(sys.modules, "craftax", None)
  with pytest.raises(suite_utils.MissingPackageError) as info:
    craftax_envs.make(CLASSIC, B)
  assert isinstance(info.value, ValueError)
  assert "pip install -e '.[craftax]'" in str(info.value)
