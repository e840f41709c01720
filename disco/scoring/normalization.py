"""Normalised scores: score tables of several rules, and user-given
references.

A normalised score is ``(score - random) / (reference - random)``: 0 is the
uniform random policy and 1 the reference. The reference table, its entries
and the normalisation of one environment's scores are environment data and
live in ``disco.environments.reference_scores``. This module adds what
scoring several rules needs on top: normalising a score table
(``normalize_score_dict``), the table's rows for a report (``table_rows``),
and references given on a command line (``parse_references``: disco-compare's
``config.references``, meta-training's ``config.validation.references``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses

import numpy as np

from disco import errors
from disco import specs as specs_lib
from disco.environments import reference_scores


def normalize_score_dict(
    scores: Mapping[str, np.ndarray],
    envs: Sequence[str],
    overrides: Mapping[str, reference_scores.ReferenceEntry] | None = None,
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
        [
            reference_scores.normalize(x[:, i], env, overrides)
            for i, env in enumerate(envs)
        ],
        axis=1,
    )
  return out


def table_rows(
    overrides: Mapping[str, reference_scores.ReferenceEntry] | None = None,
) -> list[dict[str, object]]:
  """The table (with ``overrides`` applied and added) as a list of dicts,
  e.g. for a CSV or a report."""
  merged = dict(reference_scores.REFERENCE_TABLE)
  merged.update(overrides or {})
  return [dataclasses.asdict(e) for e in merged.values()]


def parse_references(
    specs: Sequence[str],
) -> dict[str, reference_scores.ReferenceEntry]:
  """References given as ``"env:random=R,reference=X,source=TEXT"`` specs
  (optional keys ``random_source``, ``algorithm``, ``budget``) as
  ``{env: ReferenceEntry}``, the ``overrides`` of the table.

  Raises:
    UsageError: a spec without ``random`` or ``reference``, or whose values
      are not numbers.
  """
  out = {}
  for spec in specs:
    env, values = specs_lib.parse_spec(spec, "reference")
    try:
      out[env] = reference_scores.ReferenceEntry(
          env=env,
          random_return=float(values["random"]),
          random_source=str(values.get("random_source", "given")),
          reference_return=float(values["reference"]),
          reference_algorithm=str(values.get("algorithm", "given")),
          budget_env_steps=values.get("budget"),
          source=str(values.get("source", "given on the command line")),
      )
    except (KeyError, TypeError, ValueError):
      raise errors.UsageError(
          f"Bad reference {spec!r}: write env:random=R,reference=X"
          ",source=TEXT."
      ) from None
  return out
