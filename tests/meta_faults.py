"""Faults injected into meta-training in the test process: a population
whose meta-step poisons an agent or the meta-gradient at chosen meta-steps,
and a checkpoint damaged on disk.

``FaultyPopulation`` is the backprop estimator's population with the faults
wrapped around two ordinary pieces of its meta-step (``_group_step`` and
``_combine``, see ``disco.meta.meta_step``). The fault schedule is an
argument of its compiled program, so every schedule runs the same program;
``with_faults`` gives a built plan whose population injects them. Nothing
of this is in the package: a population without faults compiles without
any trace of them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from disco import types
from disco.meta import checkpoints as ckpt_lib
from disco.meta import meta_step
from disco.meta import plan as plan_lib
from disco.meta import population as population_lib

MAX_FAULT_STEPS = 8  # meta-steps per kind of fault


@dataclasses.dataclass(frozen=True)
class FaultInjection:
  """Deterministic faults in the meta-step.

  Meta-steps are counted from 1 (the metrics rows' ``meta_step``); the
  steps go to the compiled program as arguments (padded to
  ``MAX_FAULT_STEPS``).

  Attributes:
    poison_meta_grad_at_steps: meta-steps whose (averaged) meta-gradient is
      replaced by NaN.
    poison_agent_at_steps: meta-steps at whose start the first agent of the
      first group gets NaN network parameters.
  """

  poison_meta_grad_at_steps: tuple[int, ...] = ()
  poison_agent_at_steps: tuple[int, ...] = ()

  def __post_init__(self):
    for name in ("poison_meta_grad_at_steps", "poison_agent_at_steps"):
      steps = getattr(self, name)
      if (
          any(isinstance(s, bool) or not isinstance(s, int) for s in steps)
          or any(s < 1 for s in steps)
          or len(steps) > MAX_FAULT_STEPS
      ):
        raise ValueError(
            f"{name} must be a tuple of at most {MAX_FAULT_STEPS} meta-steps "
            f"(ints >= 1), got {steps!r}."
        )
      object.__setattr__(self, name, tuple(int(s) for s in steps))

  def schedule(self) -> tuple[jax.Array, jax.Array]:
    """``(meta-gradient steps, agent steps)``, each ``[MAX_FAULT_STEPS]``
    int32 padded with 0 (no meta-step)."""
    return tuple(
        jnp.asarray(
            list(steps) + [0] * (MAX_FAULT_STEPS - len(steps)), jnp.int32
        )
        for steps in (
            self.poison_meta_grad_at_steps,
            self.poison_agent_at_steps,
        )
    )


def at_meta_steps(step: jax.Array, steps: jax.Array) -> jax.Array:
  """Whether the meta-step that starts from counter ``step`` (meta-steps
  done so far) is one of ``steps`` (counted from 1; 0 is no step)."""
  return jnp.any(steps == step + 1)


def poison(tree: types.ArrayTree, where: jax.Array) -> types.ArrayTree:
  """NaN in every floating-point entry of ``tree`` where ``where`` holds
  (a scalar, or a ``[N]`` mask over the leaves' leading axis)."""

  def leaf(x):
    if not jnp.issubdtype(x.dtype, jnp.inexact):
      return x
    mask = where.reshape(where.shape + (1,) * (x.ndim - where.ndim))
    return jnp.where(mask, jnp.nan, x)

  return jax.tree.map(leaf, tree)


def poison_first_agent(group_state, step, steps, local: int):
  """The group's agents (this device's ``local``) with NaN parameters for
  the first agent of the first device at the meta-steps ``steps``."""
  first = jnp.arange(local) == 0
  hit = at_meta_steps(step, steps)
  hit &= jax.lax.axis_index(meta_step.AXIS) == 0
  learner = group_state.learner
  return group_state.replace(
      learner=learner.replace(params=poison(learner.params, first & hit))
  )


class FaultyPopulation(population_lib.BackpropPopulation):
  """The backprop population, with ``faults`` injected into its meta-step.

  Args:
    groups, config, meta_optimizer, devices: as ``BackpropPopulation``'s.
    faults: the faults and the meta-steps they strike at.
  """

  extra_in_specs = (P(), P())  # the schedule: (meta-gradient, agent) steps

  def __init__(
      self, groups, config, meta_optimizer, devices, faults: FaultInjection
  ):
    self.faults = faults
    super().__init__(groups, config, meta_optimizer, devices)

  def _group_step(self, index, group, ctx):
    """The first group's first agent poisoned before its meta-step."""
    if index == 0:
      agents = list(ctx.state["agents"])
      agents[0] = poison_first_agent(
          agents[0],
          ctx.state["step"],
          ctx.extra[1],
          group.num_agents // len(self.devices),
      )
      ctx = dataclasses.replace(
          ctx, state=dict(ctx.state, agents=tuple(agents))
      )
    return super()._group_step(index, group, ctx)

  def _combine(self, ctx, groups):
    """The averaged meta-gradient, poisoned at its meta-steps."""
    meta_grads, logs = super()._combine(ctx, groups)
    hit = at_meta_steps(ctx.state["step"], ctx.extra[0])
    return poison(meta_grads, hit), logs

  def _step_args(self, state):
    return super()._step_args(state) + self.faults.schedule()


def with_faults(
    plan: plan_lib.MetaTrainPlan, **faults
) -> plan_lib.MetaTrainPlan:
  """``plan`` whose population injects ``FaultInjection(**faults)`` (the
  same groups, settings, meta-optimiser and devices)."""
  population = plan.population
  return dataclasses.replace(
      plan,
      population=FaultyPopulation(
          population.groups,
          population.config,
          population.meta_optimizer,
          population.devices,
          FaultInjection(**faults),
      ),
  )


def corrupt_checkpoint(path: str | Path) -> None:
  """Overwrites the array data files of the checkpoint at ``path`` with
  garbage, as a disk fault would."""
  for f in (Path(path) / ckpt_lib.STATE_ITEM).rglob("*"):
    if f.is_file() and f.parent.name == "d":
      f.write_bytes(b"damaged")
