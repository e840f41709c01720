"""Self-tuning rules: a base rule whose differentiable hyper-parameters tune
themselves online by meta-gradients (Xu, van Hasselt and Silver 2018; STAC,
Zahavy et al. 2020).

The tuned hyper-parameters ``eta`` (``tuned``) are meta-parameters held in the
learner's rule state as unconstrained ``x``, each within its ``bounds``
``(lo, hi)``: ``eta = lo + (hi - lo) * sigmoid(x)``, starting at the rule's
hyper-parameter value. A learner step of an agent whose rule
``tunes_hyper_params`` (``disco.agent.Agent.learner_update``):

1. updates the network on the inner loss, the base rule's with ``eta``, by the
   agent's optimiser: ``params' = params + u(grad L(params; eta))``;
2. evaluates the outer loss, the base rule's with the fixed reference values
   ``outer_hyper_params``, at ``params'`` on the same batch, its targets
   constants;
3. differentiates it with respect to ``x`` through step 1 (the optimiser's
   step included; the inner loss's targets are differentiable in ``eta``);
4. moves ``x`` by Adam (``meta_learning_rate``) on that meta-gradient,

and keeps step 1's parameters and optimiser state. ``step_size`` (a factor on
the optimiser's step, ``params' = params + step_size * u(...)``; initially 1)
is tunable beside the base rule's hyper-parameters: it tunes the agent's
learning rate, for an optimiser whose step is linear in it.

With ``meta_gradient="linearized"`` step 2 takes the outer loss's gradient at
``params`` instead of ``params'`` (its first-order expansion around ``params``
is differentiated), which shares step 1's forward pass: a cheaper step, exact
as the update's size goes to 0. With ``meta_gradient="bmg"`` (bootstrapped meta-gradients, Flennerhag et al.
2022) step 2's objective is instead a distance ``mu(target, params')`` to a
constant target: from ``params'``, ``bmg_target_steps - 1`` further updates of
the inner rule, then one of the agent's optimiser on the outer loss's gradient,
on the same batch. A subclass names its base rule (``class STAC(SelfTuning,
base_rule=ActorCritic)``) and its defaults; its factory takes the base rule's
arguments too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
import dataclasses
import inspect
import math
from typing import Any, ClassVar

import chex
import immutabledict
import jax
import jax.numpy as jnp
import optax

from disco import checks
from disco import policies
from disco import types
from disco.update_rules import actor_critic
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import base
from disco.update_rules import ppo

# Adam's learning rate on the unconstrained values: STAC's (approximately).
STAC_META_LEARNING_RATE = 1e-3
# The rule state's parts: the base rule's state and the tuning state.
BASE = "base"
TUNING = "tuning"
# Logged per learner step for each tuned hyper-parameter: its value and the
# meta-gradient with respect to its unconstrained ``x``, ``<prefix><name>``.
LOG_PREFIX = "hyper_params/"
GRADIENT_PREFIX = "meta_gradient/"
# ``meta_gradient``: the outer loss's gradient at the updated parameters, at
# the current ones (the outer loss linearised there), or a bootstrapped
# target's distance's (BMG).
META_GRADIENTS = ("outer", "linearized", "bmg")
# ``bmg_distance``: the policies' KL over the batch's states, or the squared
# distance of the parameters.
BMG_DISTANCES = ("kl", "squared")
# The factor on the optimiser's step: a tunable hyper-parameter of every
# self-tuning rule, not of its base rule.
STEP_SIZE = "step_size"


@chex.dataclass(frozen=True)
class TuningState:
  """The tuned hyper-parameters' meta-parameters.

  Attributes:
    x: ``{name: []}`` unconstrained values.
    start: ``{name: []}`` the values of ``x`` at the start, where each
      hyper-parameter is exactly its initial value.
    adam: the meta-optimiser's state.
  """

  x: dict[str, jax.Array]
  start: dict[str, jax.Array]
  adam: optax.OptState


# ``tuned``'s default: every default-tuned hyper-parameter not starting on a
# bound.
AUTO = "auto"


def bounded(
    x: jax.Array, start: jax.Array, initial: float, low: float, high: float
) -> jax.Array:
  """``low + (high - low) * sigmoid(x)``, where ``initial`` is its value at
  ``start``: written as ``initial + (high - low) * (sigmoid(x) -
  sigmoid(start))``, so exactly ``initial`` at ``x == start``, and clipped to
  ``[low, high]`` against rounding."""
  moved = (high - low) * (jax.nn.sigmoid(x) - jax.nn.sigmoid(start))
  return jnp.clip(initial + moved, low, high)


def _without_step_size(values: Mapping[str, Any]) -> dict[str, Any]:
  """``values`` less ``STEP_SIZE``: what the base rule takes."""
  return {k: v for k, v in values.items() if k != STEP_SIZE}


def _logit(p: float) -> float:
  return math.log(p) - math.log1p(-p)


def _is_bounds_pair(value: Any) -> bool:
  return (
      isinstance(value, (list, tuple))
      and len(value) == 2
      and all(checks.is_finite_number(v) for v in value)
      and value[0] < value[1]
  )


class SelfTuning(base.UpdateRule):
  """A base rule whose hyper-parameters tune themselves (see the module).

  Args:
    hyper_params: overrides of the base rule's hyper-parameters: the fixed
      values, and the tuned ones' initial values.
    tuned: the hyper-parameters tuned (keys of ``bounds``; a tuple, or
      ``"a,b"``); ``"auto"``: every one of ``default_tuned`` except those
      whose initial value is one of its bounds (an entropy cost of 0 stays
      0).
    bounds: ``(low, high)`` of each tunable hyper-parameter; a tuned one starts
      strictly inside.
    outer_hyper_params: the outer loss's fixed values (others: those of
      ``hyper_params``).
    meta_learning_rate: Adam's learning rate on the tuned hyper-parameters'
      unconstrained values (0: they stay at their initial values; None: the
      rule's own default).
    meta_gradient: ``"outer"``: the outer loss's gradient at the updated
      parameters; ``"linearized"``: at the current parameters, the outer
      loss's first-order expansion there (``outer(params) + <grad
      outer(params), params' - params>``) differentiated instead, which
      shares the update's forward pass; ``"bmg"``: the gradient of the
      distance to a bootstrapped target.
    bmg_target_steps: with ``"bmg"``, the target's updates ``L >= 1`` from
      the updated parameters: ``L - 1`` of the inner rule, then one on the
      outer loss.
    bmg_distance: with ``"bmg"``, ``"kl"`` (``KL(target policy || updated
      policy)`` averaged over the batch's states) or ``"squared"`` (sum of
      squared parameter differences).
  """

  base_rule: ClassVar[type[base.UpdateRule]]
  default_tuned: ClassVar[tuple[str, ...]] = ()
  default_bounds: ClassVar[Mapping[str, tuple[float, float]]] = {}
  default_outer_hyper_params: ClassVar[Mapping[str, float]] = {}
  default_meta_learning_rate: ClassVar[float] = STAC_META_LEARNING_RATE
  tunes_hyper_params = True

  def __init_subclass__(
      cls, base_rule: type[base.UpdateRule] | None = None, **kwargs: Any
  ):
    super().__init_subclass__(**kwargs)
    if base_rule is None:
      return
    cls.base_rule = base_rule
    cls.default_hyper_params = immutabledict.immutabledict(
        {**base_rule.default_hyper_params, STEP_SIZE: 1.0}
    )
    cls.supports_continuous_actions = base_rule.supports_continuous_actions
    cls.continuous_actions_refusal = base_rule.continuous_actions_refusal
    cls.__signature__ = _factory_signature(cls)
    cls.__doc__ = _with_base_args(cls.__doc__, base_rule)

  def __init__(
      self,
      hyper_params: Mapping[str, float] | None = None,
      *,
      tuned: Sequence[str] | str = "auto",
      bounds: Mapping[str, Sequence[float]] | None = None,
      outer_hyper_params: Mapping[str, float] | None = None,
      meta_learning_rate: float | None = None,
      meta_gradient: str = "outer",
      bmg_target_steps: int = 1,
      bmg_distance: str = "kl",
      **base_kwargs: Any,
  ):
    """Builds the base rule twice (inner and outer loss) and checks the
    tuning settings.

    Raises:
      ValueError: naming every bad tuning setting; TypeError: an argument
        the base rule does not take.
    """
    super().__init__(hyper_params)
    self._inner = self.base_rule(
        hyper_params=_without_step_size(self.hyper_params), **base_kwargs
    )
    bounds = {**self.default_bounds, **dict(bounds or {})}
    if tuned == AUTO:
      tuned = self.auto_tuned(self.hyper_params, bounds)
    if isinstance(tuned, str):
      tuned = [tuned]
    # "a,b" (a command line's) names two.
    tuned = [n.strip() for t in tuned for n in str(t).split(",") if n.strip()]
    outer = {
        **self.default_outer_hyper_params,
        **dict(outer_hyper_params or {}),
    }
    if meta_learning_rate is None:
      meta_learning_rate = self.default_meta_learning_rate
    problems = self._problems(tuned, bounds, outer, meta_learning_rate)
    problems += _bmg_problems(meta_gradient, bmg_target_steps, bmg_distance)
    if problems:
      raise ValueError("; ".join(problems) + ".")
    self.tuned = tuple(dict.fromkeys(tuned))
    self.bounds = {k: (float(v[0]), float(v[1])) for k, v in bounds.items()}
    self.outer_hyper_params = {k: float(v) for k, v in outer.items()}
    self.meta_learning_rate = float(meta_learning_rate)
    self.meta_gradient = meta_gradient
    self.bmg_target_steps = int(bmg_target_steps)
    self.bmg_distance = bmg_distance
    self.outer_rule = self.base_rule(
        hyper_params=_without_step_size(
            {**self.hyper_params, **self.outer_hyper_params}
        ),
        **base_kwargs,
    )
    self._meta_optimizer = optax.adam(self.meta_learning_rate)

  @classmethod
  def auto_tuned(
      cls,
      hyper_params: Mapping[str, Any],
      bounds: Mapping[str, Any] | None = None,
  ) -> list[str]:
    """What ``tuned="auto"`` tunes: ``default_tuned`` less those whose value
    in ``hyper_params`` is one of their ``bounds`` (default:
    ``default_bounds``)."""
    bounds = {**cls.default_bounds, **dict(bounds or {})}
    return [
        n
        for n in cls.default_tuned
        if not _is_bounds_pair(bounds.get(n))
        or hyper_params.get(n) not in tuple(bounds[n])
    ]

  def _problems(
      self,
      tuned: list[Any],
      bounds: Mapping[str, Any],
      outer: Mapping[str, Any],
      meta_learning_rate: Any,
  ) -> list[str]:
    """Every bad tuning setting, one phrase each."""
    tunable = ", ".join(self.default_bounds)
    problems = []
    bad = [t for t in tuned if t not in self.default_bounds]
    if bad:
      problems.append(
          f"rule_kwargs.tuned: {bad} cannot be tuned; tunable: {tunable}"
      )
    elif not tuned:
      problems.append(
          f"rule_kwargs.tuned is empty: name at least one of {tunable}"
      )
    for name in sorted(set(bounds) - set(self.default_bounds)):
      problems.append(
          f"rule_kwargs.bounds.{name}: not a tunable hyper-parameter "
          f"({tunable})"
      )
    for name, value in bounds.items():
      if name not in self.default_bounds:
        continue
      if not _is_bounds_pair(value):
        problems.append(
            f"rule_kwargs.bounds.{name}={value!r} must be a pair (low, high) "
            "of finite numbers with low < high"
        )
        continue
      low, high = agent_settings_lib.HYPER_PARAM_RANGES.get(
          name, (-math.inf, math.inf)
      )
      if value[0] < low or value[1] > high:
        problems.append(
            f"rule_kwargs.bounds.{name}={tuple(value)!r} must lie within "
            f"[{low}, {high}]"
        )
      elif name in tuned and not value[0] < self.hyper_params[name] < value[1]:
        problems.append(
            f"rule_kwargs.bounds.{name}={tuple(value)!r} must contain the "
            f"initial value hyper_params.{name}={self.hyper_params[name]!r} "
            "strictly: widen the bounds or change the value"
        )
    base_names = _without_step_size(self.hyper_params)
    unknown = sorted(set(outer) - set(base_names))
    if unknown:
      problems.append(
          f"rule_kwargs.outer_hyper_params: unknown {unknown}; valid: "
          f"{', '.join(sorted(base_names))}"
      )
    for name, value in outer.items():
      low, high = agent_settings_lib.HYPER_PARAM_RANGES.get(
          name, (-math.inf, math.inf)
      )
      if name in base_names and not (
          checks.is_finite_number(value) and low <= value <= high
      ):
        problems.append(
            f"rule_kwargs.outer_hyper_params.{name}={value!r} must be a finite "
            f"number in [{low}, {high}]"
        )
    if (
        not checks.is_finite_number(meta_learning_rate)
        or meta_learning_rate < 0
    ):
      problems.append(
          f"rule_kwargs.meta_learning_rate={meta_learning_rate!r} must be a "
          "finite number >= 0"
      )
    return problems

  # ------------------------------------------------------ the base rule ----
  @property
  def behaviour_outputs(self) -> tuple[str, ...]:
    return self._inner.behaviour_outputs

  @property
  def model_losses_read_taken_actions(self) -> bool:
    return self._inner.model_losses_read_taken_actions

  @property
  def needs_env_copies(self) -> bool:
    return self._inner.needs_env_copies

  def flat_output_spec(self, num_actions: int) -> base.Specs:
    return self._inner.flat_output_spec(num_actions)

  def model_output_spec(self, num_actions: int) -> base.Specs:
    return self._inner.model_output_spec(num_actions)

  def for_policy(self, policy: policies.Policy) -> SelfTuning:
    rule = copy.copy(self)
    rule._inner = self._inner.for_policy(policy)
    rule.outer_rule = self.outer_rule.for_policy(policy)
    return rule

  def check_env(self, env: Any) -> None:
    self._inner.check_env(env)

  # ---------------------------------------------------------- the state ----
  def initial_tuning_state(self) -> TuningState:
    """``x`` where every tuned hyper-parameter has its initial value."""
    x = {}
    for name in self.tuned:
      low, high = self.bounds[name]
      p = (self.hyper_params[name] - low) / (high - low)
      x[name] = jnp.asarray(_logit(p), jnp.float32)
    return TuningState(x=x, start=dict(x), adam=self._meta_optimizer.init(x))

  def init_rule_state(
      self, rng: jax.Array, params: types.Params
  ) -> types.RuleState:
    """``{"base": the base rule's state, "tuning": TuningState}``."""
    return {
        BASE: self._inner.init_rule_state(rng, params),
        TUNING: self.initial_tuning_state(),
    }

  def start_lifetime(
      self, rule_state: types.RuleState, num_updates: jax.Array | int
  ) -> types.RuleState:
    base_state = self._inner.start_lifetime(rule_state[BASE], num_updates)
    return dict(rule_state, **{BASE: base_state})

  def values(self, rule_state: types.RuleState) -> dict[str, jax.Array]:
    """The tuned hyper-parameters' current values ``{name: []}``."""
    tuning = rule_state[TUNING]
    return {
        name: bounded(
            tuning.x[name],
            tuning.start[name],
            self.hyper_params[name],
            *self.bounds[name],
        )
        for name in self.tuned
    }

  def inner_rule(self, values: Mapping[str, jax.Array]) -> base.UpdateRule:
    """The base rule with the tuned hyper-parameters at ``values``."""
    return self._inner.with_hyper_params(_without_step_size(values))

  def step_size(self, rule_state: types.RuleState) -> jax.Array | None:
    """The factor on the optimiser's step, ``[]``: None when it is not
    tuned (the step is the optimiser's own)."""
    if STEP_SIZE not in self.tuned:
      return None
    return self.values(rule_state)[STEP_SIZE]

  # The agent's meta-gradient step (``disco.agent.Agent``) reads and writes
  # ``x`` through these.
  def meta_variables(self, rule_state: types.RuleState) -> dict[str, jax.Array]:
    """What the meta-gradient is taken with respect to: ``x``."""
    return rule_state[TUNING].x

  def with_meta_variables(
      self, rule_state: types.RuleState, x: dict[str, jax.Array]
  ) -> types.RuleState:
    return dict(rule_state, **{TUNING: rule_state[TUNING].replace(x=x)})

  def base_state(self, rule_state: types.RuleState) -> types.RuleState:
    """The base rule's part of the state (the outer loss's targets read it)."""
    return rule_state[BASE]

  def meta_update(
      self, rule_state: types.RuleState, meta_grads: dict[str, jax.Array]
  ) -> tuple[types.RuleState, types.Logs]:
    """``rule_state`` with ``x`` moved by Adam on ``meta_grads``; logs the
    values the step used (``LOG_PREFIX``) and the meta-gradients
    (``GRADIENT_PREFIX``)."""
    tuning = rule_state[TUNING]
    logs = {LOG_PREFIX + k: v for k, v in self.values(rule_state).items()}
    logs.update({GRADIENT_PREFIX + k: g for k, g in meta_grads.items()})
    updates, adam = self._meta_optimizer.update(
        meta_grads, tuning.adam, tuning.x
    )
    tuning = tuning.replace(x=optax.apply_updates(tuning.x, updates), adam=adam)
    return dict(rule_state, **{TUNING: tuning}), logs

  # ---------------------------------------------------------- the losses ----
  def unroll_meta_net(
      self, inputs: types.UpdateRuleInputs, context: base.LearnerContext
  ) -> tuple[base.MetaOut, types.RuleState]:
    """The base rule's targets with the current values (differentiable in
    them), and those values: ``{"base": ..., "hyper_params": ...}``."""
    values = self.values(context.rule_state)
    meta_out, base_state = self.inner_rule(values).unroll_meta_net(
        inputs,
        dataclasses.replace(context, rule_state=context.rule_state[BASE]),
    )
    new_state = dict(context.rule_state, **{BASE: base_state})
    return {BASE: meta_out, "hyper_params": values}, new_state

  def agent_loss(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: base.MetaOut,
      backprop: bool,
  ) -> base.LossAndLogs:
    rule = self.inner_rule(meta_out["hyper_params"])
    return rule.agent_loss(inputs, meta_out[BASE], backprop)

  def agent_loss_no_meta(
      self, inputs: types.UpdateRuleInputs, meta_out: base.MetaOut
  ) -> base.LossAndLogs:
    rule = self.inner_rule(meta_out["hyper_params"])
    return rule.agent_loss_no_meta(inputs, meta_out[BASE])

  def select_action(
      self,
      rng: jax.Array,
      agent_out: types.AgentOuts,
      context: base.ActingContext,
  ) -> tuple[jax.Array, types.ArrayTree]:
    """The base rule's, with the current values."""
    if context.rule_state is None:
      return self._inner.select_action(rng, agent_out, context)
    rule = self.inner_rule(self.values(context.rule_state))
    context = dataclasses.replace(context, rule_state=context.rule_state[BASE])
    return rule.select_action(rng, agent_out, context)


def _bmg_problems(
    meta_gradient: Any, bmg_target_steps: Any, bmg_distance: Any
) -> list[str]:
  """Every bad meta-gradient setting, one phrase each."""
  problems = []
  if meta_gradient not in META_GRADIENTS:
    problems.append(
        f"rule_kwargs.meta_gradient={meta_gradient!r} is unknown: use one of "
        f"{', '.join(META_GRADIENTS)}"
    )
  if (
      isinstance(bmg_target_steps, bool)
      or not isinstance(bmg_target_steps, int)
      or bmg_target_steps < 1
  ):
    problems.append(
        f"rule_kwargs.bmg_target_steps={bmg_target_steps!r} must be an "
        "integer >= 1"
    )
  if bmg_distance not in BMG_DISTANCES:
    problems.append(
        f"rule_kwargs.bmg_distance={bmg_distance!r} is unknown: use one of "
        f"{', '.join(BMG_DISTANCES)}"
    )
  return problems


def _factory_signature(cls: type[SelfTuning]) -> inspect.Signature:
  """``cls``'s signature as a factory: ``hyper_params``, the base rule's
  arguments, then the tuning settings with ``cls``'s defaults."""
  keyword = inspect.Parameter.KEYWORD_ONLY
  params = [
      inspect.Parameter("hyper_params", keyword, default=None),
      *(
          p.replace(kind=keyword)
          for name, p in inspect.signature(cls.base_rule).parameters.items()
          if name != "hyper_params"
      ),
      inspect.Parameter("tuned", keyword, default=AUTO),
      inspect.Parameter("bounds", keyword, default=dict(cls.default_bounds)),
      inspect.Parameter(
          "outer_hyper_params",
          keyword,
          default=dict(cls.default_outer_hyper_params),
      ),
      inspect.Parameter(
          "meta_learning_rate", keyword, default=cls.default_meta_learning_rate
      ),
      inspect.Parameter("meta_gradient", keyword, default="outer"),
      inspect.Parameter("bmg_target_steps", keyword, default=1),
      inspect.Parameter("bmg_distance", keyword, default="kl"),
  ]
  return inspect.Signature(params)


def _args_entries(cls: type[Any], skip: str | None = None) -> list[str]:
  """The entry lines of the ``Args:`` section of ``cls``'s docstring, less
  argument ``skip``'s."""
  lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
  if "Args:" not in lines:
    return []
  entries, skipping = [], False
  for line in lines[lines.index("Args:") + 1 :]:
    if not line.startswith(" "):
      break
    if not line.startswith("    "):  # a new argument
      skipping = line.strip().startswith(f"{skip}:")
    if not skipping:
      entries.append(line)
  return entries


def _with_base_args(doc: str | None, base_rule: type[base.UpdateRule]) -> str:
  """``doc`` followed by an ``Args:`` section: ``SelfTuning``'s arguments,
  then the base rule's other than ``hyper_params``."""
  entries = _args_entries(SelfTuning) + _args_entries(base_rule, "hyper_params")
  return "\n".join([inspect.cleandoc(doc or ""), "", "Args:", *entries])


# ``step_size``'s bounds in every self-tuning rule: from 0 to 10 times the
# agent's learning rate.
STEP_SIZE_BOUNDS = (0.0, 10.0)

# STAC's outer loss (Zahavy et al. 2020, hyper-parameter table, as we recall
# it: approximate): discount 0.995, lambda 1, value 0.25, policy 1, entropy
# 0.01.
STAC_OUTER_HYPER_PARAMS = dict(
    discount_factor=0.995,
    td_lambda=1.0,
    value_cost=0.25,
    pg_cost=1.0,
    entropy_cost=0.01,
)


class STAC(SelfTuning, base_rule=actor_critic.ActorCritic):
  """Self-tuning actor-critic (STAC; Zahavy et al. 2020): the actor-critic
  whose discount, lambda, loss coefficients and step size tune themselves
  online.
  """

  default_tuned = (
      "discount_factor",
      "td_lambda",
      "entropy_cost",
      "value_cost",
      "pg_cost",
      STEP_SIZE,
  )
  # Discount and lambda over their natural range; coefficients in [0, 10 x
  # their default], so that a step of x changes them about proportionally.
  default_bounds = {
      "discount_factor": (0.0, 1.0),
      "td_lambda": (0.0, 1.0),
      "entropy_cost": (0.0, 2.0),
      "value_cost": (0.0, 5.0),
      "pg_cost": (0.0, 10.0),
      STEP_SIZE: STEP_SIZE_BOUNDS,
  }
  default_outer_hyper_params = STAC_OUTER_HYPER_PARAMS


class SelfTuningPPO(SelfTuning, base_rule=ppo.PPO):
  """PPO whose discount, GAE lambda, loss coefficients and step size tune
  themselves online, one meta-gradient step per minibatch learner step.
  """

  default_tuned = (
      "discount_factor",
      "gae_lambda",
      "entropy_cost",
      "value_cost",
      STEP_SIZE,
  )
  default_bounds = {
      "discount_factor": (0.0, 1.0),
      "gae_lambda": (0.0, 1.0),
      "entropy_cost": (0.0, 0.1),
      "value_cost": (0.0, 5.0),
      "clip_epsilon": (0.0, 1.0),
      STEP_SIZE: STEP_SIZE_BOUNDS,
  }
  # Xu et al.'s reference returns (discount 0.99, lambda 1); PPO's own
  # coefficients.
  default_outer_hyper_params = dict(
      discount_factor=0.99, gae_lambda=1.0, entropy_cost=0.01, value_cost=0.5
  )
  # Three times STAC's, chosen on the development environments at 100k env
  # steps, where STAC's moves the step size too little in one lifetime.
  default_meta_learning_rate = 3e-3
