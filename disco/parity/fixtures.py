"""The fixtures' layout: arrays under flat keys, and the files.

A fixture is an ``.npz`` of arrays named by their path in a tree, with
``SEP`` between the parts (``inputs::params::torso::w``); ``kind`` names
what computed it (``disco.parity.KINDS``). ``inputs::*`` are what the
published code was given, ``outputs::*`` what it computed: gradients under
``outputs::grads`` and ``outputs::meta_grads`` (``GRADIENT_GROUPS``),
updated parameters under ``UPDATED_GROUPS``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

SEP = "::"
GRADIENT_GROUPS = ("grads", "meta_grads")
UPDATED_GROUPS = ("params", "learner_params", "value_params")
# Where a fixture without gradients finds a copy with them.
GRADS_DIR = "grads"


def unflatten(flat: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
  """``{'a::b::c': x}`` -> ``{'a': {'b': {'c': x}}}`` for keys under prefix."""
  out: dict[str, Any] = {}
  for key, value in flat.items():
    if not key.startswith(prefix + SEP):
      continue
    *path, leaf = key[len(prefix) + len(SEP) :].split(SEP)
    node = out
    for p in path:
      node = node.setdefault(p, {})
    node[leaf] = value
  return out


def flatten(tree: Any, prefix: str) -> dict[str, np.ndarray]:
  """Inverse of ``unflatten`` for dicts, named tuples and dataclasses."""
  if isinstance(tree, dict):
    items = tree.items()
  elif hasattr(tree, "_fields"):
    items = ((f, getattr(tree, f)) for f in tree._fields)
  elif dataclasses.is_dataclass(tree):
    items = ((f.name, getattr(tree, f.name)) for f in dataclasses.fields(tree))
  else:
    return {prefix: np.asarray(tree)}
  out = {}
  for k, v in items:
    out.update(flatten(v, f"{prefix}{SEP}{k}"))
  return out


def flatten_arrays(tree: Any) -> dict[str, np.ndarray]:
  """``flatten`` without a prefix, as numpy arrays."""
  return {k[len(SEP) :]: np.asarray(v) for k, v in flatten(tree, "").items()}


def strip(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """``flatten(tree, "")``'s keys without their leading ``SEP``."""
  return {k[len(SEP) :]: v for k, v in flat.items()}


def has_gradients(fixture: dict[str, np.ndarray]) -> bool:
  """Whether the fixture carries gradients (``grads::*``, ``meta_grads::*``)."""
  return any(
      k.startswith(f"outputs{SEP}{g}{SEP}")
      for k in fixture
      for g in GRADIENT_GROUPS
  )


def load_fixture(path: str | Path) -> dict[str, np.ndarray]:
  """A fixture's arrays by key."""
  with np.load(path, allow_pickle=False) as data:
    return {k: data[k] for k in data.files}


def with_companion_gradients(
    path: Path, fx: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
  """``fx`` with the gradients of its copy ``<dir>/grads/<name>``, if the
  fixture has none and that copy holds the same arrays otherwise."""
  companion = path.parent / GRADS_DIR / path.name
  if has_gradients(fx) or not companion.is_file():
    return fx
  try:
    other = load_fixture(companion)
  except (OSError, ValueError):
    return fx
  if set(fx) - set(other) or not all(
      np.array_equal(fx[k], other[k]) for k in fx
  ):
    return fx
  return dict(
      fx,
      **{
          k: v
          for k, v in other.items()
          if k.startswith(f"outputs{SEP}grads{SEP}")
      },
  )
