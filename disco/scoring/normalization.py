"""Per-environment score normalisation of comparisons.

A normalised score is ``(score - random) / (reference - random)``: 0 is the
uniform random policy and 1 the reference. The reference table, its entries
and the look-up live in ``disco.environments.reference_scores`` (below both
comparisons and meta-training, which normalises ES fitness with it); their
names are importable from here too. This module adds what comparisons need
on top: normalising a score table of several rules (``normalize_score_dict``)
and the table's rows for a report (``table_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses

import numpy as np

from disco.environments import reference_scores

# The reference scores, here too for the callers that import them from here.
ALIASES = reference_scores.ALIASES
MissingReferenceError = reference_scores.MissingReferenceError
REFERENCE_TABLE = reference_scores.REFERENCE_TABLE
ReferenceEntry = reference_scores.ReferenceEntry
anchors = reference_scores.anchors
catch_entry = reference_scores.catch_entry
env_key = reference_scores.env_key
get_entry = reference_scores.get_entry
normalize = reference_scores.normalize


def normalize_score_dict(
    scores: Mapping[str, np.ndarray],
    envs: Sequence[str],
    overrides: Mapping[str, ReferenceEntry] | None = None,
) -> dict[str, np.ndarray]:
  """Normalises ``{rule: [num_seeds, num_envs]}`` raw returns column-wise.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}`` raw returns.
    envs: ``[num_envs]`` environment keys, one per column.
    overrides: ``{env: ReferenceEntry}`` taking precedence over the table.

  Returns:
    ``{rule: [num_seeds, num_envs]}`` normalised scores, the input of
    ``disco.scoring.aggregates``.
  """
  envs = list(envs)
  out = {}
  for rule, value in scores.items():
    x = np.asarray(value, np.float64)
    if x.ndim < 2 or x.shape[1] != len(envs):
      raise ValueError(
          f"Scores of rule {rule!r} have shape {x.shape}; expected "
          f"[num_seeds, {len(envs)}, ...] for environments {envs}."
      )
    out[rule] = np.stack(
        [normalize(x[:, i], env, overrides) for i, env in enumerate(envs)],
        axis=1,
    )
  return out


def table_rows(
    overrides: Mapping[str, ReferenceEntry] | None = None,
) -> list[dict[str, object]]:
  """The table (with ``overrides`` applied and added) as a list of dicts,
  e.g. for a CSV or a report."""
  merged = dict(REFERENCE_TABLE)
  merged.update(overrides or {})
  return [dataclasses.asdict(e) for e in merged.values()]
