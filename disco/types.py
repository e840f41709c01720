"""Typed, immutable pytrees shared across the package.

Time-major throughout: a rollout of ``T`` transitions holds ``T+1`` states;
per-state arrays (observations, actions, agent outputs) are ``[T+1, B,
...]``, per-transition arrays (rewards, terminations) ``[T, B]``, entry
``t`` being the move from state ``t`` to ``t+1``. Containers are frozen
``chex`` dataclasses (pytrees; derive copies with ``.replace``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp

from disco import policies

Array = jax.Array
ArrayTree = chex.ArrayTree
Params = Mapping[str, Mapping[str, Array]]  # haiku parameters
MetaParams = ArrayTree
AgentOuts = dict[str, Array]
RuleState = dict[str, Any]
Logs = dict[str, Array]
HyperParams = Mapping[str, float]

ArraySpec = jax.ShapeDtypeStruct

# dm_env step types, as plain ints so they live in arrays.
FIRST, MID, LAST = 0, 1, 2


@chex.dataclass(frozen=True)
class EnvTimestep:
  """What a batched environment returns after ``reset`` or ``step``.

  Attributes:
    observation: ``[B, ...]`` (after an auto-reset, the next episode's first).
    reward: ``[B]`` float32 reward of the transition that led here.
    step_type: ``[B]`` int32 FIRST, MID or LAST (an episode's last step).
    discount: ``[B]`` float32: 0 where the episode terminated, else 1
      (truncation: LAST with discount 1).
    info: ``{name: [B] float32}`` per-episode metrics, or None; read only at
      LAST steps; the same names from ``reset`` (zeros) and every ``step``.
  """

  observation: ArrayTree
  reward: Array
  step_type: Array
  discount: Array
  info: dict[str, Array] | None = None

  @property
  def is_last(self) -> Array:
    return self.step_type == LAST


@chex.dataclass(frozen=True)
class ActorTimestep:
  """One acting step of a rollout (``ActorRollout``: ``[T+1]`` leading).

  Attributes:
    observations: ``[B, ...]`` the action was chosen at.
    actions: ``[B]`` int32 or ``[B, D]`` float32, unclipped.
    rewards: ``[B]`` received on arriving here.
    step_types: ``[B]`` int32 of arriving here.
    discounts: ``[B]`` float32 environment discount of arriving here.
    agent_outs: ``[B, ...]`` acting-network outputs (the rule's
      ``behaviour_outputs``).
    logits: ``[B, P]`` behaviour-policy parameters.
    extras: rule-specific acting outputs (e.g. SPO search statistics).
    env_info: ``EnvTimestep.info`` of arriving here, or None; never replayed.
  """

  observations: ArrayTree
  actions: Array
  rewards: Array
  step_types: Array
  discounts: Array
  agent_outs: AgentOuts
  logits: Array
  extras: ArrayTree = None
  env_info: dict[str, Array] | None = None

  @property
  def is_last(self) -> Array:
    """Where the step ends an episode (terminated or truncated)."""
    return self.step_types == LAST


# A stacked sequence of ActorTimesteps: every leaf gets a leading ``[T+1]``.
ActorRollout = ActorTimestep


@chex.dataclass(frozen=True)
class EmaState:
  """Moments of an exponential moving average (``disco.value_fns.ema``).

  Attributes:
    moment1: running mean.
    moment2: running mean of squares.
    decay_product: product of the decays so far (for debiasing).
  """

  moment1: ArrayTree
  moment2: ArrayTree
  decay_product: Array


@chex.dataclass(frozen=True)
class ValueOuts:
  """Value estimates and targets of a rollout (``disco.value_fns``)."""

  value: Array  # [T+1, B] V(s)
  target_value: Array  # [T+1, B] V(s) from the target network
  rho: Array  # [T, B] importance weights pi/mu of the taken actions
  adv: Array  # [T, B] advantages
  value_target: Array  # [T, B] targets for V
  td: Array  # [T, B] value_target - value
  normalized_adv: Array | None = None  # [T, B]
  normalized_td: Array | None = None  # [T, B]
  qv_adv: Array | None = None  # [T+1, B, A] Q(s, a) - V(s)
  normalized_qv_adv: Array | None = None  # [T+1, B, A]
  q_value: Array | None = None  # [T+1, B, A]
  target_q_value: Array | None = None  # [T+1, B, A]
  q_target: Array | None = None  # [T, B] Retrace targets for Q(s_t, a_t)
  q_td: Array | None = None  # [T, B] q_target - Q(s_t, a_t)
  normalized_q_td: Array | None = None  # [T, B]


@chex.dataclass(frozen=True)
class UpdateRuleInputs:
  """What an update rule sees of a rollout.

  Episodes reset inside the transition that ends them: a terminated
  transition bootstraps with discount 0; a truncated one (time limit) has no
  valid bootstrap, so it is masked out of the losses and no return crosses
  it.

  Attributes:
    observations: ``[T+1, B, ...]``.
    actions: ``[T+1, B]`` int32 or ``[T+1, B, D]`` float32 (the last is in no
      transition).
    rewards: ``[T, B]``.
    is_terminal: ``[T, B]`` bool, transition ``t`` terminated.
    agent_out: ``[T+1, B, ...]`` outputs of the network being trained.
    behaviour_agent_out: ``[T+1, B, ...]`` outputs of the acting network.
    value_out: value estimates from outside the rule, if any.
    extra_from_rule: rule-computed extras (e.g. meta-network inputs).
    actor_extras: rule-specific acting outputs of the rollout.
    is_truncated: ``[T, B]`` bool, transition ``t`` hit a time limit (None:
      none did).
    mask: ``[T, B]`` float, 1 for transitions the losses average over (None:
      all).
    policy: the ``disco.policies.Policy`` of ``agent_out["logits"]`` (None:
      categorical).
  """

  observations: ArrayTree
  actions: Array
  rewards: Array
  is_terminal: Array
  agent_out: AgentOuts
  behaviour_agent_out: AgentOuts | None = None
  value_out: ValueOuts | None = None
  extra_from_rule: ArrayTree = None
  actor_extras: ArrayTree = None
  is_truncated: Array | None = None
  mask: Array | None = None
  policy: Any = None

  @property
  def action_policy(self) -> policies.Policy:
    """``policy``, or a categorical one over the logits where not given."""
    if self.policy is not None:
      return self.policy
    return policies.Categorical(self.agent_out["logits"].shape[-1])

  @property
  def truncated(self) -> Array:
    """``[T, B]`` ``is_truncated``, or all False."""
    if self.is_truncated is None:
      return jnp.zeros(self.is_terminal.shape, bool)
    return self.is_truncated

  @property
  def episode_ends(self) -> Array:
    """``[T, B]`` bool: transition ``t`` terminated or was truncated."""
    return jnp.logical_or(self.is_terminal, self.truncated)

  def check_shapes(self) -> tuple[int, int]:
    """Checks the time-major layout at trace time; returns ``(T, B)``.

    Raises:
      AssertionError: naming the first array whose shape does not fit.
    """
    chex.assert_rank(self.rewards, 2)
    t, b = self.rewards.shape
    chex.assert_shape(self.is_terminal, (t, b))
    for name in ("is_truncated", "mask"):
      if getattr(self, name) is not None:
        chex.assert_shape(getattr(self, name), (t, b), custom_message=name)
    action_shape = () if self.policy is None else self.policy.action_shape
    chex.assert_shape(self.actions, (t + 1, b) + tuple(action_shape))
    for outs in (self.agent_out, self.behaviour_agent_out or {}):
      for key, value in outs.items():
        chex.assert_shape(
            value, (t + 1, b, ...), custom_message=f"agent output {key!r}"
        )
    return t, b

  @property
  def should_reset_bwd(self) -> Array:
    """``[T+1, B]`` reset flags for RNNs unrolled backwards: ``episode_ends``
    then False for the bootstrap state."""
    ends = self.episode_ends
    return jnp.concatenate([ends, jnp.zeros_like(ends[:1])], axis=0)

  @property
  def should_reset_fwd(self) -> Array:
    """``[T+1, B]`` reset flags for RNNs unrolled forwards in time."""
    ends = self.episode_ends
    return jnp.concatenate([jnp.zeros_like(ends[:1]), ends], axis=0)


@chex.dataclass(frozen=True)
class LearnerState:
  """Everything a learner step updates.

  Attributes:
    params: agent network parameters.
    opt_state: optimiser state.
    rule_state: the update rule's own state (EMAs, target parameters, ...).
  """

  params: Params
  opt_state: ArrayTree
  rule_state: RuleState


@chex.dataclass(frozen=True)
class LearnerUpdate:
  """One learner step's results (``disco.agent.Agent.learner_update``).

  Attributes:
    learner_state: the updated learner state.
    logs: scalar logs of the loss and the optimiser step.
    meta_out: the rule's loss targets (``UpdateRule.unroll_meta_net``).
    grads: the loss gradient w.r.t. the agent parameters, before the
      optimiser.
  """

  learner_state: LearnerState
  logs: Logs
  meta_out: ArrayTree
  grads: Params
