"""Agent-network and meta-network building blocks: the action model's
taken-action gradient path, the pointwise convolution, and the agent
network's torso options."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.networks import action_models
from disco.networks import agent_nets
from disco.networks import encoders
from disco.networks import meta_nets

N, A, E = 5, 3, 6  # batch, actions, embedding size
SPEC = {
    "z": types.ArraySpec((7,), np.float32),
    "q": types.ArraySpec((2, 3), np.float32),
}


def _model_fn(grad_at: bool):
  def forward(embedding, actions):
    root = action_models.root_state(embedding, 4)
    model = action_models.make_action_model(SPEC, 4, (8,), A)
    return action_models.per_action_outputs(
        model, root, actions if grad_at else None
    )

  return hk.without_apply_rng(hk.transform(forward))


def test_grad_at_taken_actions_keeps_values_and_taken_gradients():
  rng = np.random.default_rng(0)
  embedding = jnp.asarray(rng.normal(size=(N, E)), jnp.float32)
  actions = jnp.asarray(rng.integers(0, A, N), jnp.int32)
  full, taken = _model_fn(False), _model_fn(True)
  params = full.init(jax.random.PRNGKey(0), embedding, actions)
  # Same modules, same parameter names.
  assert jax.tree.structure(params) == jax.tree.structure(
      taken.init(jax.random.PRNGKey(0), embedding, actions)
  )

  out_full = full.apply(params, embedding, actions)
  out_taken = taken.apply(params, embedding, actions)
  for k in SPEC:
    assert out_full[k].shape == (N, A) + SPEC[k].shape
    # Two different programs: XLA may fuse and vectorise their sums
    # differently on some CPUs, a few float32 ulps apart.
    np.testing.assert_allclose(out_taken[k], out_full[k], rtol=1e-5, atol=1e-7)

  weights = {
      k: jnp.asarray(rng.normal(size=v.shape), jnp.float32)
      for k, v in out_full.items()
  }
  mask = jax.nn.one_hot(actions, A)

  def loss(apply_fn, read_all):
    def f(p, x):
      out = apply_fn(p, x, actions)
      total = 0.0
      for k, v in out.items():
        m = 1.0 if read_all else mask.reshape((N, A) + (1,) * (v.ndim - 2))
        total += jnp.sum(v * weights[k] * m)
      return total

    return jax.jit(jax.grad(f, argnums=(0, 1)))

  # A loss that reads only the taken actions: the same gradient.
  ref = loss(full.apply, False)(params, embedding)
  got = loss(taken.apply, False)(params, embedding)
  for r, g in zip(jax.tree.leaves(ref), jax.tree.leaves(got), strict=True):
    np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
  # Reading the other actions too: their gradient is (by design) dropped.
  all_ref = loss(full.apply, True)(params, embedding)
  all_got = loss(taken.apply, True)(params, embedding)
  for r, g in zip(jax.tree.leaves(ref), jax.tree.leaves(all_got), strict=True):
    np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
  assert not np.allclose(jax.tree.leaves(all_ref)[0], jax.tree.leaves(ref)[0])


def test_pointwise_conv_is_a_width_one_conv1d():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)

  def ours(x):
    return meta_nets.PointwiseConv1D(6)(x)

  def conv(x):
    flat = x.reshape((-1,) + x.shape[2:])
    out = hk.Conv1D(output_channels=6, kernel_shape=1)(flat)
    return out.reshape(x.shape[:2] + out.shape[1:])

  ours_fn = hk.without_apply_rng(hk.transform(ours))
  conv_fn = hk.without_apply_rng(hk.transform(conv))
  params = conv_fn.init(jax.random.PRNGKey(0), x)
  # Parameter names and shapes are those of hk.Conv1D ...
  assert jax.tree.map(jnp.shape, ours_fn.init(jax.random.PRNGKey(0), x)) == (
      jax.tree.map(jnp.shape, params)
  )
  params = jax.tree.map(
      lambda p: p + jnp.asarray(rng.normal(size=p.shape), p.dtype), params
  )
  # ... and so are the outputs, for the same parameters.
  np.testing.assert_allclose(
      ours_fn.apply(params, x), conv_fn.apply(params, x), rtol=1e-5, atol=1e-6
  )


def _agent_net(**settings):
  spec = {
      "logits": types.ArraySpec((A,), np.float32),
      "v": types.ArraySpec((1,), np.float32),
  }
  config = agent_nets.make_net_config(agent_nets.network_settings(**settings))
  net = agent_nets.make_network(config, A, spec)
  obs = jnp.asarray(np.random.default_rng(0).normal(size=(N, 4)), jnp.float32)
  return net, net.init(jax.random.PRNGKey(0), obs), obs


def test_separate_torsos_for_actor_and_critic():
  net, params, obs = _agent_net(
      dense=(8, 8), activation="tanh", activate_final=True, separate_torsos=True
  )
  assert {"mlp/~_embedding_pass/torso_logits/~/linear_1"} <= set(params)
  assert {"mlp/~_embedding_pass/torso_v/~/linear_1"} <= set(params)
  assert not any("/torso/" in name for name in params)
  out = net.apply(params, obs)
  # The critic's torso does not move the policy, nor the actor's the value.
  moved = {
      k: jax.tree.map(lambda x: x + 1.0, v) if "torso_v" in k else v
      for k, v in params.items()
  }
  moved_out = net.apply(moved, obs)
  np.testing.assert_array_equal(out["logits"], moved_out["logits"])
  assert not np.allclose(out["v"], moved_out["v"])
  # tanh after every torso layer: a head reads values in (-1, 1).
  torso = hk.without_apply_rng(
      hk.transform(
          lambda x: hk.nets.MLP(
              (8, 8), activation=jnp.tanh, activate_final=True
          )(x)
      )
  )
  layers = {
      k.split("torso_logits/")[1]: v
      for k, v in params.items()
      if "torso_logits/" in k
  }
  embedding = torso.apply({f"mlp/{k}": v for k, v in layers.items()}, obs)
  head = params["mlp/~_head_pass/torso_head/~/linear_0"]
  np.testing.assert_allclose(
      out["logits"], embedding @ head["w"] + head["b"], rtol=1e-5, atol=1e-6
  )


def test_default_network_is_unchanged_and_bad_activation_fails():
  _, params, _ = _agent_net(dense=(8, 8))
  assert set(params) == {
      "mlp/~_embedding_pass/torso/~/linear_0",
      "mlp/~_embedding_pass/torso/~/linear_1",
      "mlp/~_head_pass/torso_head/~/linear_0",
      "mlp/~_head_pass/torso_head_1/~/linear_0",
  }
  with pytest.raises(ValueError, match="activation 'gelu'.*relu, tanh"):
    agent_nets.make_net_config(dict(dense=(8,), activation="gelu"))
  net = agent_nets.make_network(
      agent_nets.NetConfig(separate_torsos=True),
      A,
      {"logits": types.ArraySpec((A,), np.float32)},
      {"q": types.ArraySpec((1,), np.float32)},
  )
  with pytest.raises(ValueError, match="separate_torsos=False"):
    net.init(jax.random.PRNGKey(0), jnp.zeros((N, 4)))


def test_the_patch_convolution_is_haikus_valid_convolution():
  x = jax.random.uniform(jax.random.PRNGKey(0), (3, 20, 17, 4))
  for channels, kernel, stride in encoders.NATURE_CNN_LAYERS:
    patch = hk.without_apply_rng(
        hk.transform(
            lambda x, c=channels, k=kernel, s=stride: encoders.PatchConv2D(
                c, k, s, name="conv"
            )(x)
        )
    )
    conv = hk.without_apply_rng(
        hk.transform(
            lambda x, c=channels, k=kernel, s=stride: hk.Conv2D(
                c, k, s, padding="VALID", name="conv"
            )(x)
        )
    )
    params = patch.init(jax.random.PRNGKey(1), x)
    params = jax.tree.map(
        lambda p: p + jax.random.normal(jax.random.PRNGKey(2), p.shape), params
    )  # a bias that is not zero
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(
        jnp.shape, conv.init(jax.random.PRNGKey(1), x)
    )
    np.testing.assert_allclose(
        patch.apply(params, x), conv.apply(params, x), rtol=1e-4, atol=1e-4
    )
