"""The Disco rule: backward per-trajectory LSTM with episode resets,
meta-gradients only when meta-training, target-network averaging, the agent
outputs it declares, and where it reads per-action outputs."""

from __future__ import annotations

import copy

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco import agent as agent_lib
from disco import types
from disco.meta import meta_gradient
from disco.meta import value_function
from disco.networks import meta_nets
from disco.update_rules import disco as disco_rule
from disco.update_rules import registry

import conftest

T, B, A = 3, 2, 4
P, BINS = 600, 601


# ------------------------------------------------- per-trajectory LSTM ----
def _random_meta_params(rule, seed):
  """Random values in the structure of ``rule.init_meta_params`` (cheaper than
  compiling the initialiser, and with non-zero biases)."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))

  def leaf(s):
    scale = 1.0 / np.sqrt(np.prod(s.shape[:-1])) if len(s.shape) > 1 else 0.1
    return jnp.asarray(rng.normal(scale=scale, size=s.shape), s.dtype)

  return jax.tree.map(leaf, shapes)


@pytest.fixture(scope="module")
def meta_net():
  """Random Disco103-shaped meta-parameters, a non-zero meta-RNN state and a
  jitted ``apply(inputs) -> outputs``."""
  params = _random_meta_params(disco_rule.Disco(), seed=0)
  rng = np.random.default_rng(1)
  state = {
      "lstm": {
          "meta_rnn_state": hk.LSTMState(
              hidden=jnp.asarray(rng.normal(scale=0.5, size=128), jnp.float32),
              cell=jnp.asarray(rng.normal(scale=0.5, size=128), jnp.float32),
          )
      }
  }
  apply = jax.jit(meta_nets.make_meta_net(meta_nets.MetaNetConfig()).apply)

  def run(inputs):
    out, _ = apply(params, state, None, inputs)
    return {k: np.asarray(out[k]) for k in ("pi", "y", "z")}

  return run


def _meta_inputs(is_terminal):
  rng = np.random.default_rng(2)

  def normal(*shape):
    return jnp.asarray(rng.normal(size=shape), jnp.float32)

  def agent_out():
    return dict(
        logits=normal(T + 1, B, A),
        y=normal(T + 1, B, P),
        z=normal(T + 1, B, A, P),
        aux_pi=normal(T + 1, B, A, A),
        q=normal(T + 1, B, A, BINS),
    )

  return types.UpdateRuleInputs(
      observations=None,
      actions=jnp.asarray(rng.integers(0, A, (T + 1, B)), jnp.int32),
      rewards=normal(T, B),
      is_terminal=jnp.asarray(is_terminal),
      agent_out=agent_out(),
      behaviour_agent_out=agent_out(),
      extra_from_rule=dict(
          v_scalar=normal(T + 1, B),
          adv=normal(T, B),
          normalized_adv=normal(T, B),
          q=normal(T + 1, B, A),
          qv_adv=normal(T + 1, B, A),
          normalized_qv_adv=normal(T + 1, B, A),
          target_out=agent_out(),
      ),
  )


def _changed_steps(run, inputs, t, b=0, delta=5.0):
  """Timesteps of trajectory ``b`` whose pi/y/z change when the reward of
  transition ``t`` changes (other trajectories must never change)."""
  base = run(inputs)
  new = run(inputs.replace(rewards=inputs.rewards.at[t, b].add(delta)))
  changed = set()
  for key in ("pi", "y", "z"):
    diff = np.abs(new[key] - base[key]).reshape(T, B, -1).max(axis=-1)
    others = np.delete(diff, b, axis=1)
    assert np.all(others <= 1e-6), (key, diff)  # trajectories independent
    for step in range(T):
      if diff[step, b] > 1e-4:
        changed.add(step)
      else:
        assert diff[step, b] <= 1e-6, (key, diff)  # exactly unchanged
  return changed


def test_backward_lstm_without_terminal(meta_net):
  inputs = _meta_inputs(np.zeros((T, B), bool))
  # Information flows backwards in time only: a reward at t affects the
  # targets at t and before.
  assert _changed_steps(meta_net, inputs, t=2) == {0, 1, 2}
  assert _changed_steps(meta_net, inputs, t=1) == {0, 1}
  assert _changed_steps(meta_net, inputs, t=0) == {0}


def test_backward_lstm_resets_at_episode_end(meta_net):
  is_terminal = np.zeros((T, B), bool)
  is_terminal[1, 0] = True  # transition 1 of trajectory 0 ends its episode
  inputs = _meta_inputs(is_terminal)
  # The next episode (t=2) does not leak into the targets of this one.
  assert _changed_steps(meta_net, inputs, t=2) == {2}
  # The terminal transition itself still belongs to its episode.
  assert _changed_steps(meta_net, inputs, t=1) == {0, 1}
  # A terminal in trajectory 0 changes nothing for trajectory 1.
  assert _changed_steps(meta_net, inputs, t=2, b=1) == {0, 1, 2}


# ---------------------------------------------------------- the agent ----
def _tiny_disco_agent():
  settings = registry.default_settings("disco").replace(
      network=dict(
          dense=(8,),
          head_w_init_std=1e-2,
          model_lstm_size=8,
          model_head_hiddens=(8,),
      )
  )
  return agent_lib.make_agent(settings, num_actions=3)


@pytest.fixture(scope="module")
def disco_setup():
  """One learner step of a tiny Disco agent, with the meta-gradient of a
  random projection of its updated parameters, without and with
  meta-training (one jitted program for both)."""
  agent = _tiny_disco_agent()
  rng = np.random.default_rng(3)
  obs = jnp.asarray(rng.random((T + 1, B, 5, 5, 1)) < 0.2, jnp.float32)
  meta_params = _random_meta_params(agent.rule, seed=1)

  def like(tree, scale=1.0):
    return jax.tree.map(
        lambda x: jnp.asarray(rng.normal(scale=scale, size=x.shape), x.dtype),
        tree,
    )

  # Random agent parameters (compiling the initialiser costs seconds).
  shapes = jax.eval_shape(agent.init_params, jax.random.PRNGKey(0), obs[0, 0])
  params = jax.tree.map(
      lambda x: jnp.asarray(
          rng.normal(size=x.shape) / np.sqrt(np.prod(x.shape[:-1])), x.dtype
      ),
      shapes,
  )
  state = types.LearnerState(
      params=params,
      opt_state=agent.optimizer.init(params),
      rule_state=agent.rule.init_rule_state(jax.random.PRNGKey(0), params),
  )
  # Distinct target parameters and a non-zero meta-RNN state.
  state = state.replace(
      rule_state=dict(
          state.rule_state,
          rnn_state=like(state.rule_state["rnn_state"], 0.5),
          target_params=jax.tree.map(
              jnp.add, state.params, like(state.params, 0.1)
          ),
      )
  )
  behaviour_out = like(jax.eval_shape(agent.unroll, state.params, obs))
  discounts = np.ones((T + 1, B), bool)
  discounts[2, 0] = False
  rollout = types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, 3, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      **conftest.step_fields(discounts),
      agent_outs=behaviour_out,
      logits=behaviour_out["logits"],
  )
  proj = like(state.params)  # a fixed random projection

  def objective(meta_params, is_meta_training):
    new_state, _ = agent.learner_step(
        jax.random.PRNGKey(2), rollout, state, meta_params, is_meta_training
    )
    value = sum(
        jnp.sum(p * w)
        for p, w in zip(
            jax.tree.leaves(new_state.params),
            jax.tree.leaves(proj),
            strict=True,
        )
    )
    return value, new_state

  grad_fn = jax.grad(objective, has_aux=True)
  (grads_off, new_state), (grads_on, _) = jax.jit(
      lambda mp: (grad_fn(mp, False), grad_fn(mp, True))
  )(meta_params)
  return dict(
      agent=agent,
      state=state,
      new_state=new_state,
      grads_off=grads_off,
      grads_on=grads_on,
      rollout=rollout,
      meta_params=meta_params,
  )


def _norm(tree):
  return float(
      np.sqrt(
          sum(
              np.sum(np.square(x, dtype=np.float64))
              for x in jax.tree.leaves(tree)
          )
      )
  )


def _sub(a, b):
  return jax.tree.map(lambda x, y: np.asarray(x) - np.asarray(y), a, b)


def test_meta_gradient_only_when_meta_training(disco_setup):
  s = disco_setup
  for leaf in jax.tree.leaves(s["grads_off"]):
    np.testing.assert_array_equal(leaf, np.zeros_like(leaf))
  grads_on = s["grads_on"]
  assert np.isfinite(_norm(grads_on))
  assert _norm(grads_on) > 1e-3
  # The target heads (pi, y, z) all receive meta-gradients.
  nonzero = [
      k
      for k, v in grads_on.items()
      if any(np.abs(x).max() > 0 for x in jax.tree.leaves(v))
  ]
  assert len(nonzero) >= 5, nonzero


def test_target_params_polyak_average(disco_setup):
  s = disco_setup
  new_state = s["new_state"]
  tau = s["agent"].rule.hyper_params["target_update_tau"]
  assert tau == pytest.approx(0.1)  # the published target_params_coeff=0.9
  old = s["state"]

  def average(target, params):
    return jax.tree.map(
        lambda t, p: (1 - tau) * np.asarray(t) + tau * np.asarray(p),
        target,
        params,
    )

  expected = average(old.rule_state["target_params"], old.params)
  jax.tree.map(
      lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7),
      new_state.rule_state["target_params"],
      expected,
  )
  # It averages in the parameters from before the update, not after.
  assert _norm(_sub(new_state.params, old.params)) > 0
  with_new = average(old.rule_state["target_params"], new_state.params)
  assert _norm(_sub(with_new, expected)) > 1e-4


def test_disco_agent_output_shapes():
  agent = _tiny_disco_agent()
  obs = jax.ShapeDtypeStruct((B, 5, 5, 1), jnp.float32)
  params = jax.eval_shape(
      agent.init_params,
      jax.random.PRNGKey(0),
      jax.ShapeDtypeStruct((5, 5, 1), jnp.float32),
  )
  out = jax.eval_shape(agent.apply, params, obs)
  shapes = {k: v.shape for k, v in out.items()}
  assert shapes == dict(
      logits=(B, 3), y=(B, P), z=(B, 3, P), aux_pi=(B, 3, 3), q=(B, 3, BINS)
  )
  assert all(v.dtype == jnp.float32 for v in out.values())
  timestep = types.EnvTimestep(
      observation=obs,
      reward=jax.ShapeDtypeStruct((B,), jnp.float32),
      step_type=jax.ShapeDtypeStruct((B,), jnp.int32),
      discount=jax.ShapeDtypeStruct((B,), jnp.float32),
  )
  step = jax.eval_shape(
      agent.actor_step, params, jax.random.PRNGKey(0), timestep
  )
  assert step.actions.shape == (B,) and step.actions.dtype == jnp.int32
  assert step.logits.shape == (B, 3)
  assert {k: v.shape for k, v in step.agent_outs.items()} == dict(logits=(B, 3))


def test_losses_read_per_action_outputs_only_at_taken_actions(disco_setup):
  """What ``model_losses_read_taken_actions`` promises (the agent then
  backpropagates through the action model for the taken actions alone)."""
  agent, state = disco_setup["agent"], disco_setup["state"]
  rollout = disco_setup["rollout"]
  assert agent.rule.model_losses_read_taken_actions

  @jax.jit
  def output_grads(state, meta_params):
    """Gradients of the loss and of the meta-regulariser (reading the same
    outputs as validation outputs) with respect to the agent outputs."""
    agent_out = agent.unroll(state.params, rollout.observations)
    meta_out, _ = agent.unroll_meta_net(
        meta_params, state, rollout, jax.random.PRNGKey(0), agent_out
    )
    loss_grads = jax.grad(
        lambda o: agent.loss_from_outputs(o, rollout, meta_out, False)[0]
    )(agent_out)
    train_meta_out = jax.tree.map(lambda x: x[None], meta_out)
    reg_grads = jax.grad(
        lambda o: agent.rule.meta_regularizer(
            train_meta_out, o, rollout.actions[:-1]
        )[0]
    )(agent_out)
    return loss_grads, reg_grads

  def per_action(grads, taken):
    """(key, gradient, taken-action mask) of every per-action output."""
    for key in agent.rule.model_output_spec(3):
      g = np.asarray(grads[key])
      yield key, g, taken.reshape(taken.shape + (1,) * (g.ndim - 3))

  loss_grads, reg_grads = output_grads(state, disco_setup["meta_params"])
  taken = np.asarray(jax.nn.one_hot(rollout.actions, 3))
  for key, g, mask in per_action(loss_grads, taken):
    np.testing.assert_array_equal(g * (1 - mask), 0.0, err_msg=key)
    assert np.abs(g * mask).max() > 0, key
  # The meta-regulariser's validation outputs, too (the validation rollout's
  # last step has no transition).
  valid_taken = taken.copy()
  valid_taken[-1] = 0
  for key, g, mask in per_action(reg_grads, valid_taken):
    np.testing.assert_array_equal(g * (1 - mask), 0.0, err_msg=key)


@pytest.mark.slow  # about 30 s; the meta-step itself is checked in CI
def test_validation_backward_at_taken_actions_keeps_the_meta_gradient(
    disco_setup,
):
  """The meta-gradient's validation unroll and the inner learner steps' loss
  backpropagate through the action model's heads at the taken actions only
  (the targets read every action's outputs, with gradients); the
  meta-gradient is unchanged."""
  agent, state = disco_setup["agent"], disco_setup["state"]
  rollout = disco_setup["rollout"]
  value_fn = value_function.ValueFunction(
      value_function.ValueFnConfig(dense=(8, 8))
  )
  value_state = value_fn.initial_state(
      jax.random.PRNGKey(1), rollout.observations[0, 0]
  )
  dense_agent = copy.copy(agent)
  dense_agent.rule = copy.copy(agent.rule)
  dense_agent.rule.model_losses_read_taken_actions = False

  def meta_grads(a):
    return jax.jit(
        lambda mp: meta_gradient.meta_gradient(
            mp,
            a,
            value_fn,
            state,
            value_state,
            # Two inner steps: the second one's outputs depend on the
            # meta-parameters through the first update.
            jax.tree.map(lambda x: jnp.stack([x, x]), rollout),
            rollout,
            jax.random.PRNGKey(2),
        )[0]
    )(disco_setup["meta_params"])

  got, want = meta_grads(agent), meta_grads(dense_agent)
  assert optax.tree.norm(want) > 0
  # Rounding gives about 1e-8 here; targets that read every action's
  # outputs with gradients only at the taken actions give 2e-6.
  assert optax.tree.norm(
      jax.tree.map(jnp.subtract, got, want)
  ) <= 1e-7 * optax.tree.norm(want)


@pytest.mark.slow  # about 30 s; the meta-step itself is checked in CI
def test_looped_and_rematerialised_inner_steps_keep_the_meta_gradient(
    disco_setup,
):
  """Three inner steps as straight-line code, and as a first step and a
  rematerialised ``lax.scan`` loop: the same meta-gradient."""
  agent, state = disco_setup["agent"], disco_setup["state"]
  rollout = disco_setup["rollout"]
  # A used Adam state: from a fresh one, the normalised first step of a
  # near-zero gradient turns rounding into 1e-3 differences here.
  adam = state.opt_state[0]
  adam = adam._replace(
      nu=jax.tree.map(lambda x: jnp.full_like(x, 1e-4), adam.nu),
      count=jnp.asarray(100, adam.count.dtype),
  )
  state = state.replace(opt_state=(adam, *state.opt_state[1:]))
  value_fn = value_function.ValueFunction(
      value_function.ValueFnConfig(dense=(8, 8))
  )
  value_state = value_fn.initial_state(
      jax.random.PRNGKey(1), rollout.observations[0, 0]
  )

  def meta_grads(config):
    return jax.jit(
        lambda mp: meta_gradient.meta_gradient(
            mp,
            agent,
            value_fn,
            state,
            value_state,
            jax.tree.map(lambda x: jnp.stack([x, x, x]), rollout),
            rollout,
            jax.random.PRNGKey(2),
            config,
        )[0]
    )(disco_setup["meta_params"])

  want = meta_grads(meta_gradient.OuterLossConfig(max_unrolled_inner_steps=3))
  got = meta_grads(
      meta_gradient.OuterLossConfig(
          max_unrolled_inner_steps=0, remat_inner_steps=True
      )
  )
  assert optax.tree.norm(want) > 0
  assert optax.tree.norm(
      jax.tree.map(jnp.subtract, got, want)
  ) <= 1e-5 * optax.tree.norm(want)


# ------------------------------------------------------------- lifetime ----


def test_lifetime_inputs_reach_the_disco_meta_net():
  """``net.lifetime_conditioning`` gives the Disco meta-network TA-LPG's
  inputs: the agent's progress n / N and log N, from a rule state that
  counts its updates. Off (Disco103), the rule keeps no lifetime."""
  net = dict(prediction_size=8, hidden_size=8, meta_hidden_size=8)
  settings = registry.default_settings("disco")
  settings = settings.replace(
      network=dict(dense=(8,), model_lstm_size=8, model_head_hiddens=(8,)),
      rule_kwargs=dict(
          settings.rule_kwargs, net=dict(net, lifetime_conditioning=True)
      ),
  )
  agent = agent_lib.make_agent(settings, num_actions=3)
  plain = disco_rule.Disco(net=net)
  assert "lifetime" not in plain.init_rule_state(jax.random.PRNGKey(0), {})
  assert plain.start_lifetime({}, 10) == {}
  # Two more inputs of the backward LSTM (and of the meta-LSTM's embedding).
  widths = [
      {
          k: v["w"].shape[0]
          for k, v in jax.eval_shape(
              rule.init_meta_params, jax.random.PRNGKey(0)
          ).items()
          if k
          in ("lstm/lstm/linear", "lstm/~/meta_lstm/~unroll/mlp_2/~/linear_0")
      }
      for rule in (plain, agent.rule)
  ]
  assert set(widths[0]) == set(widths[1]) and len(widths[0]) == 2
  assert all(widths[1][k] == widths[0][k] + 2 for k in widths[0])

  rng = np.random.default_rng(4)
  obs = jnp.asarray(rng.random((T + 1, B, 5, 5, 1)) < 0.2, jnp.float32)
  params = agent.init_params(jax.random.PRNGKey(0), obs[0, 0])
  meta_params = _random_meta_params(agent.rule, seed=2)
  rule_state = agent.rule.init_rule_state(jax.random.PRNGKey(0), params)
  assert float(rule_state["lifetime"]) == 250
  rollout = types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, 3, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      **conftest.step_fields(np.ones((T + 1, B), bool)),
      agent_outs=agent.unroll(params, obs),
      logits=agent.unroll(params, obs)["logits"],
  )

  @jax.jit
  def step(rule_state):
    state = types.LearnerState(
        params=params,
        opt_state=agent.optimizer.init(params),
        rule_state=rule_state,
    )
    new_state, _ = agent.learner_step(
        jax.random.PRNGKey(1), rollout, state, meta_params, False
    )
    return new_state

  young = agent.rule.start_lifetime(rule_state, 100)
  after = step(young)
  assert int(after.rule_state["num_updates"]) == 1
  np.testing.assert_allclose(
      agent.rule.lifetime_inputs(after.rule_state),
      [0.01, np.log(100.0)],
      rtol=1e-6,
  )
  for other in (
      dict(young, num_updates=jnp.array(90, jnp.int32)),
      agent.rule.start_lifetime(rule_state, 10),
  ):
    changed = jax.tree.map(
        lambda a, b: not np.allclose(a, b), step(other).params, after.params
    )
    assert any(jax.tree.leaves(changed))


# ------------------------------------------------------------ flat agent ----


def _flat_agent():
  settings = registry.default_settings("disco").replace(
      network=dict(dense=(8,), head_w_init_std=1e-2),
      rule_kwargs=dict(
          action_model=False,
          net=dict(input_option="flat", hidden_size=8, meta_hidden_size=0),
      ),
  )
  return agent_lib.make_agent(settings, num_actions=3)


def test_flat_agent_has_no_action_model_and_learns_every_head():
  """``action_model=False``: logits, y and per-action values q from linear
  heads, no action-conditional model (no z, no aux_pi), no z target; one
  learner step moves the policy, y and q heads and carries a
  meta-gradient."""
  agent = _flat_agent()
  rule = agent.rule
  assert rule.target_heads == ("pi", "y")
  rng = np.random.default_rng(5)
  obs = jnp.asarray(rng.random((T + 1, B, 5, 5, 1)) < 0.2, jnp.float32)
  params = agent.init_params(jax.random.PRNGKey(0), obs[0, 0])
  out = agent.unroll(params, obs)
  assert {k: v.shape for k, v in out.items()} == dict(
      logits=(T + 1, B, 3), y=(T + 1, B, P), q=(T + 1, B, 3, BINS)
  )
  meta_params = _random_meta_params(rule, seed=3)
  # The meta-network has no z head: one output of prediction size (y).
  heads = [
      k
      for k, v in meta_params.items()
      if "w" in v and v["w"].shape[-1] == P and v["w"].ndim == 2
  ]
  assert len(heads) == 1, heads
  rollout = types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, 3, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      **conftest.step_fields(np.ones((T + 1, B), bool)),
      agent_outs=dict(logits=out["logits"]),
      logits=out["logits"],
  )
  state = types.LearnerState(
      params=params,
      opt_state=agent.optimizer.init(params),
      rule_state=rule.init_rule_state(jax.random.PRNGKey(0), params),
  )

  def objective(meta_params):
    new_state, logs = agent.learner_step(
        jax.random.PRNGKey(1), rollout, state, meta_params, True
    )
    return sum(jnp.sum(x) for x in jax.tree.leaves(new_state.params)), (
        new_state,
        logs,
    )

  grads, (new_state, logs) = jax.jit(jax.grad(objective, has_aux=True))(
      meta_params
  )
  moved = {
      k for k, v in new_state.params.items() if _norm(_sub(v, params[k])) > 0
  }
  assert len(moved) == len(params), set(params) - moved
  new_out = agent.unroll(new_state.params, obs)
  for key in ("logits", "y", "q"):
    assert np.abs(np.asarray(new_out[key] - out[key])).max() > 0, key
  assert "q_loss" in logs and "z_entropy" not in logs, sorted(logs)
  assert _norm(grads) > 1e-6


def test_flat_agent_refuses_per_action_inputs():
  with pytest.raises(ValueError, match="only the action-conditional model"):
    disco_rule.Disco(action_model=False)
  with pytest.raises(ValueError, match="input_option='flatt' is not one of"):
    meta_nets.MetaNetConfig(input_option="flatt")
