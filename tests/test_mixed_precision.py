"""The agent network's mixed-precision policy (``NetConfig.compute_dtype``):
bfloat16 computation, float32 parameters and outputs; float32 by default."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import types
from disco.networks import agent_nets
from disco.update_rules import registry

import conftest

T, B, A = 3, 2, 3
OBS = (4, 4, 1)
TINY = dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))


def _disco_settings(compute_dtype):
  return registry.default_settings("disco").replace(
      network=agent_nets.network_settings(**TINY, compute_dtype=compute_dtype)
  )


def _observations(seed, *lead):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.random(lead + OBS) < 0.3, jnp.float32)


def _dot_dtypes(fn, *args) -> set[str]:
  """The output dtypes of every matmul in ``fn``'s jaxpr (nested ones
  included)."""
  text = str(jax.make_jaxpr(fn)(*args))
  return set(re.findall(r"(\w+)\[[\d,]*\] = dot_general", text))


@pytest.fixture(scope="module")
def networks():
  """``{dtype: (net, params)}``: the Disco rule's agent network (flat heads
  and the LSTM action model) in both compute dtypes."""
  rule = registry.make_rule(registry.default_settings("disco"))
  built = {}
  for dtype in agent_nets.COMPUTE_DTYPES:
    config = agent_nets.NetConfig(**TINY, compute_dtype=dtype)
    net = agent_nets.make_network(
        config, A, rule.flat_output_spec(A), rule.model_output_spec(A)
    )
    init = jax.jit(net.init)
    built[dtype] = (net, init(jax.random.PRNGKey(0), _observations(0, B)))
  return built


def test_bfloat16_computes_in_bfloat16_with_float32_params_and_outputs(
    networks,
):
  (f32, f32_params), (bf16, bf16_params) = networks.values()
  # Parameters: float32, and the same as the float32 network's.
  for p, q in zip(
      jax.tree.leaves(f32_params), jax.tree.leaves(bf16_params), strict=True
  ):
    assert q.dtype == jnp.float32
    np.testing.assert_array_equal(p, q)
  obs = _observations(1, 8)
  actions = jnp.arange(8, dtype=jnp.int32) % A
  for args in ((obs,), (obs, actions), (obs, actions, True)):
    want = jax.jit(f32.apply, static_argnums=3)(f32_params, *args)
    got = jax.jit(bf16.apply, static_argnums=3)(f32_params, *args)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
      assert g.dtype == jnp.float32 and g.shape == w.shape
      scale = float(np.max(np.abs(w)))
      np.testing.assert_allclose(g, w, rtol=0, atol=0.03 * scale)
    # Every matmul (torso, heads, LSTM, per-action heads) runs in bf16.
    for net, dtype in ((bf16, "bf16"), (f32, "f32")):
      apply = lambda p, net=net, args=args: net.apply(p, *args)
      assert _dot_dtypes(apply, f32_params) == {dtype}


def test_bfloat16_gradients_are_float32_and_close(networks):
  (f32, params), (bf16, _) = networks.values()
  obs = _observations(2, 8)

  def loss(apply):
    return lambda p: sum(jnp.sum(x**2) for x in jax.tree.leaves(apply(p, obs)))

  want = jax.jit(jax.grad(loss(f32.apply)))(params)
  got = jax.jit(jax.grad(loss(bf16.apply)))(params)
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
    assert g.dtype == jnp.float32
    assert np.linalg.norm(g - w) <= 0.05 * np.linalg.norm(w) + 1e-6
  assert _dot_dtypes(jax.grad(loss(bf16.apply)), params) == {"bf16"}


def test_learner_step_keeps_float32_params_and_a_float32_rule():
  agent = agent_lib.make_agent(_disco_settings("bfloat16"), num_actions=A)
  state = agent.initial_learner_state(
      jax.random.PRNGKey(0), np.zeros(OBS, np.float32)
  )
  meta_params = agent.rule.init_meta_params(jax.random.PRNGKey(1))
  obs = _observations(3, T + 1, B)
  out = agent.unroll(state.params, obs)
  rollout = types.ActorRollout(
      observations=obs,
      actions=jnp.zeros((T + 1, B), jnp.int32),
      rewards=jnp.ones((T + 1, B), jnp.float32),
      **conftest.step_fields(np.ones((T + 1, B), bool)),
      agent_outs={"logits": out["logits"]},
      logits=out["logits"],
  )
  update = jax.jit(agent.learner_update, static_argnums=4)(
      jax.random.PRNGKey(2), rollout, state, meta_params, False
  )
  new_state, logs, meta_out = update.learner_state, update.logs, update.meta_out
  for before, after in zip(
      jax.tree.leaves(state), jax.tree.leaves(new_state), strict=True
  ):
    assert after.dtype == before.dtype
  for leaf in jax.tree.leaves(new_state.params):
    assert leaf.dtype == jnp.float32 and np.isfinite(leaf).all()
  assert not np.array_equal(
      jax.tree.leaves(new_state.params)[0], jax.tree.leaves(state.params)[0]
  )
  for leaf in jax.tree.leaves((logs, meta_out)):
    if jnp.issubdtype(leaf.dtype, jnp.floating):
      assert leaf.dtype == jnp.float32 and np.isfinite(leaf).all()


def test_unknown_compute_dtype_names_the_valid_ones():
  with pytest.raises(ValueError, match="compute_dtype 'float16'.*bfloat16"):
    agent_nets.make_net_config(dict(dense=(8,), compute_dtype="float16"))
