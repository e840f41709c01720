"""Tests for disco.environments.brax_envs (Brax as disco environments).

The environment contract (``test_env_contract.py``) runs on
``brax/inverted_pendulum``; this file checks what is particular to Brax:
every environment builds and its step traces, the time limit ends episodes
as truncations and brax's own ends as terminations, resets are fresh, the
settings (backend, episode_length, brax's constructor arguments) reach brax
or are refused in one line, and a missing ``brax`` package is one line and
exit status 2. Tests that need brax skip (with the reason) where it is not
installed; those of a missing brax run either way.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import brax_envs
from disco.environments import registry
from disco.environments import suite_utils

import test_env_contract as contract


def brax_installed() -> bool:
  try:
    return importlib.util.find_spec("brax") is not None
  except (ImportError, ValueError):  # ValueError: sys.modules["brax"] None
    return False


needs_brax = pytest.mark.skipif(
    not brax_installed(),
    reason="brax is not installed (pip install -e '.[brax]')",
)

B = 2  # streams

# id -> (observation size, action size) at the default settings.
SIZES = {
    "ant": (27, 8),
    "halfcheetah": (17, 6),
    "hopper": (11, 3),
    "walker2d": (17, 6),
    "humanoid": (244, 17),
    "humanoidstandup": (244, 17),
    "inverted_pendulum": (4, 1),
    "inverted_double_pendulum": (8, 1),
    "reacher": (11, 2),
    "pusher": (23, 7),
}


# ------------------------------------------------------------ registry ----


@needs_brax
def test_env_names_cover_the_brax_registry():
  from brax import envs  # pylint: disable=g-import-not-at-top

  served, left_out = set(brax_envs.ENV_IDS), set(brax_envs.EXCLUDED_IDS)
  assert served | left_out == set(envs._envs)  # pylint: disable=protected-access
  assert not served & left_out
  assert tuple(SIZES) == brax_envs.ENV_IDS
  assert brax_envs.ENV_NAMES == tuple("brax/" + i for i in SIZES)
  for name in brax_envs.ENV_NAMES:
    entry = registry.get_entry(name)
    assert entry.jittable and "continuous" in entry.description
    settings = entry.settings
    assert settings["backend"] == "positional"
    assert settings["episode_length"] == 1000
  ant = registry.get_entry("brax/ant").settings
  assert ant["healthy_z_range"] == (0.2, 1.0)
  assert "use_contact_forces" not in ant  # brax 0.14 does not implement it
  assert set(registry.get_entry("brax/reacher").settings) == {
      "backend",
      "episode_length",
  }
  # The settings table is brax's own constructor defaults.
  for env_id in brax_envs.ENV_IDS:
    assert brax_envs.KWARG_DEFAULTS[env_id] == (
        brax_envs.package_kwarg_defaults(env_id)
    ), env_id


def test_importing_disco_does_not_import_brax():
  code = (
      "import sys, disco, disco.environments.registry as r; "
      "assert 'brax/ant' in r.env_names(); "
      "assert r.get_entry('brax/ant').settings['backend'] == 'positional'; "
      "assert sys.modules.get('brax') is None, 'brax imported'"
  )
  subprocess.run([sys.executable, "-c", code], check=True)


# Tracing a body takes 3-8 s (brax builds its model): CI builds the smallest
# and the ant; the full check (-m slow) every body.
IN_CI = ("inverted_pendulum", "ant")


@needs_brax
@pytest.mark.parametrize(
    "env_id",
    [
        e if e in IN_CI else pytest.param(e, marks=pytest.mark.slow)
        for e in SIZES
    ],
)
def test_every_environment_builds_and_its_step_traces(env_id):
  obs_size, action_size = SIZES[env_id]
  env = registry.make_env("brax/" + env_id, B)
  assert env.backend == "positional" and env.episode_length == 1000
  assert env.observation_spec().shape == (obs_size,)
  spec = env.action_spec()
  assert spec.dtype == np.float32 and spec.shape == (action_size,)
  np.testing.assert_array_equal(spec.minimum, -np.ones(action_size))
  np.testing.assert_array_equal(spec.maximum, np.ones(action_size))
  # Traced, not compiled (brax compiles for tens of seconds on CPU); the
  # contract runs brax/inverted_pendulum.
  state, first = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
  after, ts = jax.eval_shape(env.step, state, jnp.zeros((B, action_size)))
  assert jax.tree.structure(after) == jax.tree.structure(state)
  same = jax.tree.map(
      lambda a, b: a.shape == b.shape and a.dtype == b.dtype, after, state
  )
  assert all(jax.tree.leaves(same))
  for timestep in (first, ts):
    assert timestep.observation.shape == (B, obs_size)
    assert timestep.observation.dtype == np.float32


# ----------------------------------------------------------- semantics ----


@pytest.fixture(scope="module")
def pendulum():
  return brax_envs.make("inverted_pendulum", B, episode_length=5)


@needs_brax
def test_time_limit_truncates_and_a_fallen_pole_terminates(pendulum):
  env = pendulum
  state, first = env.reset(jax.random.PRNGKey(3))
  # Stream 0 keeps the limit of 5 steps; stream 1 gets 1000 and is pushed
  # one way until the pole tips over (|angle| > 0.2: brax's done).
  state = state.replace(
      params=state.params.replace(episode_length=jnp.array([5, 1000]))
  )
  actions = jnp.array([[0.0], [1.0]])
  step_types, discounts, rewards, times = [], [], [], []
  for _ in range(60):
    state, ts = env.step(state, actions)
    step_types.append(np.asarray(ts.step_type))
    discounts.append(np.asarray(ts.discount))
    rewards.append(np.asarray(ts.reward))
    times.append(np.asarray(state.env_state.time))
    if ts.step_type[1] == types.LAST:
      break
  step_types, discounts = np.stack(step_types), np.stack(discounts)
  rewards, times = np.stack(rewards), np.stack(times)
  np.testing.assert_array_equal(rewards, 1.0)  # +1 per step, also the last
  # Stream 0: LAST with discount 1 every 5 steps (a truncation), and the
  # episode's step count starts again.
  last0 = step_types[:, 0] == types.LAST
  np.testing.assert_array_equal(np.flatnonzero(last0) % 5, 4)
  np.testing.assert_array_equal(discounts[:, 0], 1.0)
  np.testing.assert_array_equal(times[:, 0], (np.arange(len(times)) + 1) % 5)
  # Stream 1: its pole fell (long before 1000 steps): a termination.
  assert step_types[-1, 1] == types.LAST and discounts[-1, 1] == 0.0
  assert 5 < len(times) < 60 and times[-1, 1] == 0
  np.testing.assert_array_equal(step_types[:-1, 1], types.MID)
  np.testing.assert_array_equal(discounts[:-1, 1], 1.0)
  # The LAST step shows a fresh episode's first observation (brax's reset
  # draws every coordinate within 0.01 of upright), not the first one again.
  obs = np.asarray(ts.observation[1])
  assert np.all(np.abs(obs) <= 0.01)
  assert not np.array_equal(obs, np.asarray(first.observation[1]))


@needs_brax
def test_a_termination_at_the_time_limit_is_a_termination(pendulum):
  env = pendulum
  pushed = jnp.ones((B, 1))

  def first_episode(limit):
    state, _ = env.reset(jax.random.PRNGKey(4))
    state = state.replace(
        params=state.params.replace(episode_length=jnp.full((B,), limit))
    )
    for t in range(1, 60):
      state, ts = env.step(state, pushed)
      if ts.step_type[0] != types.MID:
        return t, ts
    raise AssertionError("the pole never fell")

  fell_at, ts = first_episode(1000)
  assert fell_at > 1 and ts.discount[0] == 0.0
  # The same episode again, with the time limit at the step the pole falls.
  ended_at, ts = first_episode(fell_at)
  assert ended_at == fell_at
  np.testing.assert_array_equal(ts.step_type, types.LAST)
  assert ts.discount[0] == 0.0  # terminated (also truncated): discount 0


@needs_brax
def test_streams_are_determined_by_their_keys(pendulum):
  env = pendulum

  def run(key):
    state, _ = env.reset(key)
    out = []
    for t in range(7):  # past a reset
      u = jax.random.uniform(jax.random.PRNGKey(t), (B, 1), minval=-1)
      state, ts = env.step(state, u)
      out.append(ts)
    return jax.device_get(out)

  a, b = run(jax.random.PRNGKey(9)), run(jax.random.PRNGKey(9))
  jax.tree.map(np.testing.assert_array_equal, a, b)
  c = run(jax.random.PRNGKey(10))
  assert not np.array_equal(a[-1].observation, c[-1].observation)


# ------------------------------------------------------------ settings ----


@needs_brax
def test_backend_setting_reaches_brax():
  default = brax_envs.make("inverted_pendulum", B)
  generalized = brax_envs.make("inverted_pendulum", B, backend="generalized")
  assert default.backend == "positional"
  assert default.package_env.backend == "positional"
  assert generalized.backend == "generalized"
  assert generalized.package_env.backend == "generalized"
  # brax builds the pendulum differently per backend (time step x frames).
  assert float(default.package_env.dt) == pytest.approx(0.02)
  assert float(generalized.package_env.dt) == pytest.approx(0.04)
  assert "generalized" in repr(generalized.package_env.unwrapped._pipeline)


@needs_brax
def test_brax_constructor_arguments_reach_brax():
  env = registry.make_env(
      "brax/ant",
      B,
      ctrl_cost_weight=0.25,
      healthy_z_range=[0.3, 1.2],  # a config may give a list
      terminate_when_unhealthy=False,
      episode_length=7,
  )
  ant = env.package_env
  assert ant._ctrl_cost_weight == 0.25  # pylint: disable=protected-access
  assert ant._healthy_z_range == (0.3, 1.2)  # pylint: disable=protected-access
  assert not ant._terminate_when_unhealthy  # pylint: disable=protected-access
  assert env.episode_length == 7
  assert int(env.params.episode_length) == 7


@pytest.mark.parametrize(
    "env_id, settings, message",
    [
        ("brax/antt", {}, r"Unknown brax environment 'antt'.*'ant'"),
        ("swimmer", {}, r"not served by disco: .*a_min"),
        ("ant", dict(backend="gpu"), r"backend='gpu'.*positional, general"),
        ("ant", dict(episode_length=0), r"episode_length=0 .*integer >= 1"),
        ("ant", dict(episode_length=2.5), r"episode_length=2.5 .*integer"),
        ("ant", dict(episode_lenght=5), r"\['episode_lenght'\].*'backend'"),
        ("ant", dict(healthy_z_range=3), r"healthy_z_range=3 .*pair of num"),
        ("ant", dict(terminate_when_unhealthy="no"), r"must be a bool"),
        ("reacher", dict(ctrl_cost_weight=1.0), r"\['ctrl_cost_weight'\]"),
        ("ant", dict(use_contact_forces=True), r"\['use_contact_forces'\]"),
    ],
)
def test_bad_names_and_settings_are_one_line(env_id, settings, message):
  with pytest.raises(ValueError, match=message) as error:
    brax_envs.make(env_id, B, **settings)
  assert "\n" not in str(error.value)


def test_a_missing_brax_is_one_line_naming_the_install(monkeypatch):
  monkeypatch.setitem(sys.modules, "brax", None)
  assert registry.get_entry("brax/ant").settings["episode_length"] == 1000
  with pytest.raises(ValueError, match="backend='gpu'"):  # checked first
    registry.make_env("brax/ant", B, backend="gpu")
  with pytest.raises(suite_utils.MissingPackageError) as error:
    registry.make_env("brax/ant", B)
  message = str(error.value)
  assert isinstance(error.value, ValueError)
  assert isinstance(error.value, ImportError)
  assert "pip install -e '.[brax]'" in message and "\n" not in message


def test_disco_eval_without_brax_exits_2_with_one_line(tmp_path):
  done = contract.eval_without(("brax",), "brax/ant", tmp_path / "run")
  assert done.returncode == 2, done.stderr
  lines = done.stderr.strip().splitlines()
  assert lines == [
      "disco-eval: error: Environment 'brax/ant' needs the package 'brax' "
      "(module 'brax' is missing): pip install -e '.[brax]' (from a "
      "checkout) or pip install 'disco-rl-harness[brax]'."
  ]


def test_reference_entries():
  from disco.environments import reference_scores  # pylint: disable=g-import-not-at-top

  for name in brax_envs.ENV_NAMES:
    entry = reference_scores.get_entry(name)
    assert "random_returns.py --envs " + name in entry.random_source
    assert np.isfinite(entry.random_return)
  np.testing.assert_allclose(
      reference_scores.normalize([1000.0], "brax/inverted_pendulum"), [1.0]
  )
  with pytest.raises(reference_scores.MissingReferenceError, match="brax 0.14"):
    reference_scores.normalize([1.0], "brax/ant")
  # An entry holds for the default settings only.
  with pytest.raises(reference_scores.MissingReferenceError):
    reference_scores.normalize(
        [1.0], reference_scores.env_key("brax/ant", {"backend": "mjx"})
    )
