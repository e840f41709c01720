"""The update-rule interface consumed by ``disco.agent.Agent``.

A rule
  * is configured when it is built: its settings and its hyper-parameters
    (loss coefficients, discounts, ...: ``self.hyper_params``, its class's
    ``default_hyper_params`` updated by the ``hyper_params`` it is given, see
    ``UpdateRule.__init__``);
  * declares what the agent network must output: flat per-state outputs
    (``flat_output_spec``, ``[B, *shape]``) and per-action outputs from the
    action-conditional model (``model_output_spec``, ``[B, A, *shape]``);
  * owns its meta-parameters (``init_meta_params``; hand-designed rules have
    none) and its state (``init_rule_state``: EMA statistics, target
    parameters, dual variables, a meta-RNN state, ...);
  * turns a rollout into loss targets (``unroll_meta_net``) and the targets
    into per-transition losses ``[T, B]`` in two parts: ``agent_loss`` may
    carry meta-gradients (``backprop=True``) and ``agent_loss_no_meta`` never
    does (e.g. value losses);
  * may choose actions itself (``select_action``; the default samples the
    policy, ``disco.policies``, that ``logits`` parameterise). Rules that search over copies of the environment state set
    ``needs_env_copies = True``;
  * may add terms to the outer loss of meta-training (``meta_regularizer``)
    and read the lifetime of its agent (``start_lifetime``);
  * names the network outputs that rollouts keep for it
    (``behaviour_outputs``, by default only ``logits``);
  * says whether it works with continuous actions
    (``supports_continuous_actions``): a rule that does reads the policy only
    through ``inputs.action_policy`` (log-probabilities, entropies, KLs), so
    ``logits`` may be a categorical's or a Gaussian's parameters; the
    ``num_actions`` its output specs get is then the size ``P`` of those
    parameters. With a continuous policy the per-action outputs
    (``model_output_spec``) are computed at given actions by an action-input
    head (``disco.networks.agent_nets``); a rule whose outputs or state
    depend on the kind of actions is set up for the agent's policy by
    ``for_policy``.

The Agent never branches on which rule it holds. A learner step:
``meta_out, new_rule_state = unroll_meta_net(inputs, context)`` once, then the gradient of ``agent_loss + agent_loss_no_meta`` with respect
to the agent parameters.

Rules are registered by name in ``disco.update_rules.registry``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
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
  """What a rule may use to choose actions beyond the network's outputs.

  Attributes:
    params: the acting network's parameters.
    apply_fn: ``(params, observations [B, ...]) -> agent outputs [B, ...]``.
    rule_state: the rule's state (may be None when acting without a learner).
    env: the batched environment (only given to rules with
      ``needs_env_copies``; it is jittable then).
    env_state: the environment state the observation came from.
    policy: the action distribution of ``logits`` (None: categorical).
  """

  params: types.Params
  apply_fn: Callable[..., types.AgentOuts]
  rule_state: types.RuleState | None = None
  env: Any = None
  env_state: Any = None
  policy: policies.Policy | None = None


@dataclasses.dataclass(frozen=True)
class LearnerContext:
  """What a rule may use to compute its targets beyond the rollout.

  Attributes:
    meta_params: the rule's meta-parameters (``{}`` for hand-designed rules).
    params: the agent parameters before this update.
    rule_state: the rule's state.
    unroll_fn: the agent network over ``[T+1, B, ...]`` observations (e.g. to
      run a target network).
    rng: random key.
    axis_name: named axis to average statistics over, if any.
  """

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
  # Whether the rule works with continuous actions (a Gaussian policy): it
  # reads the policy only through ``inputs.action_policy``. Rules whose
  # meta-networks read per-action outputs of a categorical policy do not.
  supports_continuous_actions: bool = False
  # Why not, in one sentence, where it does not (for the refusal).
  continuous_actions_refusal: str = (
      "it reads the per-action outputs of a categorical policy"
  )
  # Network outputs that actors keep in rollouts (``behaviour_agent_out``).
  # Keeping only what the rule reads keeps replays small and lets XLA drop
  # the unused heads from the acting step.
  behaviour_outputs: tuple[str, ...] = ("logits",)
  # Whether ``agent_loss``, ``agent_loss_no_meta`` and ``meta_regularizer``
  # (its validation outputs) read per-action (``model_output_spec``) outputs
  # only at the taken actions; the agent then backpropagates through the
  # action model for those actions alone where it can. With a continuous
  # policy the network computes those outputs at the taken actions only
  # (they have no per-action table), so a rule reading them needs this.
  model_losses_read_taken_actions: bool = False
  # The rule's hyper-parameters and their defaults: every coefficient of its
  # losses (and of its meta-regularisers), discounts, ...
  default_hyper_params: Mapping[str, float] = immutabledict.immutabledict()
  hyper_params: Mapping[str, float] = immutabledict.immutabledict()

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
    """This rule for an agent whose actions follow ``policy``; the Agent
    calls it once, before it builds its network and rule state. A rule whose
    outputs or state depend on the kind of actions (MPO's critic and duals)
    returns a copy set up for them; the default is the rule itself."""
    del policy
    return self

  def check_env(self, env: Any) -> None:
    """Raises ValueError, naming the fix, where the rule cannot act in
    ``env`` (a batched environment); the training loop calls it once when
    it is built. The default accepts every environment."""
    del env

  def init_meta_params(self, rng: jax.Array) -> types.MetaParams:
    """Meta-parameters (empty for hand-designed rules)."""
    del rng
    return {}

  def meta_param_shapes(self) -> types.MetaParams:
    """``init_meta_params``'s output as ``jax.ShapeDtypeStruct`` leaves
    (traced only: nothing is computed or compiled)."""
    return jax.eval_shape(lambda: self.init_meta_params(jax.random.PRNGKey(0)))

  def random_meta_params(self, seed: int = 0) -> types.MetaParams:
    """``init_meta_params(PRNGKey(seed))``, computed by one compiled program
    (none for a rule without meta-parameters)."""
    shapes = self.meta_param_shapes()
    if not jax.tree.leaves(shapes):
      return shapes
    (key_seed,) = ops.prng_seeds([seed])
    return jax.jit(lambda s: self.init_meta_params(jax.random.PRNGKey(s)))(
        key_seed
    )

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    """The rule's state at the start of an agent's lifetime (empty for a
    stateless rule).

    Args:
      rng: random key.
      params: the agent's initial network parameters (e.g. to start a target
        network from).
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
    """The rule state of an agent about to live ``num_updates`` learner
    updates (a meta-training agent's drawn lifetime, or an evaluation's
    budget). Rules conditioned on the lifetime (TA-LPG) record it; the
    default ignores it.
    """
    del num_updates
    return rule_state

  def meta_regularizer(
      self,
      train_meta_out: MetaOut,
      valid_out: types.AgentOuts,
      actions: jax.Array,
  ) -> tuple[jax.Array, types.Logs]:
    """Rule-specific terms of the outer (meta) loss: the one hook by which
    any rule adds to the meta-objective (the meta-trainer adds the scalar
    to its policy-gradient loss and logs the logs; it never branches on the
    rule).

    Args:
      train_meta_out: ``meta_out`` of every inner step, ``[N, T, B, ...]``.
      valid_out: the updated agent's outputs on the validation rollout
        ``[T'+1, B, ...]``.
      actions: ``[T', B]`` actions of the validation transitions.

    Returns:
      A scalar added to the outer loss, and logs.
    """
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
  """A rule that normalises its advantages (and TD errors) with moving
  averages kept in its state (``adv_ema_state``, optionally
  ``td_ema_state``).

  Args:
    hyper_params: as ``UpdateRule``; ``discount_factor`` and ``td_lambda``
      set the returns of ``normalized_returns``.
    moving_average_decay: decay of the moving averages, in [0, 1].
    moving_average_eps: epsilon added to their standard deviation, >= 0.

  Raises:
    ValueError: a decay or epsilon out of range (or not a finite number).
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
    """V-trace or Retrace (``returns.estimate_on``) on ``inputs`` with the
    rule's ``discount_factor`` and ``td_lambda``, normalised
    (``returns.normalize``) with the moving averages of ``context.rule_state``.

    Args:
      inputs: the rule's inputs.
      context: the learner step's context.
      head: how the value heads encode values.
      normalize_q_td: normalise ``q_td`` rather than ``td``.
      **estimate_kwargs: ``value_key``, ``q_key`` and ``target_out`` of
        ``returns.estimate_on``.

    Returns:
      ``(outs, new_rule_state)``: the rule state with updated moving averages.
    """
    outs = returns.estimate_on(
        inputs,
        head,
        discount=self.hyper_params["discount_factor"],
        lambda_=self.hyper_params["td_lambda"],
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
  """Mixin for rules whose meta-network may read the agent's lifetime
  (TA-LPG; Jackson et al. 2024).

  A rule that mixes it in sets ``self.lifetime_conditioning`` and calls
  ``_set_default_lifetime``. When conditioning, its state counts the agent's
  updates ``n`` (``num_updates``) and holds its lifetime ``N`` in updates
  (``lifetime``: meta-training draws it, evaluation passes its budget,
  through ``start_lifetime``); ``lifetime_inputs`` gives the meta-network
  ``n / N`` and ``log N``, and ``counted`` advances ``n`` by one update.
  """

  lifetime_conditioning: bool

  def _set_default_lifetime(self, default_lifetime: int) -> None:
    if int(default_lifetime) < 1:
      raise ValueError(
          f"default_lifetime must be >= 1 agent update, got {default_lifetime}."
      )
    self._default_lifetime = int(default_lifetime)

  def initial_lifetime_state(self) -> types.RuleState:
    """The lifetime entries of a fresh rule state (none unless
    conditioning): a lifetime of ``default_lifetime`` updates."""
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
