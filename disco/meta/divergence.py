"""Divergence in meta-training: its host-side record, and injected faults.

The compiled meta-step (``population``) checks finiteness itself, as scalars:

* an agent whose meta-gradient, learner or value-function state, meta-loss
  or inner loss is not finite has *diverged*: it is left out of that step's
  meta-gradient (each group's mean is over its finite agents) and starts a new
  lifetime; ``<group>/diverged_agents`` counts them;
* when the meta-gradient, the new meta-parameters or the new meta-optimiser
  state are not finite (or a group has no finite agent left), the
  meta-parameters and the meta-optimiser state stay as they were:
  ``meta_update_skipped`` is 1.

``DivergenceRecord`` reads those scalars on the host after every meta-step,
keeps the run's totals (saved with each checkpoint) and says when a run has
skipped too many updates in a row to go on.

``FaultInjection`` is for tests only: it poisons a meta-gradient or an
agent's parameters at chosen meta-steps, deterministically. Without it (the
default) the population's compiled program holds none of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from disco import types

# Per meta-step logs of ``Population.step`` (device side).
SKIPPED = "meta_update_skipped"  # 1 when the meta-update was skipped
DIVERGED = "diverged_agents"  # agents that diverged (also per group)
# Totals over the run so far (host side, in the metrics rows).
SKIPPED_TOTAL = "skipped_updates"
CONSECUTIVE = "consecutive_skips"
RESTARTED = "restarted_agents"  # also per group


MAX_FAULT_STEPS = 8  # meta-steps per kind of fault


@dataclasses.dataclass(frozen=True)
class FaultInjection:
  """Deterministic faults in the meta-step. FOR TESTS ONLY.

  Meta-steps are counted from 1 (the metrics rows' ``meta_step``). The
  population passes the steps to its compiled program as arguments (padded
  to ``MAX_FAULT_STEPS``), so every fault schedule runs the same program.

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


@dataclasses.dataclass
class DivergenceRecord:
  """The divergence totals of a meta-training run, kept on the host.

  Attributes:
    groups: the population's group names.
    max_consecutive_skips: ``should_stop`` once this many meta-steps in a
      row skipped their update.
    skipped_updates: meta-updates skipped so far.
    consecutive_skips: skipped in a row up to the last meta-step.
    restarted_agents: per group, agents restarted after diverging so far.
    first_skip: the meta-step that started the current run of skips.
  """

  groups: tuple[str, ...]
  max_consecutive_skips: int
  skipped_updates: int = 0
  consecutive_skips: int = 0
  restarted_agents: dict[str, int] = dataclasses.field(default_factory=dict)
  first_skip: int | None = None

  def __post_init__(self):
    self.groups = tuple(self.groups)
    self.restarted_agents = {
        g: int(self.restarted_agents.get(g, 0)) for g in self.groups
    }

  @staticmethod
  def health_logs(
      logs: Mapping[str, Any], groups: Sequence[str]
  ) -> dict[str, Any]:
    """The entries of ``Population.step``'s logs that ``update`` reads (fetch
    only these when the rest is not needed)."""
    return {k: logs[k] for k in (SKIPPED, *(f"{g}/{DIVERGED}" for g in groups))}

  def update(self, meta_step: int, logs: Mapping[str, Any]) -> list[str]:
    """Counts meta-step ``meta_step`` from its (host) logs; returns one
    message per event (a skipped update, restarted agents)."""
    events = []
    diverged = {g: int(logs[f"{g}/{DIVERGED}"]) for g in self.groups}
    for g, n in diverged.items():
      self.restarted_agents[g] += n
    if any(diverged.values()):
      which = ", ".join(f"{n} of {g}" for g, n in diverged.items() if n)
      events.append(
          f"Meta-step {meta_step}: agent(s) diverged ({which}: non-finite "
          "parameters, losses or meta-gradient): left out of the "
          "meta-gradient and restarted."
      )
    if float(logs[SKIPPED]) > 0:
      self.skipped_updates += 1
      self.consecutive_skips += 1
      if self.consecutive_skips == 1:
        self.first_skip = meta_step
      events.append(
          f"Meta-step {meta_step}: non-finite meta-gradient or meta-update: "
          f"update skipped ({self.consecutive_skips} in a row; the run stops "
          f"at {self.max_consecutive_skips})."
      )
    else:
      self.consecutive_skips, self.first_skip = 0, None
    return events

  @property
  def should_stop(self) -> bool:
    return self.consecutive_skips >= self.max_consecutive_skips

  @property
  def last_update_applied(self) -> bool:
    return self.consecutive_skips == 0

  def totals(self) -> dict[str, int]:
    """Metrics-row entries: the totals so far."""
    row = {
        SKIPPED_TOTAL: self.skipped_updates,
        CONSECUTIVE: self.consecutive_skips,
        RESTARTED: sum(self.restarted_agents.values()),
    }
    row.update(
        {f"{g}/{RESTARTED}": n for g, n in self.restarted_agents.items()}
    )
    return row

  def to_json(self) -> dict[str, Any]:
    return dict(
        skipped_updates=self.skipped_updates,
        consecutive_skips=self.consecutive_skips,
        restarted_agents=dict(self.restarted_agents),
        first_skip=self.first_skip,
    )

  @classmethod
  def from_json(
      cls,
      data: Mapping[str, Any] | None,
      groups: Sequence[str],
      max_consecutive_skips: int,
  ) -> DivergenceRecord:
    """The record saved by ``to_json`` (a new one for ``None``)."""
    data = dict(data or {})
    return cls(
        groups=tuple(groups),
        max_consecutive_skips=max_consecutive_skips,
        skipped_updates=int(data.get("skipped_updates", 0)),
        consecutive_skips=int(data.get("consecutive_skips", 0)),
        restarted_agents=dict(data.get("restarted_agents") or {}),
        first_skip=data.get("first_skip"),
    )
