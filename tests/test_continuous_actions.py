"""Continuous actions end to end: the rules' Gaussian losses by hand, a
learning check, and the one-line refusal of rules that cannot act on them."""

from __future__ import annotations

import math

import continuous_toy
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import comparison
from disco import errors
from disco import evaluation
from disco import policies
from disco import types
from disco.environments import registry as env_registry
from disco.meta import validation as val
from disco.meta import validation_settings
from disco.update_rules import actor_critic
from disco.update_rules import policy_gradient
from disco.update_rules import ppo
from disco.update_rules import registry

# One transition, one stream, one action dimension. The trained policy is
# N(0.5, 0.5^2), the behaviour policy N(0, 1), the action 1.0:
#   log pi = -0.5 ((1 - 0.5) / 0.5)^2 - log 0.5 - 0.5 log(2 pi)
#   log mu = -0.5 - 0.5 log(2 pi)
#   ratio  = exp(log pi - log mu) = 2
#   H(pi)  = 0.5 log(2 pi e 0.25)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
LOG_PI = -0.5 - math.log(0.5) - HALF_LOG_2PI
ENTROPY = 0.5 * math.log(2 * math.pi * math.e * 0.25)
POLICY = policies.Gaussian(1, (-math.inf,), (math.inf,))


def _inputs(value_size: int = 1) -> types.UpdateRuleInputs:
  def states(x):
    return jnp.asarray(x, jnp.float32).reshape(2, 1, -1)

  return types.UpdateRuleInputs(
      observations=jnp.zeros([2, 1, 1]),
      actions=states([1.0, 0.0]),
      rewards=jnp.zeros([1, 1]),
      is_terminal=jnp.zeros([1, 1], bool),
      agent_out=dict(
          logits=states([0.5, math.log(0.5), 0.0, 0.0]),
          v=jnp.zeros([2, 1, value_size]),
      ),
      behaviour_agent_out=dict(
          logits=states([0.0, 0.0, 0.0, 0.0]), v=jnp.zeros([2, 1, 1])
      ),
      policy=POLICY,
  )


@pytest.fixture(autouse=True, scope="module")
def _toy_env_registered_here_only():
  """The toy environment leaves the registry with this module (other files
  read the registry's families)."""
  yield
  env_registry.unregister_env(continuous_toy.NAME)


def test_log_prob_and_entropy_constants():
  params = jnp.array([0.5, math.log(0.5)])
  np.testing.assert_allclose(
      POLICY.log_prob(params, jnp.array([1.0])), LOG_PI, rtol=1e-6
  )
  np.testing.assert_allclose(POLICY.entropy(params), ENTROPY, rtol=1e-6)


@pytest.mark.parametrize(
    "adv, objective",
    [(1.0, 1.2), (-1.0, -2.0)],  # min(2 A, clip(2, 0.8, 1.2) A)
)
def test_ppo_gaussian_loss_by_hand(adv, objective):
  rule = ppo.PPO()
  meta_out = dict(pg_advs=jnp.full([1, 1], adv), raw_advs=jnp.zeros([1, 1]))
  loss, logs = rule.agent_loss(_inputs(), meta_out, backprop=False)
  np.testing.assert_allclose(loss, [[-objective - 0.01 * ENTROPY]], rtol=1e-5)
  np.testing.assert_allclose(logs["ratio"], 2.0, rtol=1e-5)


def test_policy_gradient_gaussian_loss_by_hand():
  rule = policy_gradient.PolicyGradient()
  meta_out = dict(
      pi=jnp.full([1, 1], 2.0),
      raw_advs=jnp.zeros([1, 1]),
      tds=jnp.zeros([1, 1]),
  )
  loss, _ = rule.agent_loss(_inputs(), meta_out, backprop=False)
  np.testing.assert_allclose(
      loss, [[-2.0 * LOG_PI - 0.01 * ENTROPY]], rtol=1e-5
  )


def test_actor_critic_gaussian_loss_by_hand():
  rule = actor_critic.ActorCritic(hyper_params=dict(value_cost=0.0))
  meta_out = dict(
      advs=jnp.full([1, 1], -3.0),
      tds=jnp.zeros([1, 1]),
      raw_advs=jnp.zeros([1, 1]),
      values=jnp.zeros([2, 1]),
  )
  loss, _ = rule.agent_loss(_inputs(value_size=601), meta_out, backprop=False)
  np.testing.assert_allclose(loss, [[3.0 * LOG_PI - 0.2 * ENTROPY]], rtol=1e-5)


CONTINUOUS_SPEC = specs.BoundedArray(
    (2,), np.float32, -np.ones(2, np.float32), np.ones(2, np.float32)
)


@pytest.mark.parametrize(
    "rule", ["disco103", "disco", "lpg", "ta_lpg", "mpo", "spo"]
)
def test_rules_without_continuous_actions_refuse_them(rule):
  if registry.get_entry(rule).make.supports_continuous_actions:
    pytest.skip(f"{rule} supports continuous actions")
  with pytest.raises(ValueError, match="continuous action space") as info:
    agent_lib.make_agent(
        registry.default_settings(rule), action_spec=CONTINUOUS_SPEC
    )
  message = str(info.value)
  assert "\n" not in message and f"Rule {rule} " in message
  assert "ppo" in message and "actor_critic" in message


def test_supported_rules_are_listed():
  names = registry.continuous_rule_names()
  assert {"actor_critic", "policy_gradient", "ppo", "dpo", "lpo"} <= set(names)
  assert "disco103" not in names and "lpg" not in names


def _config(tmp_path, **overrides):
  config = evaluation.default_config()
  config.update(
      dict(
          env=continuous_toy.register(),
          rule="ppo",
          total_env_steps=16 * 8 * 250,
          num_envs=8,
          rollout_len=16,
          batch_size=8,
          last_episodes=8 * 15 * 20,
          iterations_per_call=50,
          output_dir=str(tmp_path / "run"),
      )
  )
  config.env_settings = dict(size=2)
  config.update(overrides)
  return config


def test_disco_on_a_continuous_env_is_one_usage_line(tmp_path):
  with pytest.raises(errors.UsageError, match="continuous action") as info:
    evaluation.build(_config(tmp_path, rule="disco103"))
  assert "\n" not in str(info.value)
  assert not (tmp_path / "run").exists()


def test_ppo_learns_to_reach_the_target(tmp_path):
  """disco-eval's library call: PPO's Gaussian policy learns the one-step
  task (the initial policy earns about -2.7, the target 0)."""
  summary = evaluation.evaluate(
      _config(tmp_path), log=lambda _: None, progress=False
  )
  assert summary["final_return_mean"] > -1.0, summary


def test_policy_settings_reach_the_agent(tmp_path):
  config = _config(tmp_path)
  config.policy.squash = True
  config.policy.log_std = "state_dependent"
  plan = evaluation.build(config)
  assert plan.agent.policy == policies.Gaussian(
      2, (-2.0, -2.0), (2.0, 2.0), squash=True, log_std="state_dependent"
  )


@pytest.mark.parametrize(
    "env, policy, match",
    [
        (None, dict(log_std="fixed"), "config.policy.log_std must be one of"),
        ("catch", dict(squash=True), "are for continuous actions"),
    ],
)
def test_bad_policy_settings_are_one_line(tmp_path, env, policy, match):
  config = _config(tmp_path)
  if env:
    config.env, config.env_settings = env, dict(rows=5, columns=5)
  config.policy.update(policy)
  with pytest.raises(errors.UsageError, match=match) as info:
    evaluation.build(config)
  assert "\n" not in str(info.value)


def test_compare_gives_policy_settings_to_continuous_envs_only(tmp_path):
  config = comparison.default_config()
  config.rules = ("ppo",)
  config.envs = ("catch:rows=5,columns=5", f"{continuous_toy.register()}")
  config.policy.squash = True
  config.imports = "continuous_toy"
  config.references = (
      f"{continuous_toy.NAME}:random=-2.7,reference=0,source=the optimum",
  )
  config.output_dir = str(tmp_path)
  plan = comparison.build(config)
  squash = {
      c.env: c.eval_config(plan.settings).policy.squash for c in plan.cells
  }
  assert squash == {"catch": None, continuous_toy.NAME: True}


def _validator(tmp_path, rule: str):
  settings = validation_settings.parse_settings(
      dict(
          validation_settings.default_config(),
          envs=({"env": continuous_toy.register(), "env_settings": {}},),
          references=(
              f"{continuous_toy.NAME}:random=-2.7,reference=0,source=x",
          ),
          num_seeds=2,
          total_env_steps=8 * 16 * 4,
          last_episodes=8,
          num_envs=8,
          rollout_len=16,
          batch_size=8,
          replay_capacity=0,
          iterations_per_call=4,
      )
  )
  rule_settings = registry.default_settings(rule).replace(
      anneal_learning_rate=False
  )
  made = registry.make_rule(rule_settings)
  return val.Validator(settings, rule_settings, made, tmp_path), made


def test_meta_validation_on_a_continuous_env(tmp_path):
  """LPO's held-out agents train on continuous actions; Disco's are refused
  when the validation is set up."""
  validator, lpo = _validator(tmp_path, "lpo")
  result = validator.validate(lpo.init_meta_params(jax.random.PRNGKey(0)), 0)
  assert np.all(np.isfinite(result.returns[continuous_toy.NAME]))
  with pytest.raises(errors.UsageError, match="continuous action") as info:
    _validator(tmp_path, "disco")
  assert "\n" not in str(info.value)


def test_spo_on_a_state_without_streams_is_one_usage_line(tmp_path):
  """ReachTarget keeps one key for all streams, which SPO cannot copy per
  stream: said when the plan is built, before anything compiles."""
  with pytest.raises(
      errors.UsageError, match="lead with the 8 streams"
  ) as info:
    evaluation.build(_config(tmp_path, rule="spo"))
  assert "\n" not in str(info.value)


# PPO on Pendulum-v1 (random: -1232, reference_scores): the loop of Stable
# Baselines' zoo setting for Pendulum (gamma 0.9, Adam 1e-3, 10 epochs, no
# entropy bonus) on 16 environments x 256 steps, rewards scaled by 0.01
# instead of its normalisation.
PENDULUM_PPO = dict(
    env="gymnax/Pendulum-v1",
    learning_rate=1e-3,
    num_envs=16,
    batch_size=16,
    rollout_len=256,
    update_epochs=10,
    num_minibatches=4,
    iterations_per_call=25,
)
PENDULUM_HYPER_PARAMS = dict(
    discount_factor=0.9, entropy_cost=0.0, reward_scale=0.01
)


def _pendulum(tmp_path, total_env_steps, num_seeds, last_episodes):
  config = _config(
      tmp_path,
      total_env_steps=total_env_steps,
      num_seeds=num_seeds,
      last_episodes=last_episodes,
      **PENDULUM_PPO,
  )
  config.env_settings = {}
  config.hyper_params = PENDULUM_HYPER_PARAMS
  return evaluation.evaluate(config, log=lambda _: None, progress=False)


@pytest.mark.slow
def test_ppo_improves_on_pendulum_short(tmp_path):
  """100k steps take a random -1232 to about -600. (CI's check that PPO's
  Gaussian policy learns is test_ppo_learns_to_reach_the_target.)"""
  summary = _pendulum(tmp_path, 100_000, 2, 20)
  assert summary["final_return_mean"] > -900.0, summary


@pytest.mark.slow
def test_ppo_learns_pendulum(tmp_path):
  summary = _pendulum(tmp_path, 500_000, 3, 40)
  assert summary["final_return_mean"] > -300.0, summary
