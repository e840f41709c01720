"""The update-rule interface consumed by ``disco.agent.Agent``, which never
branches on the rule.

A rule declares the network's outputs, per state (``flat_output_spec``,
``[B, *shape]``) and per action (``model_output_spec``, ``[B, A, *shape]``);
owns its meta-parameters (none for hand-designed rules) and state; and turns a
rollout into ``[T, B]`` losses: a learner step calls ``unroll_meta_net`` once
for the targets, then differentiates ``agent_loss`` (which may carry
meta-gradients, with ``backprop``) plus ``agent_loss_no_meta``. It may choose
actions (``select_action``; ``needs_env_copies`` to search over environment
states), add outer-loss terms (``meta_regularizer``) and read its agent's
lifetime (``start_lifetime``). A rule with ``supports_continuous_actions`` reads
the policy only through ``inputs.action_policy``, so ``logits`` may be a
Gaussian's ``P`` parameters (its specs' ``num_actions``), and per-action outputs
are computed at given actions.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
import copy
import dataclasses
from typing import Any

import immutabledict
import jax
import jax.numpy as jnp
import numpy as np

from disco import checks
from disco import ops
from disco import policies
from disco import types
from disco.value_fns import categorical
from disco.value_fns import returns

# What ``unroll_meta_net`` computes for the losses (targets, statistics).
MetaOut = dict[str, Any]
# A per-transition loss ``[T, B]`` and scalar (or averaged) logs.
LossAndLogs = tuple[jax.Array, types.Logs]
Specs = dict[str, types.ArraySpec]
# (params, observations [T+1, B, ...]) -> agent outputs [T+1, B, ...]; an
# optional third argument gives actions ``[T+1, B, ...]`` (see
# ``disco.agent.Agent.unroll``).
UnrollFn = Callable[..., types.AgentOuts]
# The discount and trace parameter of the published agents' returns (the
# Disco103 setting and the published actor-critic).
PUBLISHED_RETURNS = immutabledict.immutabledict(
    discount_factor=0.997, td_lambda=0.95
)


def logits_spec(num_actions: int) -> types.ArraySpec:
  return types.ArraySpec((num_actions,), np.float32)


def policy_value_spec(
    num_actions: int, value_size: int = 1
) -> dict[str, types.ArraySpec]:
  """Per-state outputs of a policy-and-value network: ``logits [A]`` and
  ``v [value_size]`` (1: a scalar value; more: a categorical value's bins)."""
  return dict(
      logits=logits_spec(num_actions),
      v=types.ArraySpec((value_size,), np.float32),
  )


@dataclasses.dataclass(frozen=True)
class ActingContext:
  """What a rule may use to choose actions: the acting ``params``, ``apply_fn``
  (``(params, observations [B, ...]) -> outputs [B, ...]``), the ``rule_state``
  (None without a learner), the jittable batched ``env`` and its ``env_state``
  (for ``needs_env_copies`` rules only), and the ``policy`` of ``logits`` (None:
  categorical)."""

  params: types.Params
  apply_fn: Callable[..., types.AgentOuts]
  rule_state: types.RuleState | None = None
  env: Any = None
  env_state: Any = None
  policy: policies.Policy | None = None


@dataclasses.dataclass(frozen=True)
class LearnerContext:
  """What a rule may use to compute its targets: its ``meta_params`` (``{}`` for
  hand-designed rules), the agent ``params`` before this update, the
  ``rule_state``, ``unroll_fn`` (the network over ``[T+1, B, ...]``
  observations, e.g. for a target network), ``rng`` and the ``axis_name`` to
  average statistics over."""

  meta_params: types.MetaParams
  params: types.Params
  rule_state: types.RuleState
  unroll_fn: UnrollFn
  rng: jax.Array
  axis_name: str | None = None

  def moved_target_params(self, tau: float) -> types.Params:
    """``rule_state["target_params"]`` moved towards ``params`` by ``tau``
    (Polyak averaging), for rules that keep a target network."""
    return ops.polyak(self.rule_state["target_params"], self.params, tau)


class UpdateRule(abc.ABC):
  """Base class of update rules; see the module docstring."""

  # Whether acting needs copies of the (jittable) environment state.
  needs_env_copies: bool = False
  # Whether the rule works with continuous actions (a Gaussian policy).
  supports_continuous_actions: bool = False
  # Why not, in one sentence, where it does not (for the refusal).
  continuous_actions_refusal: str = (
      "it reads the per-action outputs of a categorical policy"
  )
  # Network outputs that actors keep in rollouts (``behaviour_agent_out``).
  behaviour_outputs: tuple[str, ...] = ("logits",)
  # Whether the losses and ``meta_regularizer`` read per-action outputs only
  # at the taken actions (required with a continuous policy, whose network
  # computes them there only); the agent then backpropagates through the
  # action model for those actions alone.
  model_losses_read_taken_actions: bool = False
  # The rule's hyper-parameters and their defaults: every coefficient of its
  # losses (and of its meta-regularisers), discounts, ...
  default_hyper_params: Mapping[str, float] = immutabledict.immutabledict()
  hyper_params: Mapping[str, float] = immutabledict.immutabledict()
  # Whether the targets and losses let gradients reach traced hyper-parameters
  # (``with_hyper_params``; ``loss_target``).
  hyper_param_gradients: bool = False
  # Whether the agent tunes the rule's hyper-parameters online by
  # meta-gradients (``disco.update_rules.self_tuning``).
  tunes_hyper_params: bool = False

  def __init__(self, hyper_params: Mapping[str, float] | None = None):
    """Sets ``self.hyper_params``: ``default_hyper_params`` updated by
    ``hyper_params``.

    Raises:
      ValueError: for a name ``default_hyper_params`` does not have.
    """
    given = dict(hyper_params or {})
    unknown = sorted(set(given) - set(self.default_hyper_params))
    if unknown:
      raise ValueError(
          f"Unknown hyper-parameter(s) {unknown} for rule "
          f"{type(self).__name__}; valid: "
          f"{', '.join(sorted(self.default_hyper_params)) or 'none'}."
      )
    self.hyper_params = {**self.default_hyper_params, **given}

  def with_hyper_params(self, values: Mapping[str, Any]) -> UpdateRule:
    """A shallow copy whose ``hyper_params`` are ``values`` over this rule's
    (scalars, traced ones included) and whose targets let gradients reach them
    (``hyper_param_gradients``). The rule must not branch in Python on those
    it is given."""
    rule = copy.copy(self)
    rule.hyper_params = {**self.hyper_params, **values}
    rule.hyper_param_gradients = True
    return rule

  def loss_target(self, x: types.ArrayTree) -> types.ArrayTree:
    """``x``, a target of the losses, stop-gradiented; with
    ``hyper_param_gradients`` kept differentiable so that gradients reach the
    hyper-parameters it was computed with (the agent's learner step computes
    targets outside its gradient with respect to the network, so none reaches
    the network either way)."""
    return x if self.hyper_param_gradients else jax.lax.stop_gradient(x)

  @abc.abstractmethod
  def flat_output_spec(self, num_actions: int) -> Specs:
    """Per-state outputs: name -> spec of ``[*shape]`` for one state."""

  def model_output_spec(self, num_actions: int) -> Specs:
    """Per-action outputs: name -> spec of one action's prediction."""
    del num_actions
    return {}

  def agent_output_spec(self, num_actions: int) -> Specs:
    """All agent outputs for one state (per-action ones lead with ``A``)."""
    spec = dict(self.flat_output_spec(num_actions))
    for key, s in self.model_output_spec(num_actions).items():
      if key in spec:
        raise ValueError(f"Output {key!r} is declared flat and per-action.")
      spec[key] = types.ArraySpec((num_actions,) + tuple(s.shape), s.dtype)
    return spec

  def for_policy(self, policy: policies.Policy) -> UpdateRule:
    """This rule for an agent whose actions follow ``policy`` (the Agent calls
    it once, before building its network and state); a rule whose outputs or
    state depend on the kind of actions returns a copy set up for them. Default:
    itself."""
    del policy
    return self

  def check_env(self, env: Any) -> None:
    """Raises ValueError, naming the fix, where the rule cannot act in the
    batched ``env`` (called once by the training loop). Default: accept."""
    del env

  def init_meta_params(self, rng: jax.Array) -> types.MetaParams:
    """Meta-parameters (empty for hand-designed rules)."""
    del rng
    return {}

  def meta_param_shapes(self) -> types.MetaParams:
    """``init_meta_params``'s output as ``jax.ShapeDtypeStruct`` leaves (traced
    only)."""
    return jax.eval_shape(lambda: self.init_meta_params(jax.random.PRNGKey(0)))

  def random_meta_params(self, seed: int = 0) -> types.MetaParams:
    """``init_meta_params(PRNGKey(seed))`` in one compiled program, traced once
    (none compiled for a rule without meta-parameters)."""
    (key_seed,) = ops.prng_seeds([seed])
    traced = jax.jit(
        lambda s: self.init_meta_params(jax.random.PRNGKey(s))
    ).trace(key_seed)
    if not jax.tree.leaves(traced.out_info):
      return traced.out_info
    return traced.lower().compile()(key_seed)

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    """The rule's state at the start of an agent's lifetime (``{}`` if
    stateless).

    Args:
      rng: random key.
      params: the agent's initial network parameters (e.g. for a target
        network).
    """
    del rng, params
    return {}

  @abc.abstractmethod
  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: LearnerContext
  ) -> tuple[MetaOut, types.RuleState]:
    """Computes the loss targets for a rollout and the next rule state.

    Args:
      inputs: the rollout (``[T+1, B]`` states, ``[T, B]`` transitions).
      context: the rule's state and meta-parameters, the agent's parameters
        and network, a random key.

    Returns:
      ``(meta_out, new_rule_state)``; ``meta_out`` is passed to the losses.
    """

  @abc.abstractmethod
  def agent_loss(
      self, inputs: types.UpdateRuleInputs, meta_out: MetaOut, backprop: bool
  ) -> LossAndLogs:
    """Per-transition loss ``[T, B]`` that may carry meta-gradients (only
    with ``backprop``)."""

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: MetaOut
  ) -> LossAndLogs:
    """Per-transition loss ``[T, B]`` that never carries meta-gradients."""
    del meta_out
    return jnp.zeros_like(inputs.rewards), {}

  def start_lifetime(
      self, rule_state: types.RuleState, num_updates: jax.Array | int
  ) -> types.RuleState:
    """The rule state of an agent about to live ``num_updates`` learner updates
    (a meta-training agent's drawn lifetime, or an evaluation's budget).
    Default: unchanged."""
    del num_updates
    return rule_state

  def meta_regularizer(
      self,
      train_meta_out: MetaOut,
      valid_out: types.AgentOuts,
      actions: jax.Array,
  ) -> tuple[jax.Array, types.Logs]:
    """Rule-specific terms of the outer loss: ``(scalar, logs)`` from
    ``meta_out`` of every inner step (``[N, T, B, ...]``), the updated agent's
    outputs on the validation rollout (``[T'+1, B, ...]``) and its ``[T', B]``
    actions."""
    del train_meta_out, valid_out, actions
    return jnp.zeros([]), {}

  def select_action(
      self, rng: jax.Array, agent_out: types.AgentOuts, context: ActingContext
  ) -> tuple[jax.Array, types.ArrayTree]:
    """Chooses ``[B]`` actions; returns ``(actions, extras)`` where extras
    are stored in the rollout (``ActorTimestep.extras``)."""
    policy = context.policy or policies.Categorical(
        agent_out["logits"].shape[-1]
    )
    return policy.sample(rng, agent_out["logits"]), None


class MovingAverageRule(UpdateRule):
  """A rule normalising advantages (and TD errors) by moving averages in its
  state (``adv_ema_state``, ``td_ema_state``).

  Args:
    hyper_params: as ``UpdateRule``'s; ``discount_factor`` and ``td_lambda`` set
      ``normalized_returns``.
    moving_average_decay: decay of the moving averages, in [0, 1].
    moving_average_eps: epsilon added to their standard deviation, >= 0.

  Raises:
    ValueError: a decay or epsilon out of range.
  """

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None,
      moving_average_decay: float,
      moving_average_eps: float,
  ):
    if not checks.is_finite_number(moving_average_decay) or not (
        0 <= moving_average_decay <= 1
    ):
      raise ValueError(
          f"moving_average_decay={moving_average_decay!r} must be a number "
          "in [0, 1]."
      )
    if (
        not checks.is_finite_number(moving_average_eps)
        or moving_average_eps < 0
    ):
      raise ValueError(
          f"moving_average_eps={moving_average_eps!r} must be a finite number "
          ">= 0."
      )
    super().__init__(hyper_params)
    self._ema_decay = moving_average_decay
    self._ema_eps = moving_average_eps

  def normalized_returns(
      self,
      inputs: types.UpdateRuleInputs,
      context: LearnerContext,
      head: categorical.ValueHead,
      *,
      normalize_q_td: bool = False,
      **estimate_kwargs,
  ) -> tuple[types.ValueOuts, types.RuleState]:
    """``(outs, new_rule_state)``: V-trace or Retrace (``returns.estimate_on``,
    with ``estimate_kwargs``) with the rule's ``discount_factor`` and
    ``td_lambda``, normalised by the moving averages of ``context.rule_state``
    (``q_td`` rather than ``td`` with ``normalize_q_td``), which it updates;
    ``head`` encodes the values."""
    outs = returns.estimate_on(
        inputs,
        head,
        discount=self.hyper_params["discount_factor"],
        lambda_=self.hyper_params["td_lambda"],
        hyper_param_gradients=self.hyper_param_gradients,
        **estimate_kwargs,
    )
    rule_state = context.rule_state
    outs, adv_ema_state, td_ema_state = returns.normalize(
        outs,
        rule_state["adv_ema_state"],
        rule_state.get("td_ema_state"),
        normalize_q_td=normalize_q_td,
        ema_decay=self._ema_decay,
        ema_eps=self._ema_eps,
        axis_name=context.axis_name,
    )
    new_state = dict(rule_state, adv_ema_state=adv_ema_state)
    if td_ema_state is not None:
      new_state["td_ema_state"] = td_ema_state
    return outs, new_state


# Lifetime (agent updates) of an agent whose rule was never told one: GROOVE's
# longest meta-training lifetime (all_vrandlife, 5 * 50).
DEFAULT_LIFETIME = 250


class LifetimeConditioning:
  """Mixin for rules whose meta-network may read the agent's lifetime (TA-LPG;
  Jackson et al. 2024): it sets ``self.lifetime_conditioning`` and calls
  ``_set_default_lifetime``; the state then holds the update count ``n`` and the
  lifetime ``N`` (``start_lifetime``), ``lifetime_inputs`` gives ``n / N`` and
  ``log N``, ``counted`` advances ``n``."""

  lifetime_conditioning: bool

  def _set_default_lifetime(self, default_lifetime: int) -> None:
    if int(default_lifetime) < 1:
      raise ValueError(
          f"default_lifetime must be >= 1 agent update, got {default_lifetime}."
      )
    self._default_lifetime = int(default_lifetime)

  def initial_lifetime_state(self) -> types.RuleState:
    """The lifetime entries of a fresh rule state (none unless conditioning)."""
    return self.start_lifetime({}, self._default_lifetime)

  def start_lifetime(
      self, rule_state: types.RuleState, num_updates: jax.Array | int
  ) -> types.RuleState:
    if not self.lifetime_conditioning:
      return rule_state
    return dict(
        rule_state,
        num_updates=jnp.zeros([], jnp.int32),
        lifetime=jnp.asarray(num_updates, jnp.float32),
    )

  def lifetime_inputs(self, rule_state: types.RuleState) -> jax.Array:
    """``[2]``: the agent's progress ``n / N`` and ``log N``."""
    lifetime = jnp.maximum(rule_state["lifetime"], 1.0)
    progress = rule_state["num_updates"].astype(jnp.float32) / lifetime
    return jnp.stack([progress, jnp.log(lifetime)])

  @staticmethod
  def counted(rule_state: types.RuleState) -> types.RuleState:
    """``rule_state`` one agent update later."""
    return dict(rule_state, num_updates=rule_state["num_updates"] + 1)
