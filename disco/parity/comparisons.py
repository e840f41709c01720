"""Comparisons of our arrays with a fixture's, and their tolerances.

See ``disco.parity`` for the tolerances of each kind of array.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from disco.parity import fixtures

ATOL_REL = 1e-4
# Updated parameters of fixtures without gradients.
LOOSE_REL = 1e-2
FRACTION = 0.999
# Updated parameters of fixtures with gradients (see ``disco.parity``).
ROBUST_FRACTION = 0.99
# Gradients, by norm.
GRAD_REL = 1e-3
GRAD_ABS = 1e-7


@dataclasses.dataclass
class Comparison:
  """One compared array (or check).

  Attributes:
    key: the array's key (and what was checked).
    error: the worst error relative to the tolerance's scale.
    ok: whether it is within the tolerance.
  """

  key: str
  error: float
  ok: bool


def _as_f64(ours, ref) -> tuple[np.ndarray, np.ndarray]:
  return np.asarray(ours, np.float64), np.asarray(ref, np.float64)


def _shape_mismatch(key: str, ours, ref) -> Comparison | None:
  if ours.shape == ref.shape:
    return None
  return Comparison(
      f"{key} (shape {ours.shape} != {ref.shape})", float("inf"), False
  )


def compare_array(
    key: str,
    ours: np.ndarray,
    ref: np.ndarray,
    updated_params: bool = False,
    max_step: float | None = None,
) -> Comparison:
  """Max-abs comparison scaled by ``1 + max|ref|``.

  With ``updated_params``: the 99.9% rule, or with ``max_step`` (the most
  the updates can move a weight apart, ``2 N lr max_abs_update``) the
  rounding-robust one; see the module docstring.
  """
  ours, ref = _as_f64(ours, ref)
  if (bad := _shape_mismatch(key, ours, ref)) is not None:
    return bad
  scale = 1.0 + (np.abs(ref).max() if ref.size else 0.0)
  diff = np.abs(ours - ref)
  worst = float(diff.max() / scale) if diff.size else 0.0
  if not updated_params:
    return Comparison(key, worst, bool(worst <= ATOL_REL))
  within = np.mean(diff <= ATOL_REL * scale) if diff.size else 1.0
  if max_step is None:
    ok = within >= FRACTION and worst <= LOOSE_REL
  else:
    bound = max_step + ATOL_REL * scale
    ok = within >= ROBUST_FRACTION and (diff.max() if diff.size else 0) <= bound
  return Comparison(key, worst, bool(ok))


def compare_gradient(key: str, ours: np.ndarray, ref: np.ndarray) -> Comparison:
  ours, ref = _as_f64(ours, ref)
  if (bad := _shape_mismatch(key, ours, ref)) is not None:
    return bad
  err = np.linalg.norm(ours - ref)
  ref_norm = np.linalg.norm(ref)
  return Comparison(
      key,
      float(err / (ref_norm + 1e-12)),
      bool(err <= GRAD_REL * ref_norm + GRAD_ABS),
  )


def compare_outputs(
    ours: dict[str, np.ndarray],
    fixture: dict[str, np.ndarray],
    max_steps: dict[str, float] | None = None,
) -> list[Comparison]:
  """Compares every ``outputs::`` array of the fixture with ours.

  ``max_steps``: for each group of updated parameters (``UPDATED_GROUPS``),
  the most its updates can move a weight apart; given, those groups are
  checked by the rounding-robust rule, else by the 99.9% rule.
  """
  results = []
  for key in sorted(
      k for k in fixture if k.startswith("outputs" + fixtures.SEP)
  ):
    name = key[len("outputs" + fixtures.SEP) :]
    if name not in ours:
      results.append(Comparison(f"{name} (missing)", float("inf"), False))
      continue
    group = name.split(fixtures.SEP)[0]
    if group in fixtures.GRADIENT_GROUPS:
      results.append(compare_gradient(name, ours[name], fixture[key]))
    elif group in fixtures.UPDATED_GROUPS:
      max_step = None if max_steps is None else max_steps[group]
      results.append(
          compare_array(name, ours[name], fixture[key], True, max_step)
      )
    else:
      results.append(compare_array(name, ours[name], fixture[key]))
  return results


def max_distance(num_steps: int, learning_rate: float, max_abs_update: float):
  """How far ``num_steps`` clipped updates can move a weight apart."""
  return 2.0 * num_steps * learning_rate * max_abs_update


def exact(name: str, ours: Any, ref: np.ndarray) -> Comparison:
  """Equality of ``ours`` and ``ref`` (environments, keys, counters); the
  error is the fraction of elements that differ."""
  ours, ref = np.asarray(ours), np.asarray(ref)
  same = ours.shape == ref.shape and np.array_equal(ours, ref)
  mismatch = (
      0.0
      if same
      else float(np.mean(ours != ref) if ours.shape == ref.shape else 1.0)
  )
  return Comparison(f"{name} (exact)", mismatch, bool(same))
