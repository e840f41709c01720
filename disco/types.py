"""Typed, immutable pytrees shared across the package.

Layout conventions (time-major throughout):
  * a rollout of ``T`` transitions holds ``T+1`` states, so per-state arrays
    (observations, actions, agent outputs) are ``[T+1, B, ...]``;
  * per-transition arrays handed to update rules (rewards, terminations) are
    ``[T, B]``: entry ``t`` describes the move from state ``t`` to ``t+1``.

All containers are frozen ``chex`` dataclasses: use ``.replace(...)`` to derive
a modified copy. They are registered as pytrees, so they pass through
``jit``/``vmap``/``scan`` unchanged.
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
    observation: ``[B, ...]`` observation (after an auto-reset: the first
      observation of the next episode).
    reward: ``[B]`` float32 reward of the transition that led here.
    step_type: ``[B]`` int32 in {FIRST, MID, LAST}; LAST marks the final step
      of an episode (kept even though the observation is already the next
      episode's, so that rewards and terminations are never lost).
    discount: ``[B]`` float32 environment discount: 0 where the episode
      terminated, 1 otherwise (a truncated episode is LAST with discount 1).
    info: per-episode environment metrics, ``{name: [B] float32}``, or None
      (the default: every environment without such metrics). Where
      ``step_type`` is LAST, ``info[name]`` describes the episode that ended
      there (e.g. Craftax's ``achievement/collect_wood``: 1 if the episode
      unlocked it); the values of other steps are never read. An environment
      that has info gives the same names from ``reset`` (zeros) and every
      ``step``, so that timesteps keep one structure in a ``lax.scan``.
      ``disco.training.acting.episode_stats`` averages them over the episodes
      that end in a rollout (as ``episode/<name>``).
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
  """One acting step, as stored in rollouts.

  Attributes:
    observations: ``[B, ...]`` observation the action was chosen at.
    actions: ``[B]`` int32 (discrete) or ``[B, D]`` float32 (continuous)
      chosen actions, as the policy drew them (unclipped).
    rewards: ``[B]`` reward received on arriving at this observation.
    step_types: ``[B]`` int32 step type of arriving here (FIRST, MID, LAST;
      at LAST the observation is already the next episode's first).
    discounts: ``[B]`` float32 environment discount of arriving here: 0 where
      the episode terminated, 1 otherwise (a truncated episode is LAST with
      discount 1).
    agent_outs: dict of ``[B, ...]`` acting-network outputs named by the
      rule's ``behaviour_outputs``.
    logits: ``[B, P]`` parameters of the behaviour policy (``A`` logits,
      or a Gaussian's ``2 D`` mean and log-std; see ``disco.policies``).
    extras: rule-specific acting outputs (e.g. SPO search statistics).
    env_info: the ``EnvTimestep.info`` of arriving here (``{name: [B]}``),
      attached by ``disco.training.acting.unroll_actor`` for
      ``episode_stats``; None for environments without info, and never
      stored in a replay (the loop drops it after its statistics).
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
    """Where this step is the last of an episode (terminated or truncated)."""
    return self.step_types == LAST


# A stacked sequence of ActorTimesteps: every leaf gets a leading ``[T+1]``.
ActorRollout = ActorTimestep


@chex.dataclass(frozen=True)
class EmaState:
  """Moments of an exponential moving average (zero-initialised, debiased).

  Attributes:
    moment1: running mean.
    moment2: running mean of squares.
    decay_product: product of all decays applied so far (for debiasing).
  """

  moment1: ArrayTree
  moment2: ArrayTree
  decay_product: Array


@chex.dataclass(frozen=True)
class ValueOuts:
  """Value estimates and targets for a rollout (see ``disco.value_fns``).

  Per-state entries are ``[T+1, B]``; per-transition entries ``[T, B]``;
  action-value entries carry an extra action axis ``[..., A]``.
  """

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

  Transition ``t`` goes from state ``t`` to state ``t+1``. Episodes reset
  inside the transition that ends them, so state ``t+1`` is then the first
  state of the next episode: a terminated transition bootstraps with
  discount 0, and a truncated one (a time limit) has no valid bootstrap at
  all, so it is left out of the losses (``mask``) and no return crosses it.

  Attributes:
    observations: ``[T+1, B, ...]``.
    actions: ``[T+1, B]`` int32 (discrete) or ``[T+1, B, D]`` float32
      (continuous) actions (the last one is not part of any transition).
    rewards: ``[T, B]`` reward of transition t.
    is_terminal: ``[T, B]`` bool, whether transition t terminated its
      episode (environment discount 0).
    agent_out: dict of ``[T+1, B, ...]`` outputs of the network being trained.
    behaviour_agent_out: dict of ``[T+1, B, ...]`` outputs of the acting network.
    value_out: optional value estimates supplied from outside the rule.
    extra_from_rule: rule-computed extras (e.g. Disco's meta-network inputs).
    actor_extras: rule-specific acting outputs carried by the rollout.
    is_truncated: ``[T, B]`` bool, whether transition t was cut by a time
      limit (None: no truncations).
    mask: ``[T, B]`` float, 1 for the transitions that count in the losses
      (None: all of them); losses are averaged over these.
    policy: the action distribution that ``agent_out["logits"]``
      parameterises (a ``disco.policies.Policy``; None: categorical).
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
    """``is_truncated``, or all False where it is not given: ``[T, B]``."""
    if self.is_truncated is None:
      return jnp.zeros(self.is_terminal.shape, bool)
    return self.is_truncated

  @property
  def episode_ends(self) -> Array:
    """``[T, B]`` bool: transition t ended its episode (terminated or
    truncated), so state t+1 belongs to the next one."""
    return jnp.logical_or(self.is_terminal, self.truncated)

  def check_shapes(self) -> tuple[int, int]:
    """Checks the time-major layout (at trace time); returns ``(T, B)``.

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
    """``[T+1, B]`` reset flags for RNNs unrolled backwards in time.

    Entry t is True where transition t ended an episode, so a backward RNN
    does not carry information from the next episode into this one; the
    extra last entry (the bootstrap state) is False.
    """
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
    rule_state: the update rule's own state (EMA statistics, target
      parameters, dual variables, meta-RNN state, ...).
  """

  params: Params
  opt_state: ArrayTree
  rule_state: RuleState


@chex.dataclass(frozen=True)
class LearnerUpdate:
  """What one learner step computes (``disco.agent.Agent.learner_update``).

  Attributes:
    learner_state: the updated learner state.
    logs: scalar logs of the loss and the optimiser step.
    meta_out: the rule's loss targets (``UpdateRule.unroll_meta_net``).
    grads: the gradient of the loss with respect to the agent parameters,
      before the optimiser.
  """

  learner_state: LearnerState
  logs: Logs
  meta_out: ArrayTree
  grads: Params
