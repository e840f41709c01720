"""One meta-step of any estimator: the compiled program's outline
(``MetaStepProgram``).

An estimator fills in, in order: ``_step_keys`` (from the loop key);
``_members`` (the members' meta-parameters: backprop's own, ES's and PES's
perturbed copies); ``_group_step`` (one group's inner updates, vmapped over this
device's members, giving its weighted share of the estimate, new agents and
logs); ``_combine`` (default: the sum of the shares); ``_update`` (default: the
meta-optimiser's step, skipped when not finite). Agents are sharded over a 1-D
device mesh (``AXIS``), the rest of ``MetaTrainState`` replicated; logs are
named ``<group>/<name>``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

import chex
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax

from disco import agent as agent_lib
from disco import ops
from disco import program_cache
from disco import types
from disco.environments import base as env_base
from disco.meta import divergence
from disco.meta import keys as keys_lib
from disco.meta import level_samplers
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import value_function
from disco.training import acting

AXIS = "devices"


@dataclasses.dataclass(frozen=True)
class AgentGroup:
  """Agents sharing an environment setting.

  Attributes:
    name: a label for logs (e.g. ``catch-5x5``).
    env: the batched jittable environment of ONE agent.
    agent: the group's agent (rule, network, optimiser).
    value_fn: the group's meta-training value function.
    num_agents: agents in this group over all devices.
    weight: the group's share of the meta-gradient, normalised over groups
      (None: ``num_agents``).
    level_sampler: draws each lifetime's level (None: the environment's resets);
      needs lifetimes.
    reference_agent: GROOVE's reference agent, trained beside every agent on its
      level.
  """

  name: str
  env: env_base.Environment
  agent: agent_lib.Agent
  value_fn: value_function.ValueFunction
  num_agents: int
  weight: float | None = None
  level_sampler: level_samplers.LevelSampler | None = None
  reference_agent: agent_lib.Agent | None = None


@dataclasses.dataclass(frozen=True)
class PopulationConfig:
  """The population's settings.

  Attributes:
    rollout_len: actor steps per training rollout (validation: twice that).
    inner_steps: learner steps per agent and meta-step.
    lifetime_meta_steps: meta-steps per agent lifetime (0: endless).
    lifetime_updates: ``(low, high)``: each lifetime is drawn log-uniformly in
      learner updates (GROOVE's ``all_vrandlife``), told to the rule
      (``UpdateRule.start_lifetime``), and ends after the last meta-step that
      fits. None: not drawn.
    outer: outer-loss settings.
    key_scheme: ``published`` or ``per_agent`` (``disco.meta.keys``).
    replay_capacity: trajectories each agent keeps in a replay (0: none); inner
      updates then learn from ``replay_batch_size`` trajectories drawn from it,
      the validation rollout stays fresh, and a new lifetime empties it.
    replay_batch_size: trajectories per inner update from the replay (0: the
      rollouts' batch).
  """

  rollout_len: int = 16
  inner_steps: int = 2
  lifetime_meta_steps: int = 0
  lifetime_updates: tuple[int, int] | None = None
  outer: meta_gradient_lib.OuterLossConfig = meta_gradient_lib.OuterLossConfig()
  key_scheme: str = keys_lib.PUBLISHED
  replay_capacity: int = 0
  replay_batch_size: int = 0

  def __post_init__(self):
    keys_lib.check_scheme(self.key_scheme)
    if self.replay_capacity < 0 or self.replay_batch_size < 0:
      raise ValueError(
          f"replay_capacity={self.replay_capacity} and replay_batch_size="
          f"{self.replay_batch_size} must be >= 0."
      )
    if self.lifetime_updates is not None:
      low, high = self.lifetime_updates
      if not self.inner_steps <= low <= high:
        raise ValueError(
            f"lifetime_updates {self.lifetime_updates} cannot hold: a "
            f"meta-step takes inner_steps={self.inner_steps} updates, so "
            "lifetimes need inner_steps <= low <= high."
        )
      if self.lifetime_meta_steps:
        raise ValueError(
            "Set lifetime_updates or lifetime_meta_steps, not both."
        )


@chex.dataclass(frozen=True)
class MetaTrainState:
  """Everything a meta-training run needs to continue bit for bit.

  ``agents``: per group, a stacked agent state (leading axis: the group's agents
  over all devices; ``()`` for an estimator that keeps none). ``estimator``: an
  estimator's replicated state (None for backprop).
  """

  meta_params: types.MetaParams
  meta_opt_state: types.ArrayTree
  agents: tuple[Any, ...]
  step: jax.Array
  rng: jax.Array  # the loop key (``disco.meta.keys``)
  estimator: Any = None
  # Per group: its level sampler's state (None without); None: no samplers.
  levels: Any = None


def group_weights(groups: Sequence[AgentGroup]) -> dict[str, float]:
  """Each group's normalised share of the meta-gradient and of the logs:
  its ``weight``, else its number of agents, over the sum."""
  raw = {
      g.name: float(g.num_agents if g.weight is None else g.weight)
      for g in groups
  }
  total = sum(raw.values())
  return {name: w / total for name, w in raw.items()}


def check_groups(groups: Sequence[AgentGroup]) -> None:
  """Raises ``ValueError`` unless the groups can meta-train together: at
  least one, unique names, jittable environments and agents built without
  an ``axis_name``."""
  if not groups:
    raise ValueError("A population needs at least one agent group.")
  names = [g.name for g in groups]
  if len(set(names)) != len(names):
    # Logs and their weights are keyed by group name.
    raise ValueError(f"Agent group names must be unique, got {names}.")
  for g in groups:
    if not g.env.is_jittable:
      raise ValueError(
          f"Group {g.name!r}: meta-training generates rollouts on device and "
          "needs a jittable environment."
      )
    if g.agent.axis_name is not None or g.value_fn.axis_name is not None:
      raise ValueError("Population agents must be built with axis_name=None.")


def apply_meta_update(
    meta_optimizer: optax.GradientTransformation,
    meta_grads: types.MetaParams,
    meta_opt_state: Any,
    meta_params: types.MetaParams,
) -> tuple[types.MetaParams, Any, types.Logs]:
  """One meta-optimiser step, skipped (parameters and state unchanged) when the
  gradient, the update or the new state is not finite.

  Returns:
    ``(meta_params, meta_opt_state, logs)``; logs: ``meta_grad_norm``,
      ``meta_update_norm``, ``skipped_update``.
  """
  updates, new_opt_state = meta_optimizer.update(
      meta_grads, meta_opt_state, meta_params
  )
  new_meta_params = optax.apply_updates(meta_params, updates)
  apply = ops.all_finite((meta_grads, new_meta_params, new_opt_state))
  meta_params, meta_opt_state = ops.tree_where(
      apply,
      (new_meta_params, new_opt_state),
      (meta_params, meta_opt_state),
  )
  logs = {
      "meta_grad_norm": optax.tree.norm(meta_grads),
      "meta_update_norm": optax.tree.norm(updates),
      divergence.SKIPPED: jnp.logical_not(apply).astype(jnp.float32),
  }
  return meta_params, meta_opt_state, logs


def on_policy_updates(
    agent: agent_lib.Agent,
    env: env_base.Environment,
    meta_params: types.MetaParams,
    learner: types.LearnerState,
    actor: acting.ActorCarry,
    keys: Any,
    rollout_len: int,
    split_keys: bool = False,
) -> tuple[types.LearnerState, acting.ActorCarry, dict[str, jax.Array]]:
  """``[N]`` on-policy updates of one agent (``lax.scan``, no meta-gradient),
  each a ``rollout_len``-step rollout and a learner step, with per-update
  ``(acting, learning)`` ``keys`` (or, with ``split_keys``, one key each).
  Returns the learner, the actor and per-update episode statistics and mean
  ``rewards``."""

  def update(carry, key):
    learner, actor = carry
    act_key, learn_key = jax.random.split(key) if split_keys else key
    actor, rollout = acting.unroll_actor(
        agent,
        env,
        learner.params,
        learner.rule_state,
        actor,
        act_key,
        rollout_len,
    )
    actor, stats = acting.episode_stats(actor, rollout)
    learner, _ = agent.learner_step(
        learn_key, rollout, learner, meta_params, False
    )
    return (learner, actor), dict(stats, rewards=rollout.rewards.mean())

  (learner, actor), stats = jax.lax.scan(update, (learner, actor), keys)
  return learner, actor, stats


def local_index(num: int) -> jax.Array:
  """The global indices ``[num]`` of this device's ``num`` members (members
  are numbered device by device); inside ``shard_map``."""
  return jax.lax.axis_index(AXIS) * num + jnp.arange(num)


@dataclasses.dataclass(frozen=True)
class StepContext:
  """What the pieces of one meta-step see (one device, while tracing): ``state``
  (the inputs by name; this device's agents), ``extra`` arguments, the
  meta-step's ``keys`` and the ``members``' meta-parameters."""

  state: dict[str, Any]
  extra: tuple[Any, ...] = ()
  keys: Any = None
  members: Any = None


@dataclasses.dataclass(frozen=True)
class GroupStep:
  """One group's part of a meta-step (one device, while tracing).

  Attributes:
    estimate: what ``_combine`` takes (by default the group's weighted
      meta-gradient share).
    logs: the group's logs over all devices, unprefixed.
    agents: the group's new agents (None: none kept).
    levels: its level sampler's new state (None: none).
  """

  estimate: Any
  logs: dict[str, Any]
  agents: Any = None
  levels: Any = None


class MetaStepProgram(abc.ABC):
  """The compiled meta-step of an estimator over a ``MetaTrainState``:
  subclasses define the module docstring's pieces, ``_initial`` (the initial
  state) and ``_check`` (members vs devices); ``inputs`` names the state fields
  taken and returned.

  Args:
    groups: agent groups.
    config: population settings.
    meta_optimizer: optax transformation of the meta-parameters.
    devices: devices to shard over (default: ``jax.devices()``).
  """

  inputs: tuple[str, ...] = (
      "meta_params",
      "meta_opt_state",
      "step",
      "agents",
      "rng",
  )
  # Population logs that are the groups' logs summed with their weights.
  weighted_logs: tuple[str, ...] = ("meta_loss", "rewards")
  extra_in_specs: tuple[P, ...] = ()

  def __init__(
      self,
      groups: Sequence[AgentGroup],
      config: PopulationConfig,
      meta_optimizer: optax.GradientTransformation,
      devices: Sequence[jax.Device] | None = None,
  ):
    self.groups = tuple(groups)
    self.config = config
    self.meta_optimizer = meta_optimizer
    self.devices = tuple(devices or jax.devices())
    check_groups(self.groups)
    self._check()
    self.weights = group_weights(self.groups)
    self.mesh = Mesh(np.asarray(self.devices), (AXIS,))
    self._step = self._build_step()
    self._exported: program_cache.ExportedProgram | None = None

  @property
  def num_agents(self) -> int:
    """Agents over all groups and devices."""
    return sum(g.num_agents for g in self.groups)

  # ---------------------------------------------- the estimator's pieces
  @abc.abstractmethod
  def _check(self) -> None:
    """Raises ``ValueError`` unless the members fit the devices."""

  @abc.abstractmethod
  def _initial(
      self, rng: jax.Array, meta_params: types.MetaParams
  ) -> dict[str, Any]:
    """The initial state's ``rng`` (loop key), ``agents`` and any ``estimator``
    and ``levels`` fields."""

  @abc.abstractmethod
  def _step_keys(self, rng: jax.Array) -> tuple[jax.Array, Any]:
    """``(next loop key, this meta-step's keys)``."""

  def _members(self, ctx: StepContext) -> Any:
    """The members' meta-parameters (None: the meta-parameters)."""
    del ctx
    return None

  @abc.abstractmethod
  def _group_step(
      self, index: int, group: AgentGroup, ctx: StepContext
  ) -> GroupStep:
    """The inner updates of group ``index``'s members on this device."""

  def _combine(
      self, ctx: StepContext, groups: Sequence[GroupStep]
  ) -> tuple[Any, types.Logs]:
    """``(what _update takes, population logs)`` from the groups' steps;
    by default the sum of their estimates and ``_totals``."""
    del ctx
    grads = None
    for out in groups:
      grads = (
          out.estimate
          if grads is None
          else jax.tree.map(jnp.add, grads, out.estimate)
      )
    return grads, self._totals(groups)

  def _update(
      self, ctx: StepContext, meta_grads: Any
  ) -> tuple[types.MetaParams, Any, Any, types.Logs]:
    """``(meta-parameters, meta-optimiser state, estimator state, logs)``
    after the meta-update."""
    state = ctx.state
    meta_params, meta_opt_state, logs = apply_meta_update(
        self.meta_optimizer,
        meta_grads,
        state["meta_opt_state"],
        state["meta_params"],
    )
    return meta_params, meta_opt_state, state.get("estimator"), logs

  def _totals(self, groups: Sequence[GroupStep]) -> types.Logs:
    """Diverged agents over the groups, and ``weighted_logs`` summed with
    the groups' weights."""
    logs = {divergence.DIVERGED: 0}
    for g, out in zip(self.groups, groups, strict=True):
      logs[divergence.DIVERGED] += out.logs[divergence.DIVERGED]
      for k in self.weighted_logs:
        logs[k] = logs.get(k, 0.0) + out.logs[k] * self.weights[g.name]
    return logs

  # ---------------------------------------------------------- the outline
  def _build_step(self):
    """The jitted meta-step: the pieces, per device, in order."""
    n = len(self.inputs)

    def per_device(*args):
      ctx = StepContext(
          state=dict(zip(self.inputs, args[:n], strict=True)), extra=args[n:]
      )
      rng, keys = self._step_keys(ctx.state["rng"])
      ctx = dataclasses.replace(ctx, keys=keys)
      ctx = dataclasses.replace(ctx, members=self._members(ctx))
      groups = [self._group_step(i, g, ctx) for i, g in enumerate(self.groups)]
      direction, logs = self._combine(ctx, groups)
      meta_params, meta_opt_state, estimator, update_logs = self._update(
          ctx, direction
      )
      logs.update(update_logs)
      for g, out in zip(self.groups, groups, strict=True):
        logs.update({f"{g.name}/{k}": v for k, v in out.logs.items()})
      fields = dict(
          meta_params=meta_params,
          meta_opt_state=meta_opt_state,
          step=ctx.state["step"] + 1,
          rng=rng,
      )
      if "agents" in self.inputs:
        fields["agents"] = tuple(out.agents for out in groups)
      if "estimator" in self.inputs:
        fields["estimator"] = estimator
      if "levels" in self.inputs:
        fields["levels"] = (
            None
            if ctx.state["levels"] is None
            else tuple(out.levels for out in groups)
        )
      return fields, logs

    return self._jit_step(per_device)

  def _jit_step(self, per_device: Callable[..., Any]):
    """``per_device`` (``inputs`` and extra arguments in, ``(fields, logs)``
    out) over ``mesh``, jitted: agents sharded, the rest replicated."""

    def spec(name):
      return P(AXIS) if name == "agents" else P()

    sharded = jax.shard_map(
        per_device,
        mesh=self.mesh,
        in_specs=tuple(spec(f) for f in self.inputs)
        + tuple(self.extra_in_specs),
        out_specs=({f: spec(f) for f in self.inputs}, P()),
        check_vma=False,
    )
    return jax.jit(sharded)

  # ----------------------------------------------------------- the state
  def init(
      self, rng: jax.Array, meta_params: types.MetaParams
  ) -> MetaTrainState:
    """The initial state, compiled and placed (``state_shardings``); each device
    initialises only its own agents."""
    return jax.jit(self._initial_state, out_shardings=self.state_shardings())(
        rng, meta_params
    )

  def _initial_state(self, rng, meta_params) -> MetaTrainState:
    return MetaTrainState(
        meta_params=meta_params,
        meta_opt_state=self.meta_optimizer.init(meta_params),
        step=jnp.zeros([], jnp.int32),
        **self._initial(rng, meta_params),
    )

  def _init_groups(
      self,
      init_group: Callable[..., Any],
      keys: Sequence[jax.Array],
      meta_params: types.MetaParams,
  ) -> tuple[Any, ...]:
    """Per group, ``init_group(group, key, meta_params)``."""
    return tuple(
        init_group(g, key, meta_params)
        for g, key in zip(self.groups, keys, strict=True)
    )

  def state_shardings(self) -> MetaTrainState:
    """Where a state's fields live (a prefix of the state's tree): agents
    sharded over the devices, everything else replicated."""
    replicated = NamedSharding(self.mesh, P())
    return MetaTrainState(
        meta_params=replicated,
        meta_opt_state=replicated,
        agents=NamedSharding(self.mesh, P(AXIS)),
        step=replicated,
        rng=replicated,
        estimator=replicated,
        levels=replicated,
    )

  def place(self, state: MetaTrainState) -> MetaTrainState:
    """``state`` moved to ``state_shardings``; with several processes every
    process must pass the same values."""
    return jax.device_put(state, self.state_shardings())

  def _step_args(self, state: MetaTrainState) -> tuple[Any, ...]:
    return tuple(getattr(state, name) for name in self.inputs)

  def lower(self, state: MetaTrainState) -> jax.stages.Lowered:
    """The meta-step program for ``state``, lowered (e.g. for
    ``compile().cost_analysis()``)."""
    return self._step.lower(*self._step_args(state))

  def step(self, state: MetaTrainState) -> tuple[MetaTrainState, types.Logs]:
    """One meta-step (one compiled program)."""
    step = self._step if self._exported is None else self._exported
    fields, logs = step(*self._step_args(state))
    return state.replace(**fields), logs

  def keep_traced(self, store: program_cache.Store, key: str) -> None:
    """Keeps the traced meta-step in ``store`` under ``key`` (which must cover
    the run's settings), or takes it from there (``disco.program_cache``)."""
    n = len(self.inputs)

    def structure(args, log_names):
      fields = dict(zip(self.inputs, args[:n], strict=True))
      return jax.tree.structure((fields, dict.fromkeys(log_names, 0)))

    self._exported = program_cache.ExportedProgram(
        self._step,
        store,
        key,
        describe=lambda out: sorted(out[1]),
        structure=structure,
    )
