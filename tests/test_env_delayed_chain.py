"""Tests for disco.environments.delayed_chain: the LPG delayed chain MDP."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import delayed_chain

import test_env_contract as contract

B = 4


@pytest.fixture(scope="module")
def short():
  return delayed_chain.DelayedChain(B, "short")


def _run(env, state, actions_fn, num_steps):
  """Steps ``num_steps`` times with ``actions_fn(t, state)``; stacks ts."""
  out = []
  for t in range(num_steps):
    state, ts = env.step(state, actions_fn(t, state))
    out.append(ts)
  return state, jax.tree.map(lambda *x: np.stack(x), *out)


@pytest.mark.parametrize(
    "variant, obs_size, low, high",
    [
        ("short", 60, 5, 30),
        ("short_noisy", 60, 5, 30),
        ("long", 100, 5, 50),
        ("long_noisy", 100, 5, 50),
        ("state_distraction", 22, 5, 30),
    ],
)
def test_variants_match_the_appendix(variant, obs_size, low, high):
  spec = delayed_chain.VARIANTS[variant]
  assert (spec.min_length, spec.max_length) == (low, high)
  assert spec.noisy_rewards == variant.endswith("_noisy")
  assert spec.distractor_bits == (20 if variant == "state_distraction" else 0)
  env = delayed_chain.DelayedChain(2, variant)
  assert env.observation_spec().shape == (obs_size,)
  assert env.observation_spec().dtype == np.float32
  _, ts = env.reset(jax.random.PRNGKey(0))
  assert ts.observation.shape == (2, obs_size)
  assert ts.observation.dtype == np.float32


def test_reset_shows_the_start_state(short):
  # The specs' types, shapes and the FIRST timestep: test_env_contract.py.
  state, ts = short.reset(jax.random.PRNGKey(0))
  assert short.num_actions == 2
  np.testing.assert_array_equal(state.depth, 0)
  # The start state's one-hot tells the rewarded first action.
  np.testing.assert_array_equal(np.argmax(ts.observation, -1), state.start)
  np.testing.assert_array_equal(ts.observation.sum(-1), 1.0)


def test_chain_length_is_drawn_per_lifetime():
  env = delayed_chain.DelayedChain(3, "long")
  lengths = []
  for k in range(12):
    state, _ = env.reset(jax.random.PRNGKey(k))
    length = np.asarray(state.length)
    assert (length == length[0]).all() and 5 <= length[0] <= 50
    lengths.append(int(length[0]))
  assert len(set(lengths)) > 3
  fixed = delayed_chain.DelayedChain(3, "long", chain_length=9)
  for k in range(3):
    np.testing.assert_array_equal(
        fixed.reset(jax.random.PRNGKey(k))[0].length, 9
    )


@pytest.mark.parametrize("variant", ["short", "short_noisy"])
def test_first_action_decides_the_return(variant):
  n, length = 4, 7
  env = delayed_chain.DelayedChain(n, variant, chain_length=length)
  state, ts = env.reset(jax.random.PRNGKey(1))
  start = state.start
  # Streams 0, 1 take the rewarded first action, 2, 3 the other one; later
  # actions are random (and must not matter).
  first = jnp.where(jnp.arange(n) < 2, start, 1 - start)
  later = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (length, n))

  def actions(t, state):
    return first if t == 0 else later[t].astype(jnp.int32)

  state, ts = _run(env, state, actions, length)
  step_type = np.asarray(ts.step_type)
  assert (step_type[:-1] == types.MID).all()
  assert (step_type[-1] == types.LAST).all()
  np.testing.assert_array_equal(ts.discount[:-1], 1.0)
  np.testing.assert_array_equal(ts.discount[-1], 0.0)  # terminated
  np.testing.assert_array_equal(ts.reward[-1], [1.0, 1.0, -1.0, -1.0])
  if variant == "short":
    np.testing.assert_array_equal(ts.reward[:-1], 0.0)
  else:
    assert np.isin(ts.reward[:-1], [-1.0, 1.0]).all()
  # Auto-reset: the LAST step already shows the next episode's start state.
  np.testing.assert_array_equal(state.depth, 0)
  np.testing.assert_array_equal(np.argmax(ts.observation[-1], -1), state.start)


def test_tabular_observation_tracks_chain_and_depth():
  env = delayed_chain.DelayedChain(2, "short", chain_length=5)
  state, _ = env.reset(jax.random.PRNGKey(3))
  first = jnp.stack([state.start[0], 1 - state.start[1]])
  state, ts = _run(env, state, lambda t, s: first if t == 0 else first, 4)
  # Depth d on the rewarding chain is state 2 + d - 1; on the other chain
  # it is 2 + 29 + d - 1 (max_length 30).
  np.testing.assert_array_equal(
      np.argmax(ts.observation, -1), [[2 + d, 31 + d] for d in range(4)]
  )


def test_noisy_rewards_are_fair_coins():
  n = 2000
  env = delayed_chain.DelayedChain(n, "long_noisy", chain_length=50)
  state, _ = env.reset(jax.random.PRNGKey(4))
  _, ts = env.step(state, jnp.zeros(n, jnp.int32))
  reward = np.asarray(ts.reward)
  assert np.isin(reward, [-1.0, 1.0]).all()
  assert abs(reward.mean()) < 4 / np.sqrt(n)


def test_state_distraction_bits():
  n = 500
  env = delayed_chain.DelayedChain(n, "state_distraction", chain_length=6)
  state, ts = env.reset(jax.random.PRNGKey(5))
  obs = np.asarray(ts.observation)
  np.testing.assert_array_equal(obs[:, 0], state.start)
  np.testing.assert_array_equal(obs[:, 1], 0.0)
  assert abs(obs[:, 2:].mean() - 0.5) < 0.02
  first = jnp.where(jnp.arange(n) % 2 == 0, state.start, 1 - state.start)
  start = state.start
  state, ts2 = env.step(state, first)
  obs2 = np.asarray(ts2.observation)
  np.testing.assert_array_equal(obs2[:, 0], start)
  np.testing.assert_array_equal(obs2[:, 1], np.arange(n) % 2 == 0)
  assert not np.array_equal(obs2[:, 2:], obs[:, 2:])  # drawn afresh


@pytest.mark.parametrize("variant", sorted(delayed_chain.VARIANTS))
def test_episodes_last_the_chain_length(variant):
  # The contract's rollout (jit, vmap, scan; its checks: test_env_contract.py)
  # of every variant, and what is particular to the chain.
  env, _, _, (first, ts, states) = contract.rollout(
      "delayed_chain", variant=variant
  )
  contract.check_rollout(env, first, ts)
  step_type = np.asarray(ts.step_type)
  last = step_type == types.LAST
  np.testing.assert_array_equal(np.asarray(ts.discount), np.where(last, 0, 1))
  np.testing.assert_array_equal(np.asarray(states.depth) == 0, last)
  assert np.isin(np.asarray(ts.reward)[last], [-1.0, 1.0]).all()
  # Episodes last exactly the lifetime's chain length.
  length = np.asarray(states.length)[:, -1]
  for s in range(contract.SEEDS):
    ends = np.flatnonzero(last[s, :, 0]) + 1
    assert len(ends) >= 1
    np.testing.assert_array_equal(
        np.diff(np.concatenate([[0], ends])), int(length[s, 0])
    )


@pytest.mark.parametrize(
    "settings, bad",
    [
        (dict(variant="medium"), "variant='medium'.*short_noisy"),
        (dict(chain_length=0), r"chain_length=0.*\[1,.30\]"),
        (dict(chain_length=31), "chain_length=31"),
        (
            dict(variant="long", chain_length=2.5),
            r"chain_length=2.5.*\[1,.50\]",
        ),
        (dict(batch_size=0), "batch_size=0"),
    ],
)
def test_bad_settings(settings, bad):
  kwargs = dict(batch_size=2) | settings
  with pytest.raises(ValueError, match=bad):
    delayed_chain.DelayedChain(**kwargs)


def test_env_specs():
  make, defaults = delayed_chain.ENV_SPECS["delayed_chain"]
  assert set(delayed_chain.ENV_SPECS) == {"delayed_chain"}
  assert defaults == dict(variant="short", chain_length=None)
  env = make(3, **defaults)
  assert isinstance(env, delayed_chain.DelayedChain)
  assert make(3, variant="state_distraction").observation_spec().shape == (22,)
