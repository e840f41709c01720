"""Normalised scores of several rules, and user-given references.

A normalised score is ``(score - random) / (reference - random)``: 0 is a
uniform random policy, 1 the reference. The reference table and one
environment's normalisation live in ``disco.environments.reference_scores``.
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
  """``{rule: [num_seeds, num_envs]}`` normalised scores
  (``disco.scoring.aggregates``' input) from raw returns.

  Args:
    scores: ``{rule: [num_seeds, num_envs]}`` raw returns.
    envs: ``[num_envs]`` environment keys, one per column.
    overrides: ``{env: ReferenceEntry}`` taking precedence over the table.
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
  """The table (with ``overrides`` applied and added) as a list of dicts."""
  merged = dict(reference_scores.REFERENCE_TABLE)
  merged.update(overrides or {})
  return [dataclasses.asdict(e) for e in merged.values()]


def parse_references(
    specs: Sequence[str],
) -> dict[str, reference_scores.ReferenceEntry]:
  """``{env: ReferenceEntry}`` from ``"env:random=R,reference=X,source=TEXT"``
  specs (optional keys ``random_source``, ``algorithm``, ``budget``), e.g.
  disco-compare's ``config.references``.

  Raises:
    UsageError: a spec without ``random`` or ``reference``, or with non-numbers.
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
