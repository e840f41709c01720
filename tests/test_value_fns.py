"""Tests for disco.value_fns (EMA, 2-hot values, V-trace/Retrace, losses)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from disco.value_fns import categorical
from disco.value_fns import ema
from disco.value_fns import losses
from disco.value_fns import returns

T, B, A = 7, 3, 4
ATOL = 1e-5


def _random_rollout(seed, t=T, b=B, a=A):
  """Random per-transition inputs with some episode ends."""
  rng = np.random.default_rng(seed)
  return dict(
      rewards=rng.normal(size=(t, b)).astype(np.float32),
      env_discounts=(rng.random((t, b)) > 0.25).astype(np.float32),
      rho=np.exp(rng.normal(scale=0.7, size=(t, b))).astype(np.float32),
      values=rng.normal(size=(t + 1, b)).astype(np.float32),
      target_values=rng.normal(size=(t + 1, b)).astype(np.float32),
      q_values=rng.normal(size=(t + 1, b, a)).astype(np.float32),
      target_q_values=rng.normal(size=(t + 1, b, a)).astype(np.float32),
      actions=rng.integers(0, a, size=(t, b)).astype(np.int32),
  )


def _np_vtrace(r, g, rho, v, lam):
  """Straightforward V-trace: returns (targets, pg advantages)."""
  t_len = r.shape[0]
  c = lam * np.minimum(1.0, rho)
  crho = np.minimum(1.0, rho)
  err = np.zeros_like(r, dtype=np.float64)
  acc = np.zeros(r.shape[1])
  for t in reversed(range(t_len)):
    delta = crho[t] * (r[t] + g[t] * v[t + 1] - v[t])
    acc = delta + g[t] * c[t] * acc
    err[t] = acc
  vs = v[:-1] + err
  boot = np.concatenate([lam * vs[1:] + (1 - lam) * v[1:-1], v[-1:]], axis=0)
  q_est = r + g * boot
  adv = crho * (q_est - v[:-1])
  return vs, adv


def _np_retrace(r, g, c, v, q_a):
  """Straightforward Retrace targets for Q(s_t, a_t), t < T."""
  t_len = r.shape[0]
  out = np.zeros_like(r, dtype=np.float64)
  out[-1] = r[-1] + g[-1] * v[-1]
  for t in reversed(range(t_len - 1)):
    out[t] = r[t] + g[t] * (
        v[t + 1] - c[t + 1] * q_a[t + 1] + c[t + 1] * out[t + 1]
    )
  return out


def _take(q, a):
  return np.take_along_axis(q, a[..., None], axis=-1)[..., 0]


# ----------------------------------------------------------------------------
# EMA.


def test_ema_init_structure():
  state = ema.ema_init()
  assert state.moment1.shape == () and state.moment1.dtype == jnp.float32
  assert float(state.decay_product) == 1.0
  tree_state = ema.ema_init({"a": jnp.ones((3, 2)), "b": jnp.ones(5)})
  assert set(tree_state.moment2) == {"a", "b"}
  assert all(x.shape == () for x in jax.tree.leaves(tree_state.moment1))


@pytest.mark.parametrize("c", [3.5, -2.0, 0.25, 1e3])
def test_ema_single_update_is_debiased(c):
  x = jnp.full((4, 5), c)
  # Power-of-two decay: every operation is exact in float32.
  state = ema.ema_update(ema.ema_init(), x, decay=0.5)
  mean, var = ema.ema_moments(state)
  assert float(mean) == c
  assert float(var) == 0.0
  np.testing.assert_array_equal(ema.ema_normalize(x, state), 0.0)
  np.testing.assert_array_equal(
      ema.ema_normalize(x, state, subtract_mean=False), c / 2e-6
  )
  # A typical decay: exact up to float32 rounding of the debiasing factor.
  state = ema.ema_update(ema.ema_init(), x, decay=0.99)
  mean, var = ema.ema_moments(state)
  np.testing.assert_allclose(mean, c, rtol=1e-5)
  np.testing.assert_allclose(var, 0.0, atol=1e-5 * c * c)


@pytest.mark.parametrize("seed", [0, 1])
def test_ema_converges_to_distribution_moments(seed):
  mu, sigma, decay = 1.5, 2.0, 0.99
  xs = jax.random.normal(jax.random.PRNGKey(seed), (2000, 64)) * sigma + mu

  def step(state, x):
    return ema.ema_update(state, x, decay=decay), None

  state, _ = jax.lax.scan(step, ema.ema_init(), xs)
  mean, var = ema.ema_moments(state)
  np.testing.assert_allclose(mean, mu, atol=0.15)
  np.testing.assert_allclose(var, sigma**2, rtol=0.1)
  z = ema.ema_normalize(xs[-1], state)
  np.testing.assert_allclose(jnp.mean(z), 0.0, atol=0.3)
  np.testing.assert_allclose(jnp.std(z), 1.0, atol=0.2)


def test_ema_formulas_match_reference():
  rng = np.random.default_rng(0)
  decay, eps, root_eps = 0.9, 1e-6, 1e-12
  state = ema.ema_init()
  m1 = m2 = 0.0
  prod = 1.0
  for _ in range(5):
    x = rng.normal(size=(6, 2)).astype(np.float32)
    state = ema.ema_update(state, x, decay=decay)
    m1 = decay * m1 + (1 - decay) * x.mean()
    m2 = decay * m2 + (1 - decay) * (x**2).mean()
    prod *= decay
  mean = m1 / (1 - prod)
  var = max(0.0, m2 / (1 - prod) - mean**2)
  np.testing.assert_allclose(state.decay_product, prod, rtol=1e-6)
  got_mean, got_var = ema.ema_moments(state)
  np.testing.assert_allclose(got_mean, mean, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(got_var, var, rtol=1e-4)
  np.testing.assert_allclose(
      ema.ema_normalize(x, state, eps=eps, root_eps=root_eps),
      (x - mean) / (np.sqrt(var + root_eps) + eps),
      rtol=1e-4,
      atol=1e-5,
  )
  np.testing.assert_allclose(
      ema.ema_normalize(x, state, subtract_mean=False),
      x / (np.sqrt(var + root_eps) + eps),
      rtol=1e-4,
      atol=1e-5,
  )


def test_ema_tree():
  tree = {"a": jnp.full((2, 2), 2.0), "b": jnp.full((3,), -1.0)}
  state = ema.ema_update(ema.ema_init(tree), tree, decay=0.5)
  mean, _ = ema.ema_moments(state)
  assert float(mean["a"]) == 2.0 and float(mean["b"]) == -1.0
  out = ema.ema_normalize(tree, state)
  assert jax.tree.structure(out) == jax.tree.structure(tree)


def test_ema_axis_name_averages_across_mapped_axis():
  xs = jnp.arange(8.0).reshape(4, 2)  # shard means: 0.5, 2.5, 4.5, 6.5

  def update(x):
    return ema.ema_update(ema.ema_init(), x, decay=0.5, axis_name="i")

  states = jax.vmap(update, axis_name="i")(xs)
  mean, var = ema.ema_moments(states)
  np.testing.assert_allclose(mean, jnp.full((4,), 3.5))
  np.testing.assert_allclose(var, jnp.full((4,), np.var(np.arange(8.0))))
  # Without the axis name every shard keeps its own statistics.
  local = jax.vmap(lambda x: ema.ema_update(ema.ema_init(), x, decay=0.5))(xs)
  np.testing.assert_allclose(ema.ema_moments(local)[0], [0.5, 2.5, 4.5, 6.5])


def test_ema_jit_and_eager_agree():
  x = jax.random.normal(jax.random.PRNGKey(3), (5, 5))
  eager = ema.ema_update(ema.ema_init(), x, decay=0.99)
  jitted = jax.jit(lambda s, x: ema.ema_update(s, x, decay=0.99))(
      ema.ema_init(), x
  )
  # XLA may fuse square+mean differently under jit: equal up to an ulp.
  np.testing.assert_allclose(eager.moment1, jitted.moment1, rtol=1e-6)
  np.testing.assert_allclose(eager.moment2, jitted.moment2, rtol=1e-6)


# ----------------------------------------------------------------------------
# Categorical values and transforms.


@pytest.mark.parametrize("max_abs", [5.0, 10.0])
def test_two_hot_round_trip(max_abs):
  num_bins = int(2 * max_abs + 1)
  values = jnp.linspace(-max_abs, max_abs, 101)
  probs = categorical.scalar_to_probs(values, num_bins, max_abs)
  assert probs.shape == (101, num_bins)
  np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
  assert float(probs.min()) >= 0.0
  assert int(jnp.max(jnp.sum(probs > 0, axis=-1))) <= 2
  back = rlax.transform_from_2hot(probs, -max_abs, max_abs, num_bins)
  np.testing.assert_allclose(back, values, atol=1e-4)
  # logits_to_scalar decodes via softmax: use log-probs as logits.
  decoded = categorical.logits_to_scalar(jnp.log(probs + 1e-30), max_abs)
  np.testing.assert_allclose(decoded, values, atol=1e-4)


def test_two_hot_integer_values_are_one_hot():
  probs = categorical.scalar_to_probs(jnp.array([-3.0, 0.0, 2.0]), 11, 5.0)
  np.testing.assert_allclose(probs, jax.nn.one_hot(jnp.array([2, 5, 7]), 11))


def test_two_hot_clips_at_edges():
  probs = categorical.scalar_to_probs(jnp.array([-100.0, 100.0]), 7, 3.0)
  np.testing.assert_allclose(probs[0], jax.nn.one_hot(0, 7))
  np.testing.assert_allclose(probs[1], jax.nn.one_hot(6, 7))
  logits = jnp.log(probs + 1e-30)
  np.testing.assert_allclose(
      categorical.logits_to_scalar(logits, 3.0), [-3.0, 3.0], atol=1e-5
  )


def test_uniform_logits_decode_to_zero():
  np.testing.assert_allclose(
      categorical.logits_to_scalar(jnp.zeros((2, 3, 21)), 10.0), 0.0, atol=1e-5
  )


def test_signed_hyperbolic_round_trip():
  x = jnp.concatenate([jnp.linspace(-300.0, 300.0, 1001), jnp.zeros(1)])
  fwd, inv = rlax.SIGNED_HYPERBOLIC_PAIR
  np.testing.assert_allclose(inv(fwd(x)), x, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(fwd(inv(x / 30.0)), x / 30.0, rtol=1e-4, atol=1e-4)


def test_value_head_decoding():
  rng = np.random.default_rng(0)
  scalar_out = rng.normal(size=(T, B, 1)).astype(np.float32)
  np.testing.assert_array_equal(
      categorical.ValueHead().decode(scalar_out), scalar_out[..., 0]
  )
  np.testing.assert_allclose(
      categorical.ValueHead(nonlinear_transform=True).decode(scalar_out),
      rlax.signed_parabolic(scalar_out[..., 0]),
      rtol=1e-6,
  )
  logits = rng.normal(size=(T, B, 11)).astype(np.float32)
  expected = (jax.nn.softmax(logits) * np.linspace(-5, 5, 11)).sum(-1)
  head = categorical.ValueHead(categorical=True, max_abs_value=5.0)
  np.testing.assert_allclose(head.decode(logits), expected, atol=1e-5)
  got = categorical.ValueHead(
      categorical=True, max_abs_value=5.0, nonlinear_transform=True
  ).decode(logits)
  np.testing.assert_allclose(
      got, rlax.signed_parabolic(expected), rtol=1e-5, atol=1e-5
  )


def test_value_head_decodes_actions_one_by_one():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(T, B, A, 11)).astype(np.float32)
  head = categorical.ValueHead(
      categorical=True, max_abs_value=5.0, nonlinear_transform=True
  )
  got = head.decode_actions(logits)
  assert got.shape == (T, B, A)
  for a in range(A):
    np.testing.assert_allclose(
        got[:, :, a], head.decode(logits[:, :, a]), rtol=1e-6, atol=1e-6
    )
  scalar = rng.normal(size=(T, B, A, 1)).astype(np.float32)
  np.testing.assert_array_equal(
      categorical.ValueHead().decode_actions(scalar), scalar[..., 0]
  )


def test_categorical_argument_errors():
  with pytest.raises(ValueError, match="max_abs_value"):
    categorical.logits_to_scalar(jnp.zeros((2, 5)), 0.0)
  with pytest.raises(ValueError, match="max_abs_value"):
    categorical.scalar_to_probs(jnp.zeros(2), 5, -1.0)
  with pytest.raises(ValueError, match="max_abs_value"):
    categorical.ValueHead(categorical=True)
  with pytest.raises(ValueError, match="shape"):
    categorical.ValueHead().decode(jnp.zeros((2, 2)))
  with pytest.raises(ValueError, match="shape"):
    categorical.ValueHead().decode_actions(jnp.zeros((2, 2, 3)))


# ----------------------------------------------------------------------------
# Importance weights, V-trace, Retrace.


def test_importance_weights():
  rng = np.random.default_rng(0)
  pi = rng.normal(size=(T, B, A)).astype(np.float32)
  mu = rng.normal(size=(T, B, A)).astype(np.float32)
  a = rng.integers(0, A, size=(T, B))
  np.testing.assert_allclose(returns.importance_weights(pi, pi, a), 1.0)
  p = jax.nn.softmax(pi)
  m = jax.nn.softmax(mu)
  np.testing.assert_allclose(
      returns.importance_weights(pi, mu, a),
      _take(p, a) / _take(m, a),
      rtol=1e-5,
  )
  grad = jax.grad(lambda x: returns.importance_weights(x, mu, a).sum())(pi)
  np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.95, 1.0, 0.0])
def test_vtrace_matches_numpy(seed, lam):
  d = _random_rollout(seed)
  discount = 0.9
  out = returns.vtrace(
      rewards=d["rewards"],
      env_discounts=d["env_discounts"],
      rho=d["rho"],
      values=d["values"],
      target_values=d["target_values"],
      discount=discount,
      lambda_=lam,
  )
  g = d["env_discounts"].astype(np.float64) * discount
  vs, adv = _np_vtrace(d["rewards"], g, d["rho"], d["target_values"], lam)
  np.testing.assert_allclose(out.value_target, vs, atol=ATOL)
  np.testing.assert_allclose(out.adv, adv, atol=ATOL)
  np.testing.assert_allclose(out.td, vs - d["values"][:-1], atol=ATOL)
  np.testing.assert_array_equal(out.value, d["values"])
  np.testing.assert_array_equal(out.target_value, d["target_values"])
  np.testing.assert_array_equal(out.rho, d["rho"])
  for field in ("q_value", "target_q_value", "qv_adv", "q_target", "q_td"):
    np.testing.assert_array_equal(getattr(out, field), np.zeros((T, B)))


@pytest.mark.xla_optimized  # two programs compared bit for bit
def test_vtrace_matches_direct_rlax_per_sequence():
  d = _random_rollout(5)
  out = returns.vtrace(
      d["rewards"],
      d["env_discounts"],
      d["rho"],
      d["values"],
      discount=0.97,
      lambda_=0.8,
  )
  v = d["values"]
  for b in range(B):
    ref = rlax.vtrace_td_error_and_advantage(
        v[:-1, b],
        v[1:, b],
        d["rewards"][:, b],
        d["env_discounts"][:, b] * 0.97,
        d["rho"][:, b],
        lambda_=0.8,
    )
    np.testing.assert_array_equal(out.adv[:, b], ref.pg_advantage)
    np.testing.assert_array_equal(
        out.value_target[:, b], ref.errors + v[:-1, b]
    )


def test_vtrace_on_policy_no_discount_is_monte_carlo():
  # rho=1, lambda=1, discount=1 and a terminal at the end: targets are the
  # undiscounted returns to go.
  rng = np.random.default_rng(0)
  r = rng.normal(size=(5, 2)).astype(np.float32)
  g = np.ones((5, 2), np.float32)
  g[-1] = 0.0
  v = rng.normal(size=(6, 2)).astype(np.float32)
  out = returns.vtrace(
      r, g, np.ones((5, 2), np.float32), v, discount=1.0, lambda_=1.0
  )
  mc = np.cumsum(r[::-1], axis=0)[::-1]
  np.testing.assert_allclose(out.value_target, mc, atol=1e-5)
  np.testing.assert_allclose(out.adv, mc - v[:-1], atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.95, 1.0, 0.0])
def test_retrace_matches_numpy(seed, lam):
  d = _random_rollout(seed)
  discount = 0.9
  out = returns.retrace(
      rewards=d["rewards"],
      env_discounts=d["env_discounts"],
      actions=d["actions"],
      rho=d["rho"],
      values=d["values"],
      q_values=d["q_values"],
      target_values=d["target_values"],
      target_q_values=d["target_q_values"],
      discount=discount,
      lambda_=lam,
  )
  g = d["env_discounts"].astype(np.float64) * discount
  c = lam * np.minimum(1.0, d["rho"])
  tv, tq = d["target_values"], d["target_q_values"]
  q_target = _np_retrace(d["rewards"], g, c, tv, _take(tq[:-1], d["actions"]))
  crho = np.minimum(1.0, d["rho"])
  v_target = tv[:-1] + crho * (q_target - tv[:-1])
  np.testing.assert_allclose(out.q_target, q_target, atol=ATOL)
  np.testing.assert_allclose(out.adv, q_target - tv[:-1], atol=ATOL)
  np.testing.assert_allclose(out.value_target, v_target, atol=ATOL)
  np.testing.assert_allclose(out.td, v_target - d["values"][:-1], atol=ATOL)
  np.testing.assert_allclose(
      out.q_td, q_target - _take(d["q_values"][:-1], d["actions"]), atol=ATOL
  )
  np.testing.assert_allclose(out.qv_adv, tq - tv[..., None], atol=ATOL)
  np.testing.assert_array_equal(out.q_value, d["q_values"])
  np.testing.assert_array_equal(out.target_q_value, tq)


def test_retrace_with_zero_lambda_is_one_step_expected_sarsa():
  d = _random_rollout(3)
  out = returns.retrace(
      d["rewards"],
      d["env_discounts"],
      d["actions"],
      d["rho"],
      d["values"],
      d["q_values"],
      discount=0.8,
      lambda_=0.0,
  )
  expected = d["rewards"] + 0.8 * d["env_discounts"] * d["values"][1:]
  np.testing.assert_allclose(out.q_target, expected, atol=ATOL)


def test_retrace_targets_have_no_gradient():
  d = _random_rollout(4)

  def loss(tq):
    out = returns.retrace(
        d["rewards"],
        d["env_discounts"],
        d["actions"],
        d["rho"],
        d["values"],
        d["q_values"],
        target_values=d["target_values"],
        target_q_values=tq,
    )
    return out.q_target.sum()

  np.testing.assert_array_equal(jax.grad(loss)(d["target_q_values"]), 0.0)


# ----------------------------------------------------------------------------
# decode_values, estimate and normalize.


def _estimate_inputs(seed):
  rng = np.random.default_rng(seed)
  return dict(
      rewards=rng.normal(size=(T, B)).astype(np.float32),
      env_discounts=(rng.random((T, B)) > 0.25).astype(np.float32),
      actions=rng.integers(0, A, size=(T + 1, B)).astype(np.int32),
      pi_logits=rng.normal(size=(T + 1, B, A)).astype(np.float32),
      mu_logits=rng.normal(size=(T + 1, B, A)).astype(np.float32),
  )


def _rho(inputs):
  return returns.importance_weights(
      inputs["pi_logits"][:-1], inputs["mu_logits"][:-1], inputs["actions"][:-1]
  )


def test_estimate_without_action_values_is_vtrace_and_normalize():
  inputs = _estimate_inputs(0)
  rng = np.random.default_rng(10)
  v_out = rng.normal(size=(T + 1, B, 1)).astype(np.float32)
  head = categorical.ValueHead(nonlinear_transform=True)
  values, q_values = returns.decode_values(
      head, inputs["pi_logits"], value_net_out=v_out
  )
  assert q_values is None
  np.testing.assert_array_equal(values, rlax.signed_parabolic(v_out[..., 0]))
  outs = returns.estimate(values=values, discount=0.9, lambda_=0.9, **inputs)
  ref = returns.vtrace(
      inputs["rewards"],
      inputs["env_discounts"],
      _rho(inputs),
      values,
      discount=0.9,
      lambda_=0.9,
  )
  for field in ("value", "rho", "adv", "value_target", "td"):
    np.testing.assert_array_equal(getattr(outs, field), getattr(ref, field))
  assert outs.adv.shape == (T, B)

  outs, adv_state, td_state = returns.normalize(
      outs, ema.ema_init(), ema.ema_init(), ema_decay=0.99
  )
  ref_adv_state = ema.ema_update(ema.ema_init(), ref.adv, 0.99)
  ref_td_state = ema.ema_update(ema.ema_init(), ref.td, 0.99)
  assert_equal = np.testing.assert_array_equal
  assert_equal(adv_state.moment1, ref_adv_state.moment1)
  assert_equal(td_state.moment2, ref_td_state.moment2)
  assert_equal(outs.normalized_adv, ema.ema_normalize(ref.adv, ref_adv_state))
  assert_equal(
      outs.normalized_td,
      ema.ema_normalize(ref.td, ref_td_state, subtract_mean=False),
  )
  assert_equal(outs.normalized_q_td, np.zeros((T, B)))


def test_normalize_without_ema_states_gives_zeros():
  inputs = _estimate_inputs(1)
  values = np.random.default_rng(2).normal(size=(T + 1, B)).astype(np.float32)
  outs = returns.estimate(values=values, **inputs)
  outs, adv_state, td_state = returns.normalize(outs)
  assert adv_state is None and td_state is None
  for field in (
      "normalized_adv",
      "normalized_td",
      "normalized_q_td",
      "normalized_qv_adv",
  ):
    np.testing.assert_array_equal(getattr(outs, field), 0.0)
  assert outs.normalized_adv.shape == (T, B)
  assert outs.normalized_qv_adv.shape == outs.qv_adv.shape


def test_estimate_with_action_values_is_retrace_with_target_network():
  inputs = _estimate_inputs(2)
  rng = np.random.default_rng(3)
  num_bins, max_abs = 11, 5.0
  q_out = rng.normal(size=(T + 1, B, A, num_bins)).astype(np.float32)
  tq_out = rng.normal(size=(T + 1, B, A, num_bins)).astype(np.float32)
  head = categorical.ValueHead(categorical=True, max_abs_value=max_abs)
  values, q = returns.decode_values(head, inputs["pi_logits"], q_net_out=q_out)
  target_values, tq = returns.decode_values(
      head, inputs["pi_logits"], q_net_out=tq_out
  )
  pi = jax.nn.softmax(inputs["pi_logits"])
  np.testing.assert_allclose(values, jnp.sum(pi * q, axis=2), atol=1e-6)
  np.testing.assert_allclose(target_values, jnp.sum(pi * tq, axis=2), atol=1e-6)
  outs = returns.estimate(
      values=values,
      q_values=q,
      target_values=target_values,
      target_q_values=tq,
      discount=0.95,
      **inputs,
  )
  ref = returns.retrace(
      inputs["rewards"],
      inputs["env_discounts"],
      inputs["actions"][:-1],
      _rho(inputs),
      values,
      q,
      target_values,
      tq,
      discount=0.95,
  )
  for field in (
      "value",
      "target_value",
      "adv",
      "value_target",
      "td",
      "q_target",
      "q_td",
      "qv_adv",
      "q_value",
      "target_q_value",
  ):
    np.testing.assert_allclose(
        getattr(outs, field), getattr(ref, field), atol=1e-6, err_msg=field
    )
  outs, adv_state, td_state = returns.normalize(
      outs, ema.ema_init(), ema.ema_init(), normalize_q_td=True
  )
  ref_adv_state = ema.ema_update(ema.ema_init(), ref.adv, 0.99)
  ref_td_state = ema.ema_update(ema.ema_init(), ref.q_td, 0.99)
  np.testing.assert_allclose(
      adv_state.moment1, ref_adv_state.moment1, rtol=1e-5
  )
  np.testing.assert_allclose(td_state.moment1, ref_td_state.moment1, rtol=1e-5)
  np.testing.assert_allclose(
      outs.normalized_qv_adv,
      ema.ema_normalize(ref.qv_adv, ref_adv_state),
      rtol=1e-4,
      atol=1e-5,
  )
  np.testing.assert_allclose(
      outs.normalized_q_td,
      ema.ema_normalize(ref.q_td, ref_td_state, subtract_mean=False),
      rtol=1e-4,
      atol=1e-5,
  )
  np.testing.assert_array_equal(outs.normalized_td, 0.0)
  assert outs.qv_adv.shape == (T + 1, B, A)


def test_decode_values_prefers_the_value_head():
  pi_logits = _estimate_inputs(4)["pi_logits"]
  rng = np.random.default_rng(5)
  v_out = rng.normal(size=(T + 1, B, 1)).astype(np.float32)
  q_out = rng.normal(size=(T + 1, B, A, 1)).astype(np.float32)
  values, q_values = returns.decode_values(
      categorical.ValueHead(), pi_logits, value_net_out=v_out, q_net_out=q_out
  )
  np.testing.assert_array_equal(values, v_out[..., 0])
  np.testing.assert_array_equal(q_values, q_out[..., 0])


def test_normalize_averages_statistics_over_a_named_axis():
  inputs = _estimate_inputs(6)
  rng = np.random.default_rng(7)
  values = rng.normal(size=(2, T + 1, B)).astype(np.float32)

  def fn(inputs, values, axis_name):
    outs = returns.estimate(values=values, **inputs)
    return returns.normalize(
        outs, ema.ema_init(), ema.ema_init(), axis_name=axis_name
    )

  stacked = jax.tree.map(lambda x: np.stack([x, x]), inputs)
  outs, adv_state, _ = jax.jit(
      jax.vmap(lambda i, v: fn(i, v, "dev"), axis_name="dev")
  )(stacked, values)
  # Each shard is normalised with the statistics of both shards.
  both = returns.estimate(
      values=np.concatenate([values[0], values[1]], axis=1),
      **jax.tree.map(lambda x: np.concatenate([x, x], axis=1), inputs),
  )
  _, joint_adv_state, _ = returns.normalize(
      both, ema.ema_init(), ema.ema_init()
  )
  np.testing.assert_allclose(
      adv_state.moment1[0], joint_adv_state.moment1, rtol=1e-5
  )
  np.testing.assert_allclose(
      adv_state.moment2[1], joint_adv_state.moment2, rtol=1e-5
  )
  single = returns.estimate(values=values[0], **inputs)
  _, single_adv_state, _ = returns.normalize(
      single, ema.ema_init(), ema.ema_init()
  )
  assert (
      abs(float(single_adv_state.moment1) - float(joint_adv_state.moment1))
      > 1e-4
  )


def test_estimate_and_decode_argument_errors():
  inputs = _estimate_inputs(0)
  with pytest.raises(ValueError, match="at least one"):
    returns.decode_values(categorical.ValueHead(), inputs["pi_logits"])
  with pytest.raises(AssertionError):
    returns.estimate(values=np.zeros((T, B), np.float32), **inputs)


# ----------------------------------------------------------------------------
# Losses.


def test_policy_gradient_loss_values_and_gradients():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(T, B, A)).astype(np.float32)
  actions = rng.integers(0, A, size=(T, B)).astype(np.int32)
  adv = rng.normal(size=(T, B)).astype(np.float32)
  loss = losses.policy_gradient_loss(logits, actions, adv, backprop=False)
  np.testing.assert_allclose(
      loss, -_take(jax.nn.log_softmax(logits), actions) * adv, rtol=1e-6
  )

  def total(adv, backprop):
    return losses.policy_gradient_loss(logits, actions, adv, backprop).sum()

  np.testing.assert_array_equal(jax.grad(total)(adv, False), 0.0)
  grad_true = jax.grad(total)(adv, True)
  np.testing.assert_allclose(
      grad_true, -_take(jax.nn.log_softmax(logits), actions), rtol=1e-6
  )
  assert np.all(np.abs(grad_true) > 0)
  # Positive advantage increases the probability of the action.
  g_logits = jax.grad(
      lambda x: losses.policy_gradient_loss(x, actions, jnp.ones((T, B))).sum()
  )(logits)
  assert np.all(_take(np.asarray(g_logits), actions) < 0)


def test_value_loss_from_target_scalar():
  v = np.array([[[1.0], [2.0]]], np.float32)
  target = np.array([[0.0, 4.0]], np.float32)
  np.testing.assert_allclose(
      losses.value_loss_from_target(v, target), [[0.5, 2.0]]
  )
  loss_nl = losses.value_loss_from_target(
      v, target, categorical.ValueHead(nonlinear_transform=True)
  )
  np.testing.assert_allclose(
      loss_nl,
      0.5 * (v[..., 0] - rlax.signed_hyperbolic(target)) ** 2,
      rtol=1e-6,
  )


def test_value_loss_from_target_categorical_is_cross_entropy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(T, B, 11)).astype(np.float32)
  target = rng.uniform(-6, 6, size=(T, B)).astype(np.float32)
  head = categorical.ValueHead(categorical=True, max_abs_value=5.0)
  loss = losses.value_loss_from_target(logits, target, head)
  probs = categorical.scalar_to_probs(target, 11, 5.0)
  np.testing.assert_allclose(
      loss, -(probs * jax.nn.log_softmax(logits)).sum(-1), rtol=1e-5
  )
  # Minimised (among logits) by the 2-hot distribution itself.
  best = losses.value_loss_from_target(jnp.log(probs + 1e-30), target, head)
  assert np.all(best <= loss + 1e-6)


@pytest.mark.parametrize("nonlinear", [False, True])
def test_value_loss_from_td_moves_scalar_value_towards_target(nonlinear):
  rng = np.random.default_rng(0)
  net_out = rng.normal(size=(T, B, 1)).astype(np.float32)
  td = rng.choice([-1.0, 1.0], size=(T, B)).astype(np.float32) * 0.5
  head = categorical.ValueHead(nonlinear_transform=nonlinear)

  def loss_fn(x):
    return losses.value_loss_from_td(x, td, head).sum()

  grads = jax.grad(loss_fn)(net_out)
  before = head.decode(net_out)
  after = head.decode(net_out - 1e-2 * grads)
  np.testing.assert_array_equal(np.sign(after - before), np.sign(td))
  # The TD itself is never differentiated.
  g_td = jax.grad(lambda d: losses.value_loss_from_td(net_out, d, head).sum())(
      td
  )
  np.testing.assert_array_equal(g_td, 0.0)


@pytest.mark.parametrize("nonlinear", [False, True])
def test_value_loss_from_td_categorical(nonlinear):
  head = categorical.ValueHead(
      categorical=True, max_abs_value=5.0, nonlinear_transform=nonlinear
  )
  rng = np.random.default_rng(1)
  net_out = rng.normal(size=(T, B, 11)).astype(np.float32)
  td = rng.choice([-1.0, 1.0], size=(T, B)).astype(np.float32) * 0.5
  target = head.decode(net_out) + td
  # Same as regressing onto the (constant) target value + td.
  np.testing.assert_allclose(
      losses.value_loss_from_td(net_out, td, head),
      losses.value_loss_from_target(net_out, target, head),
      rtol=1e-6,
  )
  g_td = jax.grad(lambda d: losses.value_loss_from_td(net_out, d, head).sum())(
      td
  )
  np.testing.assert_array_equal(g_td, 0.0)
  # Gradient descent on that loss drives the decoded value to the target.
  grad_fn = jax.jit(
      jax.grad(lambda x: losses.value_loss_from_target(x, target, head).sum())
  )
  x = net_out
  for _ in range(300):
    x = x - 1.0 * grad_fn(x)
  # Compare in the space the head predicts in (squashed when nonlinear).
  after = categorical.ValueHead(categorical=True, max_abs_value=5.0).decode(x)
  squash = rlax.SIGNED_HYPERBOLIC_PAIR[0] if nonlinear else (lambda v: v)
  np.testing.assert_allclose(after, squash(target), atol=0.05)


def test_value_loss_from_td_scalar_equals_half_td_squared():
  rng = np.random.default_rng(1)
  net_out = rng.normal(size=(T, B, 1)).astype(np.float32)
  td = rng.normal(size=(T, B)).astype(np.float32)
  np.testing.assert_allclose(
      losses.value_loss_from_td(net_out, td), 0.5 * td**2, rtol=1e-4, atol=1e-6
  )
  np.testing.assert_allclose(
      jax.grad(lambda x: losses.value_loss_from_td(x, td).sum())(net_out),
      -td[..., None],
      rtol=1e-4,
      atol=1e-6,
  )
