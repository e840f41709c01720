"""Registering a new rule takes a few lines, and the launchers then run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from disco import agent as agent_lib
from disco import evaluation
from disco import types
from disco.launch import evaluate
from disco.update_rules import registry
from disco.update_rules import resolve

import conftest

# A whole rule: REINFORCE on the immediate reward, scaled by a hyper-param.
RULE_SOURCE = """
from disco.networks import agent_nets
from disco.update_rules import base
from disco.update_rules import registry
from disco.value_fns import losses


class ImmediateReward(base.UpdateRule):
  default_hyper_params = dict(scale=1.0)

  def flat_output_spec(self, num_actions):
    return dict(logits=base.logits_spec(num_actions))

  def unroll_meta_net(self, inputs, context):
    return dict(adv=inputs.rewards), context.rule_state

  def agent_loss(self, inputs, meta_out, backprop):
    loss = losses.policy_gradient_loss(
        inputs.agent_out["logits"][:-1], inputs.actions[:-1], meta_out["adv"])
    return self.hyper_params["scale"] * loss, {}


SETTINGS = dict(learning_rate=1e-2, network=agent_nets.network_settings((16,)))
"""


# The test module defines the rule from the same source the command-line test
# writes into a module of its own.
_RULE_MODULE: dict = {}
exec(RULE_SOURCE, _RULE_MODULE)
ImmediateReward = _RULE_MODULE["ImmediateReward"]
_settings = _RULE_MODULE["SETTINGS"]


@pytest.fixture
def registered():
  registry.register_rule(
      "immediate_reward", ImmediateReward, _settings, description="test rule"
  )
  yield "immediate_reward"
  registry.unregister_rule("immediate_reward")


def test_registered_rule_gets_settings_and_an_agent(registered):
  assert registered in registry.rule_names()
  settings = registry.default_settings(registered)
  assert settings.rule == registered and settings.hyper_params["scale"] == 1.0
  agent = agent_lib.make_agent(settings, num_actions=3)
  assert isinstance(agent.rule, ImmediateReward)
  with pytest.raises(ValueError, match="already registered"):
    registry.register_rule(registered, ImmediateReward, _settings)
  with pytest.raises(ValueError, match="Bad rule name"):
    registry.register_rule("has space", ImmediateReward, _settings)
  with pytest.raises(ValueError, match="need learning_rate and network"):
    registry.register_rule("other", ImmediateReward, dict(learning_rate=0.1))
  # Unset settings come from the factory and the rule it builds.
  assert settings.max_abs_update == 1.0
  assert dict(settings.rule_kwargs) == {}
  assert "immediate_reward" in evaluate.listing("rule")


def test_registered_rule_runs_in_disco_eval(registered, tmp_path):
  config = evaluation.default_config()
  config.update(
      dict(
          rule=registered,
          env_settings=dict(rows=5, columns=5),
          total_env_steps=100,
          num_envs=2,
          rollout_len=5,
          batch_size=2,
          replay_capacity=0,
          min_replay_size=0,
          iterations_per_call=10,
          last_episodes=5,
          output_dir=str(tmp_path / "run"),
      )
  )
  summary = evaluation.evaluate(config, log=lambda _: None, progress=False)
  assert summary["rule"] == registered and summary["learner_steps"] == 10
  saved = json.loads((tmp_path / "run" / "config.json").read_text())
  assert saved["rule_settings"]["hyper_params"] == {"scale": 1.0}


def test_registered_rule_learns_from_its_loss(registered):
  """The agent follows the rule's loss: after a step on rollouts where only
  action 0 is rewarded, the policy prefers action 0."""
  agent = agent_lib.make_agent(registry.default_settings(registered), 3)
  obs = np.zeros((4, 8, 2), np.float32)
  state = agent.initial_learner_state(jax.random.PRNGKey(0), obs[0, 0])
  actions = np.tile([0, 1, 2, 0], (8, 1)).T.astype(np.int32)  # [T+1, B]
  rewards = np.zeros((4, 8), np.float32)
  rewards[1:] = actions[:-1] == 0  # reward at t+1 for action 0 at t
  logits = np.zeros((4, 8, 3), np.float32)
  rollout = types.ActorRollout(
      observations=obs,
      actions=actions,
      rewards=rewards,
      **conftest.step_fields(np.ones((4, 8), bool)),
      agent_outs=dict(logits=logits),
      logits=logits,
  )
  new_state, _ = agent.learner_step(jax.random.PRNGKey(1), rollout, state, {})
  probs = jax.nn.softmax(agent.apply(new_state.params, obs[0])["logits"])
  assert np.all(probs[:, 0] > probs[:, 1])


def test_registered_rule_runs_from_the_command_line(tmp_path):
  (tmp_path / "my_rules.py").write_text(RULE_SOURCE + textwrap.dedent("""
      registry.register_rule("immediate_reward", ImmediateReward, SETTINGS)
  """))
  env = dict(
      os.environ,
      PYTHONPATH=os.pathsep.join(
          p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p
      ),
  )
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.imports=my_rules",
          "--config.rule=immediate_reward",
          "--config.env_settings.rows=5",
          "--config.env_settings.columns=5",
          "--config.total_env_steps=50",
          "--config.rollout_len=5",
          "--config.batch_size=2",
          "--config.replay_capacity=0",
          "--config.min_replay_size=0",
          "--config.last_episodes=5",
          f"--config.output_dir={tmp_path / 'run'}",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      env=env,
      timeout=600,
  )
  assert result.returncode == 0, result.stderr
  assert "Final mean return" in result.stdout
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["rule"] == "immediate_reward"
  # Without the import, the name is unknown: one line, status 2.
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.rule=immediate_reward",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      env=env,
      timeout=300,
  )
  assert result.returncode == 2
  assert "Unknown rule 'immediate_reward'" in result.stderr
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.imports=no_such_module",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      env=env,
      timeout=300,
  )
  assert result.returncode == 2
  assert "Cannot import module 'no_such_module'" in result.stderr


def test_resolve_rule_builds_the_rule_once(registered, monkeypatch):
  calls = []
  entry = registry.get_entry(registered)

  class Counting(ImmediateReward):

    def __init__(self, **kwargs):
      calls.append(kwargs)
      super().__init__(**kwargs)

  monkeypatch.setitem(
      registry._REGISTRY,
      registered,
      registry.RuleEntry(
          name=registered,
          make=Counting,
          settings=entry.settings,
      ),
  )
  resolved = resolve.resolve_rule(registered)
  agent_lib.make_agent(resolved.settings, 3, rule=resolved.rule)
  assert len(calls) == 1
