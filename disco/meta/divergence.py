"""Divergence in meta-training: its host-side record.

The compiled meta-step checks finiteness itself: an agent whose meta-gradient,
states or losses are not finite is left out of that step's meta-gradient and
restarts (``<group>/diverged_agents``); a non-finite meta-gradient,
meta-parameters or optimiser state (or a group without finite agents) leaves
them unchanged (``meta_update_skipped`` = 1). ``DivergenceRecord`` keeps the
run's totals on the host and says when too many updates in a row were skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

# Per meta-step logs of a meta-step program's ``step`` (device side).
SKIPPED = "meta_update_skipped"  # 1 when the meta-update was skipped
DIVERGED = "diverged_agents"  # agents that diverged (also per group)
# Totals over the run so far (host side, in the metrics rows).
SKIPPED_TOTAL = "skipped_updates"
CONSECUTIVE = "consecutive_skips"
RESTARTED = "restarted_agents"  # also per group


@dataclasses.dataclass
class DivergenceRecord:
  """The divergence totals of a meta-training run, kept on the host.

  Attributes:
    groups: the population's group names.
    max_consecutive_skips: ``should_stop`` once this many meta-steps in a row
      skipped their update.
    skipped_updates: meta-updates skipped so far.
    consecutive_skips: skipped in a row up to the last meta-step.
    restarted_agents: per group, agents restarted after diverging.
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
    """The entries of a meta-step's logs that ``update`` reads."""
    return {k: logs[k] for k in (SKIPPED, *(f"{g}/{DIVERGED}" for g in groups))}

  def update(self, meta_step: int, logs: Mapping[str, Any]) -> list[str]:
    """Counts meta-step ``meta_step`` from its host logs; returns one message
    per event (a skipped update, restarted agents)."""
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
