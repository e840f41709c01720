"""Meta-network input transforms on hand-computed cases, and declarative
(user-defined) input sets: input options are data."""

from __future__ import annotations

import math

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.networks import input_transforms as itx
from disco.networks import meta_nets

TX = itx.TRANSFORMS
# Every transform has a test below; a new one must get its own.
TESTED = {
    "identity",
    "softmax",
    "max_a",
    "stop_grad",
    "clip",
    "sign",
    "drop_last",
    "td_pair",
    "sign_log",
    "sign_hyp",
    "masks_to_discounts",
    "select_a",
    "pi_weighted_avg",
    "normalize",
}


def _apply(name, x, actions=None, policy=None):
  return np.asarray(TX[name](jnp.asarray(x), actions, policy, None))


def test_every_transform_is_tested():
  assert set(TX) == TESTED


def test_select_a():
  # x[t, b, a] = 100 t + 10 b + a, T=2, B=2, A=3.
  x = np.arange(2)[:, None, None] * 100 + np.arange(2)[None, :, None] * 10
  x = (x + np.arange(3)[None, None, :]).astype(np.float32)
  actions = jnp.array([[2, 0], [1, 2]])
  np.testing.assert_array_equal(
      _apply("select_a", x, actions), [[2, 10], [101, 112]]
  )
  # Trailing feature axes are kept: [T, B, A, K] -> [T, B, K].
  xk = np.stack([x, -x], axis=-1)
  np.testing.assert_array_equal(
      _apply("select_a", xk, actions),
      [[[2, -2], [10, -10]], [[101, -101], [112, -112]]],
  )


def test_select_a_rejects_per_state_inputs():
  with pytest.raises(ValueError, match="drop_last"):
    _apply("select_a", np.zeros((3, 2, 4)), jnp.zeros((2, 2), jnp.int32))


def test_pi_weighted_avg():
  # T+1=1, B=2, A=2, K=2.
  x = np.array([[[[1.0, 2.0], [3.0, 4.0]], [[10.0, 0.0], [0.0, 10.0]]]])
  policy = jnp.array([[[0.25, 0.75], [0.5, 0.5]]])
  np.testing.assert_allclose(
      _apply("pi_weighted_avg", x, policy=policy),
      [[[0.25 * 1 + 0.75 * 3, 0.25 * 2 + 0.75 * 4], [5.0, 5.0]]],
  )
  with pytest.raises(ValueError, match="pi_weighted_avg"):
    _apply("pi_weighted_avg", x[..., 0], policy=policy)


def test_td_pair():
  x = np.array([[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]]])  # [3, 1, 2]
  np.testing.assert_array_equal(
      _apply("td_pair", x), [[[1.0, 2.0, 3.0, 4.0]], [[3.0, 4.0, 5.0, 6.0]]]
  )


def test_sign_log():
  e = math.e
  np.testing.assert_allclose(
      _apply("sign_log", [-(e - 1), 0.0, e**2 - 1]), [-1.0, 0.0, 2.0], rtol=1e-6
  )


def test_sign_hyp():
  # sign(x) (sqrt(|x| + 1) - 1) + 1e-3 x.
  np.testing.assert_allclose(
      _apply("sign_hyp", [3.0, -8.0, 0.0]), [1.003, -2.008, 0.0], rtol=1e-6
  )


def test_masks_to_discounts_on_bool_terminals():
  out = _apply("masks_to_discounts", np.array([[True, False], [False, True]]))
  np.testing.assert_array_equal(out, [[0.0, 1.0], [1.0, 0.0]])
  assert out.dtype.kind == "f"


def test_drop_last():
  x = np.arange(12.0).reshape(3, 2, 2)
  np.testing.assert_array_equal(_apply("drop_last", x), x[:2])


def test_softmax_over_last_axis():
  x = np.array([[[0.0, math.log(3.0)], [5.0, 5.0]]])
  np.testing.assert_allclose(
      _apply("softmax", x), [[[0.25, 0.75], [0.5, 0.5]]], rtol=1e-6
  )


def test_stop_grad():
  fn = TX["stop_grad"]
  x = jnp.array([1.0, -2.0, 3.0])
  np.testing.assert_array_equal(fn(x, None, None, None), x)
  grad = jax.grad(lambda v: jnp.sum(fn(v, None, None, None) * v))(x)
  np.testing.assert_array_equal(grad, x)  # only the second factor counts
  grad = jax.grad(lambda v: jnp.sum(fn(v, None, None, None) ** 2))(x)
  np.testing.assert_array_equal(grad, np.zeros(3))


def test_max_a():
  x = np.array([[[[1.0, 5.0], [4.0, 2.0], [0.0, 3.0]]]])  # [1, 1, A=3, K=2]
  np.testing.assert_array_equal(_apply("max_a", x), [[[4.0, 5.0]]])


def test_clip():
  np.testing.assert_array_equal(
      _apply("clip", [-3.0, -1.0, 0.5, 5.0]), [-2.0, -1.0, 0.5, 2.0]
  )


def test_sign():
  np.testing.assert_array_equal(
      _apply("sign", [-2.0, 0.0, 3.0]), [-1.0, 0.0, 1.0]
  )


def test_identity():
  x = np.array([[1.5, -2.0]])
  np.testing.assert_array_equal(_apply("identity", x), x)


def test_normalize_first_call_standardises_over_time_and_batch():
  # The EMAs are zero-debiased, so after one call they equal the statistics
  # of this batch: feature 0 has mean 2, std 1; feature 1 mean 0, std 2.
  x = jnp.array([[[1.0, 2.0]], [[3.0, -2.0]]])  # [T=2, B=1, K=2]
  fn = hk.transform_with_state(lambda v: TX["normalize"](v, None, None, None))
  params, state = fn.init(None, x)
  out, _ = fn.apply(params, state, None, x)
  np.testing.assert_allclose(out, [[[-1.0, 1.0]], [[1.0, -1.0]]], rtol=1e-5)


# ------------------------------------------------- declarative inputs ----
def test_input_spec_rejects_unknown_transform():
  with pytest.raises(ValueError) as info:
    meta_nets.InputSpec("rewards", ("sign_log", "bogus"))
  msg = str(info.value)
  assert "bogus" in msg and "rewards" in msg
  for valid in ("sign_log", "select_a", "y_net", "z_net"):  # lists valid ones
    assert repr(valid) in msg
  meta_nets.InputSpec("rewards", ("sign_log", "y_net"))  # known names pass


T, B, A = 3, 2, 3


def _inputs():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(T + 1, B, A)), jnp.float32)
  return types.UpdateRuleInputs(
      observations=None,
      actions=jnp.array([[0, 2], [1, 1], [2, 0], [0, 0]]),
      rewards=jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
      is_terminal=jnp.zeros((T, B), bool),
      agent_out=dict(logits=logits),
      extra_from_rule=dict(
          v_scalar=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32)
      ),
  )


# A user-defined input set (not Disco103's).
CUSTOM = meta_nets.MetaNetInputOption(
    base=(
        meta_nets.InputSpec("rewards", ("sign_log",)),
        meta_nets.InputSpec("extra_from_rule/v_scalar", ("td_pair",)),
        meta_nets.InputSpec(
            "agent_out/logits", ("drop_last", "softmax", "select_a")
        ),
    ),
    action_conditional=(
        meta_nets.InputSpec("agent_out/logits", ("drop_last", "softmax")),
    ),
)


def test_build_features_custom_option():
  inputs = _inputs()
  features, per_action = meta_nets.build_features(
      inputs,
      CUSTOM,
      y_net=None,
      z_net=None,
      action_net=lambda x: x,
      axis_name=None,
  )
  probs = np.asarray(jax.nn.softmax(inputs.agent_out["logits"][:-1]))
  actions = np.asarray(inputs.actions[:-1])
  one_hot = np.eye(A)[actions]
  # Per action: the probability of that action and whether it was taken.
  assert per_action.shape == (T, B, A, 2)
  np.testing.assert_allclose(per_action[..., 0], probs, rtol=1e-6)
  np.testing.assert_array_equal(per_action[..., 1], one_hot)
  # Base features: rewards (1) + v td-pair (2) + pi(a_t) (1), then the
  # action-average (2) and taken-action (2) per-action embeddings.
  assert features.shape == (T, B, 8)
  v = np.asarray(inputs.extra_from_rule["v_scalar"])
  pi_a = np.take_along_axis(probs, actions[..., None], axis=2)[..., 0]
  expected = np.concatenate(
      [
          np.sign(inputs.rewards)[..., None]
          * np.log1p(np.abs(inputs.rewards))[..., None],
          v[:-1, :, None],
          v[1:, :, None],
          pi_a[..., None],
          probs.mean(axis=2, keepdims=True),
          np.full((T, B, 1), 1.0 / A),
          pi_a[..., None],
          np.ones((T, B, 1)),
      ],
      axis=-1,
  )
  np.testing.assert_allclose(features, expected, rtol=1e-5, atol=1e-6)


def test_build_features_without_action_conditional_inputs():
  option = meta_nets.MetaNetInputOption(base=CUSTOM.base[:1])
  features, per_action = meta_nets.build_features(
      _inputs(), option, None, None, None, None
  )
  assert features.shape == (T, B, 1) and per_action is None


def test_build_features_rejects_misaligned_input():
  # A per-state quantity without 'drop_last' has T+1 steps, not T.
  option = meta_nets.MetaNetInputOption(
      base=(meta_nets.InputSpec("agent_out/logits", ("softmax",)),)
  )
  with pytest.raises(ValueError, match="expected leading dims"):
    meta_nets.build_features(_inputs(), option, None, None, None, None)


def test_build_features_missing_source():
  option = meta_nets.MetaNetInputOption(
      base=(meta_nets.InputSpec("extra_from_rule/nope", ()),)
  )
  with pytest.raises(KeyError, match="nope"):
    meta_nets.build_features(_inputs(), option, None, None, None, None)


def test_meta_net_consumes_custom_option():
  """The meta-network's input layer follows the declared input set."""
  config = meta_nets.MetaNetConfig(
      prediction_size=4, hidden_size=8, meta_hidden_size=4, input_option=CUSTOM
  )
  net = meta_nets.make_meta_net(config)
  # Disco103's input set needs y/z/q outputs; this one only logits and v.
  params, state = jax.eval_shape(net.init, jax.random.PRNGKey(0), _inputs())
  out, _ = jax.eval_shape(net.apply, params, state, None, _inputs())
  assert out["pi"].shape == (T, B, A)
  assert out["y"].shape == out["z"].shape == (T, B, 4)
  # Per-trajectory LSTM input: 4 base features + 2 x 2 per-action channels
  # (policy_channels ends with 2), plus the hidden size 8: 4 gates x 8.
  assert params["lstm/lstm/linear"]["w"].shape == (8 + 8, 32)
  smaller = meta_nets.MetaNetConfig(
      prediction_size=4,
      hidden_size=8,
      meta_hidden_size=4,
      input_option=meta_nets.MetaNetInputOption(base=CUSTOM.base[:1]),
  )
  params_small, _ = jax.eval_shape(
      meta_nets.make_meta_net(smaller).init, jax.random.PRNGKey(0), _inputs()
  )
  assert params_small["lstm/lstm/linear"]["w"].shape == (1 + 8, 32)


def test_select_a_gradient_is_the_masked_incoming_gradient():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)
  actions = jnp.asarray(rng.integers(0, 4, (2, 3)), jnp.int32)
  w = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)
  grad = jax.grad(
      lambda x: jnp.sum(TX["select_a"](x, actions, None, None) * w)
  )(x)
  expected = jax.nn.one_hot(actions, 4)[..., None] * w[:, :, None]
  np.testing.assert_array_equal(grad, expected)
