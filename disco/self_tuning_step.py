"""The learner step of a rule that ``tunes_hyper_params``
(``disco.update_rules.self_tuning.SelfTuning``): the update with the current
hyper-parameters, then one step of the rule's meta-variables ``x``
(``meta_update``) on the meta-gradient of the outer loss at the updated
parameters ``params' = params + s(x) u(g(x))``, taken through the update, the
optimiser's step ``u`` included:

    d outer / dx = d/dx <J w, dL/d out(x)> + <grad outer(params'), u> ds/dx,
    w = s (du/dg)^T grad outer(params'),

with ``J w`` the network's outputs' derivative at ``params`` along ``w``,
``dL/d out(x)`` the inner loss's gradient with respect to the outputs (the
update's gradient is ``g = J^T dL/d out``) and ``s`` the rule's ``step_size``
(1, and its term absent, when it is not tuned). One linearisation of the
network at ``params`` serves ``g``, ``J w`` and, with
``meta_gradient="linearized"``, ``grad outer(params)``, which then replaces
``grad outer(params')``; with ``"bmg"``, ``bmg_value_and_grad``'s gradient
does.

The functions take the ``disco.agent.Agent`` whose step it is
(``Agent.learner_update`` calls ``update``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from disco import types


def update(
    agent: Any,
    rng: jax.Array,
    rollout: types.ActorRollout,
    learner_state: types.LearnerState,
    meta_params: types.MetaParams,
) -> types.LearnerUpdate:
  """``agent``'s self-tuning learner step on a ``[T+1, B]`` rollout.

  Returns:
    ``LearnerUpdate``: the update ``agent.plain_update`` makes with the rule's
      current values, but for the rule state's new meta-variables; its logs
      gain the rule's (values, meta-gradients) and ``outer_loss`` (at
      ``params`` with ``"linearized"``), or ``bmg_distance`` with ``"bmg"``.
  """
  tuner = agent.rule
  rule_state = learner_state.rule_state
  step_size = tuner.step_size(rule_state)
  params = learner_state.params
  agent_out, push = jax.linearize(
      lambda p: agent.loss_outputs(p, rollout), params
  )
  pull = jax.linear_transpose(push, params)
  step = agent.plain_update(
      rng,
      rollout,
      learner_state,
      meta_params,
      False,
      step_size,
      forward=(agent_out, pull),
  )
  outer_grads, meta_logs = _outer_gradient(
      agent,
      rng,
      rollout,
      learner_state,
      step.learner_state,
      meta_params,
      (agent_out, pull),
  )
  meta_objective = _tuning_objective(
      agent,
      rng,
      rollout,
      learner_state,
      meta_params,
      step.grads,
      outer_grads,
      step_size,
      (agent_out, push),
  )
  meta_grads = jax.grad(meta_objective)(tuner.meta_variables(rule_state))
  if agent.axis_name is not None:
    meta_grads = jax.lax.pmean(meta_grads, axis_name=agent.axis_name)
  new_rule_state, tuning_logs = tuner.meta_update(
      step.learner_state.rule_state, meta_grads
  )
  return step.replace(
      learner_state=step.learner_state.replace(rule_state=new_rule_state),
      logs=dict(step.logs, **meta_logs, **tuning_logs),
  )


def _outer_gradient(
    agent: Any,
    rng: jax.Array,
    rollout: types.ActorRollout,
    learner_state: types.LearnerState,
    updated: types.LearnerState,
    meta_params: types.MetaParams,
    linearization: tuple[types.AgentOuts, Callable[..., Any]],
) -> tuple[types.Params, types.Logs]:
  """The rule's ``meta_gradient`` option's gradient in the parameters (the
  outer loss's at ``updated.params``; or at ``learner_state.params``, through
  ``linearization``: the network's outputs there and their pullback; or the
  BMG distance's), averaged over ``axis_name``, and its log."""
  tuner = agent.rule
  if tuner.meta_gradient == "bmg":
    distance, grads = bmg_value_and_grad(
        agent, rng, rollout, updated, meta_params
    )
    logs = dict(bmg_distance=distance)
  else:
    linearized = tuner.meta_gradient == "linearized"
    outer, grads = outer_value_and_grad(
        agent,
        rng,
        rollout,
        learner_state.params if linearized else updated.params,
        learner_state.rule_state,
        meta_params,
        linearization if linearized else None,
    )
    logs = dict(outer_loss=outer)
  if agent.axis_name is not None:
    grads = jax.lax.pmean(grads, axis_name=agent.axis_name)
  return grads, logs


def _tuning_objective(
    agent: Any,
    rng: jax.Array,
    rollout: types.ActorRollout,
    learner_state: types.LearnerState,
    meta_params: types.MetaParams,
    grads: types.Params,
    outer_grads: types.Params,
    step_size: jax.Array | None,
    linearization: tuple[types.AgentOuts, Callable[..., Any]],
) -> Callable[[Any], jax.Array]:
  """``x -> <J w, dL/d out(x)> (+ s(x) <grad outer, u>)``, whose gradient is
  the step's meta-gradient (``grads``: the update's ``g``; ``outer_grads``:
  ``grad outer``; ``step_size``: ``s``, None when not tuned;
  ``linearization``: the network's outputs at ``params`` and their
  pushforward ``J``)."""
  tuner, rule_state = agent.rule, learner_state.rule_state
  updates, optimizer_vjp = jax.vjp(
      lambda g: agent.optimizer.update(
          g, learner_state.opt_state, learner_state.params
      )[0],
      grads,
  )
  (direction,) = optimizer_vjp(outer_grads)
  if step_size is not None:
    direction = jax.tree.map(lambda d: step_size * d, direction)
  agent_out, push = linearization
  outputs_tangent = push(direction)

  def inner_dot(x):
    state = learner_state.replace(
        rule_state=tuner.with_meta_variables(rule_state, x)
    )
    meta_out, _ = agent.unroll_meta_net(
        meta_params, state, rollout, rng, agent_out=agent_out
    )
    # <J w, dL/d out>: the loss's derivative along ``J w`` (forward mode).
    _, along = jax.jvp(
        lambda out: agent.loss_from_outputs(out, rollout, meta_out, False)[0],
        (agent_out,),
        (outputs_tangent,),
    )
    return along

  if step_size is None:
    return inner_dot
  # ``params'`` also moves along the optimiser's step ``u`` with ``s``.
  along_step = jax.lax.stop_gradient(optax.tree.vdot(outer_grads, updates))

  def meta_objective(x):
    state = tuner.with_meta_variables(rule_state, x)
    return inner_dot(x) + tuner.step_size(state) * along_step

  return meta_objective


def bmg_value_and_grad(
    agent: Any,
    rng: jax.Array,
    rollout: types.ActorRollout,
    updated: types.LearnerState,
    meta_params: types.MetaParams,
) -> tuple[jax.Array, types.Params]:
  """The bootstrapped (BMG) objective ``mu(target, params')`` at the updated
  learner state ``updated`` and its gradient in ``params'``. The target, a
  constant: from ``updated``, the rule's ``bmg_target_steps - 1`` updates
  (``agent.plain_update``'s; keys ``fold_in(rng, i)``), then one optimiser
  step on the gradient of its ``outer_rule``'s loss (``outer_value_and_grad``),
  all on ``rollout``. ``mu`` (``bmg_distance``): ``"kl"``, ``KL(pi_target ||
  pi_params')`` averaged over the ``[T, B]`` states of the rollout (the last,
  which has no action, left out); ``"squared"``, the sum of the squared
  parameter differences."""
  tuner = agent.rule
  target = jax.lax.stop_gradient(updated)
  target = jax.lax.fori_loop(
      0,
      tuner.bmg_target_steps - 1,
      lambda i, state: agent.plain_update(
          jax.random.fold_in(rng, i),
          rollout,
          state,
          meta_params,
          False,
          tuner.step_size(state.rule_state),
      ).learner_state,
      target,
  )
  _, outer_grads = outer_value_and_grad(
      agent, rng, rollout, target.params, target.rule_state, meta_params
  )
  if agent.axis_name is not None:
    outer_grads = jax.lax.pmean(outer_grads, axis_name=agent.axis_name)
  target, _ = agent.apply_gradients(target, outer_grads, target.rule_state)
  target_params = jax.lax.stop_gradient(target.params)
  if tuner.bmg_distance == "squared":

    def distance(params):
      return optax.tree.norm(
          optax.tree.sub(params, target_params), squared=True
      )

  else:
    target_logits = agent.loss_outputs(target_params, rollout)["logits"]

    def distance(params):
      logits = agent.loss_outputs(params, rollout)["logits"]
      return agent.policy.kl(target_logits[:-1], logits[:-1]).mean()

  return jax.value_and_grad(distance)(updated.params)


def outer_value_and_grad(
    agent: Any,
    rng: jax.Array,
    rollout: types.ActorRollout,
    params: types.Params,
    rule_state: types.RuleState,
    meta_params: types.MetaParams,
    linearization: tuple[types.AgentOuts, Callable[..., Any]] | None = None,
) -> tuple[jax.Array, types.Params]:
  """The rule's outer loss (``agent.outer_loss`` of its ``outer_rule``,
  targets from the base rule's part of ``rule_state``) at ``params``, and its
  gradient in ``params``: through ``linearization`` where given (the
  network's outputs at ``params`` and their pullback), else by
  differentiating the network again."""
  tuner = agent.rule
  base_rule_state = tuner.base_state(rule_state)
  if linearization is None:
    return jax.value_and_grad(
        lambda p: agent.outer_loss(
            tuner.outer_rule, p, rollout, base_rule_state, rng, meta_params
        )
    )(params)
  agent_out, pull = linearization
  state = types.LearnerState(
      params=params, opt_state=None, rule_state=base_rule_state
  )
  value, out_grads = jax.value_and_grad(
      lambda out: agent.loss_with_constant_targets(
          tuner.outer_rule, out, state, rollout, rng, meta_params
      )
  )(agent_out)
  (grads,) = pull(out_grads)
  return value, grads
