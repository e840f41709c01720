"""Our implementation on the inputs of the single-step fixtures (the
published code's meta-network, learner steps and meta-gradient), with the
fixtures' trees turned into ours.

A runner takes the fixture's arrays and the Disco103 meta-parameters and
returns our outputs (flat, keys start with ``::``) and, for each group of
updated parameters, the most its updates can move a weight apart
(``comparisons.max_distance``). ``KINDS`` maps each fixture kind to its runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import agent as agent_lib
from disco import types
from disco.meta import meta_gradient
from disco.meta import value_function
from disco.networks import meta_nets
from disco.parity import comparisons
from disco.parity import fixtures
from disco.update_rules import registry

unflatten, flatten = fixtures.unflatten, fixtures.flatten


def lstm_state(tree: dict[str, np.ndarray]) -> hk.LSTMState:
  """A fixture's LSTM state (``hidden``, ``cell``)."""
  return hk.LSTMState(
      hidden=jnp.asarray(tree["hidden"]), cell=jnp.asarray(tree["cell"])
  )


def ema_state(tree: dict[str, np.ndarray]) -> types.EmaState:
  """A fixture's moving-average state."""
  return types.EmaState(**{k: jnp.asarray(v) for k, v in tree.items()})


RunnerOutput = tuple[dict[str, np.ndarray], dict[str, float]]


def _run_meta_net(fx: dict[str, np.ndarray], meta_params) -> RunnerOutput:
  inputs_tree = unflatten(fx, "inputs")
  inputs = types.UpdateRuleInputs(
      observations=None,
      actions=inputs_tree["actions"],
      rewards=inputs_tree["rewards"],
      is_terminal=inputs_tree["is_terminal"],
      agent_out=inputs_tree["agent_out"],
      behaviour_agent_out=inputs_tree["behaviour_agent_out"],
      extra_from_rule=inputs_tree["extra_from_rule"],
  )
  net = meta_nets.make_meta_net(meta_nets.MetaNetConfig())
  state = {
      "lstm": {"meta_rnn_state": lstm_state(inputs_tree["meta_rnn_state"])}
  }
  out, new_state = jax.jit(net.apply)(meta_params, state, None, inputs)
  ours = {k: out[k] for k in ("pi", "y", "z", "meta_input_emb")}
  ours["meta_rnn_state"] = new_state["lstm"]["meta_rnn_state"]
  return flatten(ours, ""), {}


def _rollout_from(
    tree: dict[str, Any], agent_outs: str = "agent_outs", logits: str = "logits"
) -> types.ActorRollout:
  return types.ActorRollout(
      observations=jnp.asarray(tree["observations"]),
      actions=jnp.asarray(tree["actions"]),
      rewards=jnp.asarray(tree["rewards"]),
      # The published rollouts mark LAST steps with discount False; every
      # episode end in the fixtures is a termination.
      step_types=jnp.where(tree["discounts"], types.MID, types.LAST),
      discounts=jnp.asarray(tree["discounts"], jnp.float32),
      agent_outs=jax.tree.map(jnp.asarray, tree[agent_outs]),
      logits=jnp.asarray(tree[logits]),
  )


def _params_with_adam(
    optimizer: optax.GradientTransformation,
    name: str,
    inputs: dict[str, Any],
    fx: dict[str, np.ndarray],
) -> dict[str, Any]:
  """``params`` (the fixture's ``{name}_params``) and ``opt_state``:
  ``optimizer``'s state with Adam's moments from the fixture."""
  params = jax.tree.map(jnp.asarray, inputs[f"{name}_params"])
  prefix = f"{name}_opt_state"
  adam = optax.ScaleByAdamState(
      count=jnp.asarray(fx[f"inputs{fixtures.SEP}{prefix}_count"]),
      mu=jax.tree.map(jnp.asarray, inputs[f"{prefix}_mu"]),
      nu=jax.tree.map(jnp.asarray, inputs[f"{prefix}_nu"]),
  )
  state = optimizer.init(params)
  return dict(params=params, opt_state=(adam,) + tuple(state[1:]))


def rule_state_from(tree: dict[str, Any]) -> dict[str, Any]:
  """A fixture's rule state (``meta_state``) in our structure."""
  state = {}
  for key, value in tree.items():
    if key.endswith("ema_state"):
      state[key] = ema_state(value)
    elif key == "rnn_state":
      state[key] = {
          m: {"meta_rnn_state": lstm_state(v["meta_rnn_state"])}
          for m, v in value.items()
      }
    else:
      state[key] = jax.tree.map(jnp.asarray, value)
  return state


def _run_learner_step(
    fx: dict[str, np.ndarray], meta_params, rule: str
) -> RunnerOutput:
  settings = registry.default_settings(rule).replace(
      learning_rate=float(fx["learning_rate"]), loss_mask="published"
  )
  inputs = unflatten(fx, "inputs")
  rollout = _rollout_from(inputs, "behaviour_agent_outs", "behaviour_logits")
  agent = agent_lib.make_agent(settings, num_actions=rollout.logits.shape[-1])
  params = jax.tree.map(jnp.asarray, inputs["params"])
  state = types.LearnerState(
      params=params,
      opt_state=agent.optimizer.init(params),
      rule_state=rule_state_from(inputs["meta_state"]),
  )

  @jax.jit
  def step(rng, rollout, state, meta_params):
    update = agent.learner_update(rng, rollout, state, meta_params)
    return update.learner_state, update.logs, update.grads

  new_state, logs, grads = step(
      jax.random.PRNGKey(0),
      rollout,
      state,
      meta_params if rule == "disco" else {},
  )
  # The fixtures name the rule state ``meta_state``, as the published code.
  ours = dict(
      params=new_state.params,
      meta_state=new_state.rule_state,
      logs=logs,
      grads=grads,
  )
  max_step = comparisons.max_distance(
      1, settings.learning_rate, settings.max_abs_update
  )
  return flatten(ours, ""), dict(params=max_step)


def _run_meta_gradient(
    fx: dict[str, np.ndarray],
    meta_params,
    config: meta_gradient.OuterLossConfig = meta_gradient.OuterLossConfig(),
) -> RunnerOutput:
  del meta_params  # The fixture carries its own.
  inputs = unflatten(fx, "inputs")
  defaults = registry.default_settings("disco")
  settings = defaults.replace(
      loss_mask="published",
      learning_rate=5e-4,
      network=dict(
          defaults.network, model_lstm_size=256, model_head_hiddens=(256,)
      ),
  )
  train = _rollout_from(inputs["train_rollouts"])
  valid = _rollout_from(inputs["valid_rollout"])
  agent = agent_lib.make_agent(settings, num_actions=train.logits.shape[-1])
  value_fn = value_function.ValueFunction(value_function.ValueFnConfig())
  learner = types.LearnerState(
      **_params_with_adam(agent.optimizer, "learner", inputs, fx),
      rule_state=rule_state_from(inputs["meta_state"]),
  )
  value_state = value_function.ValueState(
      **_params_with_adam(value_fn._optimizer, "value", inputs, fx),
      adv_ema_state=ema_state(inputs["value_adv_ema_state"]),
      td_ema_state=ema_state(inputs["value_td_ema_state"]),
  )
  fn = jax.jit(
      lambda mp, lr, v, tr, va: meta_gradient.meta_gradient(
          mp, agent, value_fn, lr, v, tr, va, jax.random.PRNGKey(0), config
      )
  )
  grads, (new_learner, new_value, _, meta_logs) = fn(
      jax.tree.map(jnp.asarray, inputs["meta_params"]),
      learner,
      value_state,
      train,
      valid,
  )
  ours = dict(
      meta_grads=grads,
      meta_log=meta_logs,
      learner_params=new_learner.params,
      value_params=new_value.params,
  )
  num_steps = train.actions.shape[0]
  value_config = value_fn.config
  max_steps = dict(
      learner_params=comparisons.max_distance(
          num_steps, settings.learning_rate, settings.max_abs_update
      ),
      value_params=comparisons.max_distance(
          num_steps, value_config.learning_rate, value_config.max_abs_update
      ),
  )
  return flatten(ours, ""), max_steps


KINDS: dict[str, Callable[..., RunnerOutput]] = {
    "disco_meta_net": _run_meta_net,
    "disco_learner_step": lambda fx, mp: _run_learner_step(fx, mp, "disco"),
    "actor_critic_learner_step": (
        lambda fx, mp: _run_learner_step(fx, mp, "actor_critic")
    ),
    "disco_meta_gradient": _run_meta_gradient,
}
