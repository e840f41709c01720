"""Episode boundaries in the losses: the first move of an episode, the loss
mask options, truncation vs termination, and one state set per rule."""

from __future__ import annotations

import chex
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import types
from disco.environments import base as env_base
from disco.training import loop as loop_lib
from disco.update_rules import registry
from disco.value_fns import returns

import conftest

T, B, A, N = 3, 2, 3, 4
OBS = (5,)
RULES = ("actor_critic", "policy_gradient", "ppo", "mpo", "spo", "disco")


def _agent(rule: str, loss_mask: str) -> agent_lib.Agent:
  settings = registry.default_settings(rule).replace(
      network=dict(
          dense=(8,),
          head_w_init_std=1e-2,
          model_lstm_size=8,
          model_head_hiddens=(8,),
      ),
      loss_mask=loss_mask,
  )
  return agent_lib.make_agent(settings, num_actions=A, num_updates=1)


def _rollout(agent, params, not_last, truncated=None, seed=0):
  """A ``[T+1, B]`` rollout with random behaviour outputs (and SPO search
  statistics)."""
  rng = np.random.default_rng(seed)
  obs = jnp.asarray(rng.normal(size=(T + 1, B) + OBS), jnp.float32)
  out = jax.tree.map(
      lambda s: jnp.asarray(rng.normal(size=s.shape), s.dtype),
      jax.eval_shape(agent.unroll, params, obs),
  )
  weights = rng.random((T + 1, B, N))
  extras = dict(
      search_actions=jnp.asarray(rng.integers(0, A, (T + 1, B, N)), jnp.int32),
      search_weights=jnp.asarray(
          weights / weights.sum(-1, keepdims=True), jnp.float32
      ),
      search_advantages=jnp.asarray(
          rng.normal(size=(T + 1, B, N)), jnp.float32
      ),
  )
  return types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, A, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      agent_outs={k: out[k] for k in agent.rule.behaviour_outputs},
      logits=out["logits"],
      extras=extras,
      **conftest.step_fields(not_last, truncated),
  )


@pytest.fixture(scope="module")
def output_grads():
  """``(rule, loss_mask, not_last, truncated) -> d loss / d logits
  [T+1, B, A]`` of a learner step's loss with respect to the agent's
  outputs (random meta-parameters for Disco)."""
  cache = {}

  def grads(rule, loss_mask, not_last, truncated=None):
    agent = _agent(rule, loss_mask)
    state = agent.initial_learner_state(
        jax.random.PRNGKey(0), np.zeros(OBS, np.float32)
    )
    meta_params = agent.rule.init_meta_params(jax.random.PRNGKey(1))
    rollout = _rollout(agent, state.params, not_last, truncated)
    key = (rule, loss_mask)
    if key not in cache:

      @jax.jit
      def fn(state, rollout):
        agent_out = agent.unroll(state.params, rollout.observations)
        meta_out, _ = agent.unroll_meta_net(
            meta_params, state, rollout, jax.random.PRNGKey(2), agent_out
        )
        return jax.grad(
            lambda o: agent.loss_from_outputs(o, rollout, meta_out, False)[0]
        )(agent_out)["logits"]

      cache[key] = fn
    return np.asarray(cache[key](state, rollout))

  return grads


@pytest.mark.parametrize("rule", RULES)
def test_first_move_counts_only_under_the_valid_mask(rule, output_grads):
  # Stream 0's episode ends (terminates) on arriving at state 1, which is
  # already the next episode's first state: transition 1 is that episode's
  # first move.
  not_last = np.ones((T + 1, B), bool)
  not_last[1, 0] = False
  valid = output_grads(rule, "valid", not_last)
  published = output_grads(rule, "published", not_last)
  assert np.abs(valid[1, 0]).max() > 1e-6, rule
  np.testing.assert_array_equal(published[1, 0], 0.0)
  # Every other transition counts under both.
  for t, b in ((0, 0), (1, 1), (2, 0)):
    assert np.abs(published[t, b]).max() > 1e-6, (rule, t, b)


@pytest.mark.parametrize("rule", RULES)
def test_truncated_transition_counts_under_neither_mask(rule, output_grads):
  # Stream 1 is cut by a time limit on arriving at state 2: transition 1 has
  # no valid target (state 2 is the next episode's).
  not_last = np.ones((T + 1, B), bool)
  not_last[2, 1] = False
  truncated = ~not_last
  for loss_mask in ("valid", "published"):
    g = output_grads(rule, loss_mask, not_last, truncated)
    np.testing.assert_array_equal(g[1, 1], 0.0)
    assert np.abs(g[0, 1]).max() > 1e-6
    # The next episode's first move: as above.
    first_move = np.abs(g[2, 1]).max()
    assert first_move > 1e-6 if loss_mask == "valid" else first_move == 0


def test_bad_loss_mask():
  with pytest.raises(
      ValueError, match="loss_mask='all' must be one of valid, published"
  ):
    _agent("actor_critic", "all")


# ------------------------------------------------------------ targets ----
def _inputs(truncated):
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(T + 1, 1, A)), jnp.float32)
  return types.UpdateRuleInputs(
      observations=jnp.zeros((T + 1, 1)),
      actions=jnp.asarray(rng.integers(0, A, (T + 1, 1)), jnp.int32),
      rewards=jnp.asarray([[1.0], [2.0], [4.0]]),
      is_terminal=jnp.zeros((T, 1), bool),
      agent_out=dict(logits=logits),
      behaviour_agent_out=dict(logits=logits),
      is_truncated=jnp.asarray(truncated).reshape(T, 1),
  )


def test_no_return_crosses_a_truncation():
  """V-trace and Retrace: the transition before a truncated one bootstraps
  from the last state of its episode."""
  values = jnp.asarray([[1.0], [10.0], [100.0], [1000.0]])
  q_values = jnp.broadcast_to(values[..., None], (T + 1, 1, A))
  gamma = 0.5
  for q in (None, q_values):
    inputs = _inputs([False, True, False])
    outs = returns.estimate(
        rewards=inputs.rewards,
        env_discounts=jnp.ones((T, 1)),
        actions=inputs.actions,
        pi_logits=inputs.agent_out["logits"],
        mu_logits=inputs.agent_out["logits"],
        values=values,
        q_values=q,
        discount=gamma,
        lambda_=1.0,
        truncated=inputs.truncated,
    )
    target = outs.q_target if q is not None else outs.value_target
    # Transition 0: r_0 + gamma V(s_1), not the return through transition 1.
    np.testing.assert_allclose(target[0, 0], 1.0 + gamma * 10.0)
    # Transition 2 (after the truncation) bootstraps as usual.
    np.testing.assert_allclose(target[2, 0], 4.0 + gamma * 1000.0)
    if q is None:
      np.testing.assert_allclose(outs.adv[1, 0], 0.0)  # no policy gradient
  # Without the truncation, transition 0's return runs on (lambda = 1).
  inputs = _inputs([False, False, False])
  outs = returns.estimate(
      rewards=inputs.rewards,
      env_discounts=jnp.ones((T, 1)),
      actions=inputs.actions,
      pi_logits=inputs.agent_out["logits"],
      mu_logits=inputs.agent_out["logits"],
      values=values,
      discount=gamma,
      lambda_=1.0,
  )
  np.testing.assert_allclose(
      outs.value_target[0, 0], 1.0 + gamma * (2.0 + gamma * (4 + gamma * 1000))
  )


# ------------------------------------------------ an environment with a time limit
@chex.dataclass(frozen=True)
class _TimeState:
  t: jax.Array  # [B] steps into the episode


class _ConstantReward(env_base.Environment):
  """Reward 1 every step from one observation; episodes end after
  ``limit`` steps, by truncation (a time limit) or by termination."""

  is_jittable = True

  def __init__(self, batch_size: int, limit: int, truncate: bool):
    self.batch_size, self.limit, self.truncate = batch_size, limit, truncate

  def _timestep(self, reward, step_type, discount):
    ones = jnp.ones([self.batch_size])
    return types.EnvTimestep(
        observation=jnp.ones([self.batch_size, 1]),
        reward=reward * ones,
        step_type=step_type.astype(jnp.int32),
        discount=discount * ones,
    )

  def reset(self, rng):
    del rng
    zeros = jnp.zeros([self.batch_size], jnp.int32)
    return _TimeState(t=zeros), self._timestep(0.0, zeros + types.FIRST, 1.0)

  def step(self, state, actions):
    del actions
    t = state.t + 1
    done = t >= self.limit
    step_type = jnp.where(done, types.LAST, types.MID)
    discount = jnp.where(done & (not self.truncate), 0.0, 1.0)
    return _TimeState(t=jnp.where(done, 0, t)), self._timestep(
        1.0, step_type, discount
    )

  def observation_spec(self):
    return specs.Array((1,), np.float32)

  def action_spec(self):
    return specs.BoundedArray((), np.int32, 0, 1)


@pytest.mark.parametrize("rule", ["actor_critic", "policy_gradient", "mpo"])
def test_truncation_is_not_termination_in_the_learned_values(rule):
  """With reward 1 forever and gamma 0.9 the value is 10 when the time limit
  truncates (the agent bootstraps past it), and at most about 4 when it
  terminates (episodes of 4 steps)."""
  learned = {}
  for truncate in (True, False):
    env = _ConstantReward(8, limit=4, truncate=truncate)
    settings = registry.default_settings(rule)
    hyper_params = dict(settings.hyper_params, discount_factor=0.9)
    if rule == "mpo":
      hyper_params["target_update_tau"] = 0.05
    settings = settings.replace(
        network=dict(
            dense=(16,),
            head_w_init_std=1e-2,
            model_lstm_size=8,
            model_head_hiddens=(8,),
        ),
        learning_rate=1e-2,
        hyper_params=hyper_params,
    )
    agent = agent_lib.make_agent(settings, env.num_actions)
    cfg = loop_lib.LoopConfig(
        num_envs=8, rollout_len=9, batch_size=8, replay_capacity=0
    )
    eval_loop = loop_lib.EvalLoop(agent, env, cfg)
    meta_params = agent.rule.init_meta_params(jax.random.PRNGKey(0))
    states, _ = eval_loop.run(eval_loop.init_seeds([0]), meta_params, 400)
    params = jax.tree.map(lambda x: x[0], states.learner.params)
    out = agent.apply(params, jnp.ones([1, 1]))
    learned[truncate] = float(_state_value(rule, agent, out))
  assert learned[True] > 8.0 and learned[False] < 5.0, learned


def _state_value(rule, agent, out):
  if rule == "actor_critic":
    return agent.rule._head.decode(out["v"][None])[0, 0]
  if rule == "policy_gradient":
    return out["v"][0, 0]
  return jnp.mean(out["q"])


def test_disco_q_targets_at_a_truncation():
  """Disco's Retrace targets: the transition before a truncated one
  bootstraps from the target network's value of the last state of its
  episode (the online policy's average of the target network's Q)."""
  agent = _agent("disco", "valid")
  state = agent.initial_learner_state(
      jax.random.PRNGKey(0), np.zeros(OBS, np.float32)
  )
  not_last = np.ones((T + 1, B), bool)
  not_last[2, 0] = False
  rollout = _rollout(agent, state.params, not_last, truncated=~not_last)
  meta_params = agent.rule.init_meta_params(jax.random.PRNGKey(1))
  agent_out = agent.unroll(state.params, rollout.observations)
  meta_out, _ = agent.unroll_meta_net(
      meta_params, state, rollout, jax.random.PRNGKey(2), agent_out
  )
  target_q = agent.rule._q_head.decode_actions(meta_out["target_out"]["q"])
  v = jnp.sum(jax.nn.softmax(agent_out["logits"]) * target_q, -1)
  gamma = agent.rule.hyper_params["discount_factor"]
  np.testing.assert_allclose(
      meta_out["q_target"][0, 0],
      rollout.rewards[1, 0] + gamma * v[1, 0],
      rtol=1e-5,
  )
  # The same transition without the truncation looks further ahead.
  rollout = _rollout(agent, state.params, np.ones((T + 1, B), bool))
  meta_out, _ = agent.unroll_meta_net(
      meta_params, state, rollout, jax.random.PRNGKey(2), agent_out
  )
  assert (
      abs(
          float(meta_out["q_target"][0, 0])
          - float(rollout.rewards[1, 0] + gamma * v[1, 0])
      )
      > 1e-3
  )
