"""A generic agent: network, optimiser, and pure acting and learning steps,
never branching on its update rule (``disco.update_rules.base``). Every method
may be jitted, vmapped and differentiated: meta-gradients flow through
``learner_step`` into ``meta_params`` when ``is_meta_training=True``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dm_env import specs
import haiku as hk
import jax
import jax.numpy as jnp
import optax

from disco import optimizers
from disco import policies
from disco import self_tuning_step
from disco import types
from disco.networks import agent_nets
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import base
from disco.update_rules import registry


class Agent:
  """An agent trained by an update rule.

  Args:
    rule: the update rule.
    num_actions: discrete actions ``A`` (a categorical policy); None with
      ``policy``.
    net_config: agent network settings.
    learning_rate: Adam learning rate.
    max_abs_update: elementwise clip of Adam's update (None: none).
    loss_mask: transitions the losses average over: ``"valid"``, all but those
      cut by a time limit (the move out of an episode's last state included), or
      ``"published"`` (the published DiscoRL agent's), also not those starting
      at a LAST state.
    axis_name: named axis to average gradients and statistics over, if any.
    max_grad_norm: global-norm clip of the gradients before Adam (None: none).
    adam_eps: epsilon of Adam's denominator.
    learning_rate_decay_steps: if given, the learning rate falls linearly to 0
      over this many updates.
    policy: the action distribution (``disco.policies``; None: categorical over
      ``num_actions``); a continuous one needs a rule with
      ``supports_continuous_actions``.
    rule_name: the rule's registry name, for messages.
  """

  def __init__(
      self,
      rule: base.UpdateRule,
      num_actions: int | None,
      net_config: agent_nets.NetConfig,
      learning_rate: float,
      max_abs_update: float | None = 1.0,
      loss_mask: str = "valid",
      axis_name: str | None = None,
      max_grad_norm: float | None = None,
      adam_eps: float = optimizers.DEFAULT_ADAM_EPS,
      learning_rate_decay_steps: int | None = None,
      policy: policies.Policy | None = None,
      rule_name: str | None = None,
  ):
    if policy is None:
      if num_actions is None or num_actions < 2:
        raise ValueError(f"num_actions must be >= 2, got {num_actions}.")
      policy = policies.Categorical(num_actions)
    elif num_actions is not None and (
        policy.is_continuous or policy.param_size != num_actions
    ):
      raise ValueError(
          f"num_actions={num_actions} does not match the policy {policy}."
      )
    if not policy.is_continuous and policy.param_size < 2:
      raise ValueError(f"num_actions must be >= 2, got {policy.param_size}.")
    if policy.is_continuous and not rule.supports_continuous_actions:
      raise ValueError(continuous_refusal(rule, rule_name))
    rule = rule.for_policy(policy)
    if loss_mask not in agent_settings_lib.LOSS_MASKS:
      raise ValueError(
          f"Unknown loss_mask {loss_mask!r}; use one of "
          f"{', '.join(agent_settings_lib.LOSS_MASKS)}."
      )
    self.loss_mask = loss_mask
    self.rule = rule
    self.policy = policy
    # The size of the policy output (for a categorical policy, ``A``).
    self.num_actions = policy.param_size
    self.net_config = net_config
    self.axis_name = axis_name
    self.network: hk.Transformed = agent_nets.make_network(
        net_config,
        self.num_actions,
        rule.flat_output_spec(self.num_actions),
        rule.model_output_spec(self.num_actions),
        policy=policy,
    )
    self.optimizer = optimizers.agent_optimizer(
        learning_rate,
        max_abs_update,
        max_grad_norm=max_grad_norm,
        adam_eps=adam_eps,
        decay_steps=learning_rate_decay_steps,
    )

  # --------------------------------------------------------------- networks
  def init_params(
      self, rng: jax.Array, observation: types.ArrayTree
  ) -> types.Params:
    """Network parameters; ``observation`` is one unbatched example."""
    batched = jax.tree.map(lambda x: jnp.asarray(x)[None], observation)
    return self.network.init(rng, batched)

  def apply(
      self, params: types.Params, observations: types.ArrayTree
  ) -> types.AgentOuts:
    """``[B, ...]`` observations -> outputs ``[B, ...]``."""
    return self.network.apply(params, observations)

  def unroll(
      self,
      params: types.Params,
      observations: types.ArrayTree,
      grad_actions: jax.Array | None = None,
      with_every: bool = False,
  ) -> types.AgentOuts | tuple[types.AgentOuts, types.AgentOuts]:
    """``[T+1, B, ...]`` observations -> outputs ``[T+1, B, ...]``; with
    ``grad_actions`` ``[T+1, B]``, per-action outputs carry gradients only there
    (``with_every`` adds, as a second dict, those with gradients everywhere).
    For a continuous policy, ``grad_actions`` (``[T+1, B, D]`` or
    ``[T+1, B, K, D]``) are where per-action outputs are computed."""
    return agent_nets.unroll(
        self.network.apply, params, observations, grad_actions, with_every
    )

  # ------------------------------------------------------------------ state
  def initial_learner_state(
      self,
      rng: jax.Array,
      observation: types.ArrayTree,
      lifetime: jax.Array | int | None = None,
  ) -> types.LearnerState:
    """Fresh parameters, optimiser state and rule state; a ``lifetime`` (learner
    updates) is told to the rule (``UpdateRule.start_lifetime``)."""
    net_rng, rule_rng = jax.random.split(rng)
    params = self.init_params(net_rng, observation)
    rule_state = self.rule.init_rule_state(rule_rng, params)
    if lifetime is not None:
      rule_state = self.rule.start_lifetime(rule_state, lifetime)
    return types.LearnerState(
        params=params,
        opt_state=self.optimizer.init(params),
        rule_state=rule_state,
    )

  # ----------------------------------------------------------------- acting
  def actor_step(
      self,
      params: types.Params,
      rng: jax.Array,
      timestep: types.EnvTimestep,
      rule_state: types.RuleState | None = None,
      env: Any = None,
      env_state: Any = None,
  ) -> types.ActorTimestep:
    """Chooses actions for a batch of environment timesteps ``[B, ...]``."""
    agent_out = self.apply(params, timestep.observation)
    context = base.ActingContext(
        params=params,
        apply_fn=self.apply,
        rule_state=rule_state,
        env=env,
        env_state=env_state,
        policy=self.policy,
    )
    actions, extras = self.rule.select_action(rng, agent_out, context)
    return types.ActorTimestep(
        observations=timestep.observation,
        actions=actions.astype(self.policy.action_dtype),
        rewards=timestep.reward,
        step_types=timestep.step_type,
        discounts=timestep.discount,
        agent_outs={k: agent_out[k] for k in self.rule.behaviour_outputs},
        logits=agent_out["logits"],
        extras=extras,
    )

  # --------------------------------------------------------------- learning
  def rule_inputs(
      self, agent_out: types.AgentOuts, rollout: types.ActorRollout
  ) -> types.UpdateRuleInputs:
    """The rule's view of a ``[T+1, B]`` rollout: the reward, step type and
    discount stored with timestep ``t+1`` belong to transition ``t``; ``mask``
    follows ``loss_mask``."""
    arrives_last = rollout.is_last[1:]
    is_terminal = jnp.logical_and(arrives_last, rollout.discounts[1:] == 0)
    is_truncated = jnp.logical_and(arrives_last, jnp.logical_not(is_terminal))
    mask = jnp.logical_not(is_truncated)
    if self.loss_mask == "published":
      mask = jnp.logical_and(mask, jnp.logical_not(rollout.is_last[:-1]))
    return types.UpdateRuleInputs(
        observations=rollout.observations,
        actions=rollout.actions,
        rewards=rollout.rewards[1:],
        is_terminal=is_terminal,
        agent_out=agent_out,
        behaviour_agent_out=rollout.agent_outs,
        actor_extras=rollout.extras,
        is_truncated=is_truncated,
        mask=mask.astype(jnp.float32),
        policy=self.policy,
    )

  def unroll_meta_net(
      self,
      meta_params: types.MetaParams,
      learner_state: types.LearnerState,
      rollout: types.ActorRollout,
      rng: jax.Array,
      agent_out: types.AgentOuts | None = None,
      rule: base.UpdateRule | None = None,
  ) -> tuple[dict[str, Any], types.RuleState]:
    """The rule's (or ``rule``'s) targets on a rollout; ``agent_out`` defaults
    to the network's outputs at ``learner_state.params``."""
    rule = self.rule if rule is None else rule
    if agent_out is None:
      agent_out = self.unroll(learner_state.params, rollout.observations)
    context = base.LearnerContext(
        meta_params=meta_params,
        params=learner_state.params,
        rule_state=learner_state.rule_state,
        unroll_fn=self.unroll,
        rng=rng,
        axis_name=self.axis_name,
    )
    return rule.unroll_meta_net(self.rule_inputs(agent_out, rollout), context)

  def loss_from_outputs(
      self,
      agent_out: types.AgentOuts,
      rollout: types.ActorRollout,
      meta_out: dict[str, Any],
      is_meta_training: bool,
      rule: base.UpdateRule | None = None,
  ) -> tuple[jax.Array, types.Logs]:
    """Scalar loss of the network outputs ``[T+1, B, ...]`` on a rollout (the
    rule's, or ``rule``'s): the mean over the transitions of ``loss_mask``."""
    rule = self.rule if rule is None else rule
    inputs = self.rule_inputs(agent_out, rollout)
    loss_meta, logs_meta = rule.agent_loss(
        inputs, meta_out, backprop=is_meta_training
    )
    loss_no_meta, logs_no_meta = rule.agent_loss_no_meta(inputs, meta_out)
    mask = inputs.mask.astype(loss_meta.dtype)
    per_step = loss_meta + loss_no_meta
    total = (per_step * mask).sum() / (mask.sum() + 1e-8)
    logs = {k: jnp.mean(v) for k, v in {**logs_no_meta, **logs_meta}.items()}
    return total, dict(total_loss=total, **logs)

  def learner_update(
      self,
      rng: jax.Array,
      rollout: types.ActorRollout,
      learner_state: types.LearnerState,
      meta_params: types.MetaParams,
      is_meta_training: bool = False,
  ) -> types.LearnerUpdate:
    """One update on a ``[T+1, B]`` rollout: the loss's gradient, then
    ``apply_gradients``; for a rule that ``tunes_hyper_params``, also a
    meta-gradient step on them (``disco.self_tuning_step.update``).

    Args:
      rng: random key for the rule.
      rollout: time-major rollout from the actor.
      learner_state: parameters, optimiser state and rule state.
      meta_params: the rule's meta-parameters (``{}`` for hand-designed).
      is_meta_training: whether meta-gradients flow through the targets (a
        Python bool).

    Returns:
      ``LearnerUpdate``: the new learner state, scalar logs, the rule's
        ``meta_out`` and the gradients (averaged over ``axis_name``).

    Raises:
      ValueError: ``is_meta_training`` for a rule that ``tunes_hyper_params``
        (it has no meta-parameters).
    """
    if self.rule.tunes_hyper_params:
      if is_meta_training:
        raise ValueError(
            "A self-tuning rule has no meta-parameters to meta-train: "
            "is_meta_training must be False."
        )
      return self_tuning_step.update(
          self, rng, rollout, learner_state, meta_params
      )
    return self.plain_update(
        rng, rollout, learner_state, meta_params, is_meta_training
    )

  def plain_update(
      self,
      rng: jax.Array,
      rollout: types.ActorRollout,
      learner_state: types.LearnerState,
      meta_params: types.MetaParams,
      is_meta_training: bool,
      step_size: jax.Array | None = None,
      forward: tuple[types.AgentOuts, Callable[..., Any]] | None = None,
  ) -> types.LearnerUpdate:
    """``learner_update`` without a meta-gradient step (``step_size``:
    ``apply_gradients``'; ``forward``: the outputs ``loss_outputs`` at the
    parameters and their pullback, where the caller has them)."""
    # One forward pass serves the rule's targets and the gradient. Rules
    # reading per-action outputs at taken actions backpropagate through those
    # alone; in meta-training their targets also get every action's outputs.
    params = learner_state.params
    if forward is not None:
      agent_out, unroll_vjp = forward
      target_inputs = agent_out
    elif not (self.rule.model_losses_read_taken_actions and is_meta_training):
      agent_out, unroll_vjp = jax.vjp(
          lambda p: self.loss_outputs(p, rollout), params
      )
      target_inputs = agent_out
    else:
      agent_out, unroll_vjp, every = jax.vjp(
          lambda p: self.unroll(
              p, rollout.observations, rollout.actions, with_every=True
          ),
          params,
          has_aux=True,
      )
      target_inputs = dict(agent_out, **every)
    meta_out, new_rule_state = self.unroll_meta_net(
        meta_params, learner_state, rollout, rng, agent_out=target_inputs
    )
    out_grads, logs = jax.grad(self.loss_from_outputs, has_aux=True)(
        agent_out, rollout, meta_out, is_meta_training
    )
    (grads,) = unroll_vjp(out_grads)
    if self.axis_name is not None:
      grads = jax.lax.pmean(grads, axis_name=self.axis_name)
    new_state, update_logs = self.apply_gradients(
        learner_state, grads, new_rule_state, step_size
    )
    return types.LearnerUpdate(
        learner_state=new_state,
        logs=dict(logs, **update_logs),
        meta_out=meta_out,
        grads=grads,
    )

  def loss_outputs(
      self, params: types.Params, rollout: types.ActorRollout
  ) -> types.AgentOuts:
    """The outputs ``[T+1, B, ...]`` the losses' gradient flows through
    (per-action ones at the taken actions, where the rule reads those
    only)."""
    if self.rule.model_losses_read_taken_actions:
      return self.unroll(params, rollout.observations, rollout.actions)
    return self.unroll(params, rollout.observations)

  def outer_loss(
      self,
      rule: base.UpdateRule,
      params: types.Params,
      rollout: types.ActorRollout,
      rule_state: types.RuleState,
      rng: jax.Array,
      meta_params: types.MetaParams,
  ) -> jax.Array:
    """``rule``'s scalar loss at ``params`` on a ``[T+1, B]`` rollout, its
    targets (from ``rule_state``, not advanced) constants: differentiable in
    ``params`` as the agent's own loss is."""
    state = types.LearnerState(
        params=params, opt_state=None, rule_state=rule_state
    )
    return self.loss_with_constant_targets(
        rule,
        self.loss_outputs(params, rollout),
        state,
        rollout,
        rng,
        meta_params,
    )

  def loss_with_constant_targets(
      self,
      rule: base.UpdateRule,
      agent_out: types.AgentOuts,
      learner_state: types.LearnerState,
      rollout: types.ActorRollout,
      rng: jax.Array,
      meta_params: types.MetaParams,
  ) -> jax.Array:
    """``rule``'s scalar loss of the network's outputs ``agent_out``
    ``[T+1, B, ...]`` (at ``learner_state.params``) on a rollout, its targets
    (from ``learner_state.rule_state``, not advanced) constants."""
    meta_out, _ = self.unroll_meta_net(
        meta_params,
        learner_state,
        rollout,
        rng,
        agent_out=jax.lax.stop_gradient(agent_out),
        rule=rule,
    )
    loss, _ = self.loss_from_outputs(
        agent_out, rollout, jax.lax.stop_gradient(meta_out), False, rule=rule
    )
    return loss

  def apply_gradients(
      self,
      learner_state: types.LearnerState,
      grads: types.Params,
      new_rule_state: types.RuleState,
      step_size: jax.Array | None = None,
  ) -> tuple[types.LearnerState, types.Logs]:
    """The optimiser step, times ``step_size`` (``[]``; None: 1): new learner
    state and the gradient and update norms."""
    updates, opt_state = self.optimizer.update(
        grads, learner_state.opt_state, learner_state.params
    )
    if step_size is not None:
      updates = jax.tree.map(lambda u: (step_size * u).astype(u.dtype), updates)
    params = optax.apply_updates(learner_state.params, updates)
    logs = dict(
        global_gradient_norm=optax.tree.norm(grads),
        global_update_norm=optax.tree.norm(updates),
    )
    new_state = types.LearnerState(
        params=params, opt_state=opt_state, rule_state=new_rule_state
    )
    return new_state, logs

  def learner_step(
      self, *args: Any, **kwargs: Any
  ) -> tuple[types.LearnerState, types.Logs]:
    """``learner_update``'s new learner state and logs."""
    update = self.learner_update(*args, **kwargs)
    return update.learner_state, update.logs


def continuous_refusal(rule: base.UpdateRule, name: str | None = None) -> str:
  """One line on why ``rule`` (registered as ``name``) cannot train on
  continuous actions."""
  return (
      f"Rule {name or type(rule).__name__} cannot act in a continuous action "
      "space: "
      f"{rule.continuous_actions_refusal}. Use a discrete-action environment, "
      "or a rule that supports continuous actions: "
      f"{', '.join(registry.continuous_rule_names())}."
  )


def make_agent(
    settings: agent_settings_lib.AgentSettings,
    num_actions: int | None = None,
    rule: base.UpdateRule | None = None,
    axis_name: str | None = None,
    num_updates: int | None = None,
    observation_spec: specs.Array | None = None,
    action_spec: specs.BoundedArray | None = None,
) -> Agent:
  """The agent that ``settings`` (``registry.default_settings`` with overrides
  merged) describe.

  Args:
    settings: the agent settings.
    num_actions: ``A`` of a categorical policy (or give ``action_spec``).
    rule: the rule, if already built from ``settings``.
    axis_name: see ``Agent``.
    num_updates: the run's optimiser steps, needed with
      ``anneal_learning_rate``.
    observation_spec: checks the network against it and lets it take state
      indices (``network.obs_embedding="one_hot"``); None: not checked.
    action_spec: instead of ``num_actions``: the policy is
      ``policies.make_policy(action_spec, settings.policy)``.

  Raises:
    ValueError: an unknown rule or bad settings, or a network or rule that
      cannot take the environment's observations or (continuous) actions.
  """
  if (num_actions is None) == (action_spec is None):
    raise ValueError("make_agent needs num_actions or action_spec (not both).")
  if rule is None:
    rule = registry.make_rule(settings)
  policy = None
  if action_spec is not None:
    policy = policies.make_policy(action_spec, dict(settings.policy))
  decay_steps = None
  if settings.anneal_learning_rate:
    if num_updates is None or num_updates < 1:
      raise ValueError(
          "anneal_learning_rate decays the learning rate to 0 over the run: "
          "give make_agent num_updates (the optimiser steps of the whole "
          f"run, >= 1; got {num_updates}) or set anneal_learning_rate=False."
      )
    decay_steps = int(num_updates)
  net_config = agent_nets.make_net_config(
      agent_settings_lib.thawed(settings.network)
  )
  if observation_spec is not None:
    net_config = net_config.with_observation(observation_spec)
  return Agent(
      rule=rule,
      num_actions=num_actions,
      net_config=net_config,
      learning_rate=settings.learning_rate,
      max_abs_update=settings.max_abs_update,
      loss_mask=settings.loss_mask,
      axis_name=axis_name,
      max_grad_norm=settings.max_grad_norm,
      adam_eps=settings.adam_eps,
      learning_rate_decay_steps=decay_steps,
      policy=policy,
      rule_name=settings.rule,
  )
