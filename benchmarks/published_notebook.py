"""Runs a published DiscoRL notebook's own code cells, for comparisons.

The published code is NOT part of this package and nothing here imports it
by itself: ``namespace`` puts a folder given on the command line (the
``disco_rl`` package and ``colabs/``) first on ``sys.path`` and returns the
namespace in which the benchmark scripts execute the notebook's cells, with
settings replaced line by line (``replace``: each replaced text must occur
exactly once, so an edited notebook fails loudly instead of running other
settings). Shims make the notebooks run on JAX 0.10 without GPUs or
downloads: ``jax.device_put_replicated`` (removed from JAX) is provided,
shell lines (``!pip``, ``!wget``) are dropped, and the caller points the
weights cell at a local Disco103 file.

``SteppedLoop`` runs a notebook's training-loop cell a few iterations at a
time and times each iteration (used by ``published_compare.py``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
import sys
import types
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import timing


class NotebookError(RuntimeError):
  """The notebook does not have the expected cells or lines."""


def code_cells(published: Path, notebook: str) -> list[str]:
  """The sources of the code cells of ``published / notebook``."""
  path = published / notebook
  if not path.is_file():
    raise NotebookError(f"{path} not found: pass the published code's folder.")
  cells = json.loads(path.read_text())["cells"]
  return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def cell(cells: list[str], title: str) -> str:
  """The one cell whose ``# @title`` starts with ``title``."""
  found = [c for c in cells if f"# @title {title}" in c]
  if len(found) != 1:
    raise NotebookError(f"expected one notebook cell titled {title!r}.")
  return found[0]


def replace(source: str, old: str, new: str) -> str:
  """``source`` with its one occurrence of ``old`` replaced by ``new``."""
  if source.count(old) != 1:
    raise NotebookError(f"expected exactly one {old!r} in the notebook cell.")
  return source.replace(old, new)


def split(source: str, *markers: str) -> list[str]:
  """``source`` cut before each marker (each must occur exactly once, in
  order): ``len(markers) + 1`` parts."""
  parts = []
  for marker in markers:
    if source.count(marker) != 1:
      raise NotebookError(f"expected exactly one {marker!r} in the cell.")
    head, tail = source.split(marker)
    parts.append(head)
    source = marker + tail
  return parts + [source]


def without_shell_lines(source: str) -> str:
  return "\n".join(
      line for line in source.splitlines() if not line.lstrip().startswith("!")
  )


def setup_cells(cells: list[str], weights: Path) -> list[str]:
  """The install and weights cells that both notebooks open with, without
  shell lines and reading the Disco103 weights from ``weights``."""
  weights_cell = replace(
      without_shell_lines(cell(cells, "Download and unpack")),
      "f'/content/{disco_103_fname}'",
      repr(str(weights)),
  )
  return [
      without_shell_lines(cell(cells, "Install the package.")),
      weights_cell,
  ]


def _device_put_replicated(tree, devices):
  """JAX 0.10 removed ``jax.device_put_replicated``; ``pmap`` takes one
  stacked copy per device instead. (A ``pmap``'ed function then compiles on
  its first two calls when the second one passes ``pmap``'s outputs.)"""
  return jax.tree.map(
      lambda x: jnp.stack([jnp.asarray(x)] * len(devices)), tree
  )


def _device_put_sharded(shards, devices):
  """Newer JAX removed ``jax.device_put_sharded`` too: ``pmap`` takes the
  shards stacked on a leading axis."""
  del devices
  return jax.tree.map(
      lambda *x: jnp.stack([jnp.asarray(y) for y in x]), *shards
  )


class _AnyArrayMeta(type):

  def __instancecheck__(cls, x):
    return isinstance(x, (jax.Array, np.ndarray, np.bool_, np.number))


class _AnyArray(metaclass=_AnyArrayMeta):
  """What ``chex.Array`` means to the published code: JAX arrays (traced
  ones included), NumPy arrays and scalars."""


def _chex_array_takes_tracers() -> bool:
  seen = []
  jax.eval_shape(lambda x: seen.append(isinstance(x, chex.Array)), 0.0)
  return seen[0]


def namespace(published: Path, name: str) -> dict[str, Any]:
  """A fresh namespace (the globals of a module ``name``) in which
  ``disco_rl`` imports from ``published``, with the JAX 0.10 shim."""
  if str(published) not in sys.path:
    sys.path.insert(0, str(published))
  if not _chex_array_takes_tracers():
    # The published code asserts that traced arrays are ``chex.Array``s,
    # which newer chex/JAX pairs no longer say.
    chex.Array = _AnyArray
  for name, shim in (
      ("device_put_replicated", _device_put_replicated),
      ("device_put_sharded", _device_put_sharded),
  ):
    try:
      getattr(jax, name)
    except AttributeError:  # removed, or deprecated to an error
      setattr(jax, name, shim)
  # Dataclasses defined by the cells need their module in sys.modules.
  module = types.ModuleType(name)
  sys.modules[name] = module
  return module.__dict__


def run_cells(ns: dict[str, Any], *sources: str, filename: str) -> None:
  for source in sources:
    exec(compile(source, filename, "exec"), ns)


class SteppedLoop:
  """A notebook's training-loop cell, run a few iterations at a time.

  The cell is cut at ``loop_marker`` (the loop) and ``end_marker`` (what
  follows it): the part before the loop runs once, here; ``run(n)`` runs the
  loop's next ``n`` iterations. The loop must be ``for ... in
  tqdm.tqdm(range(<count_name>)):``; ``tqdm`` is replaced while it runs by a
  stand-in that skips the iterations already run and times each one.
  """

  def __init__(
      self,
      ns: dict[str, Any],
      source: str,
      loop_marker: str,
      end_marker: str,
      filename: str,
      count_name: str = "num_steps",
  ):
    self.ns = ns
    setup, loop, _ = split(source, loop_marker, end_marker)
    if "tqdm.tqdm(range(" + count_name + "))" not in loop:
      raise NotebookError(
          f"expected the loop over tqdm.tqdm(range({count_name}))."
      )
    self._count_name = count_name
    self._loop = compile(loop, filename, "exec")
    self.done = 0  # iterations run so far
    self._seconds: list[float] = []  # of the iterations of this run
    run_cells(ns, setup, filename=filename)

  def tqdm(self, iterable):
    """Stands in for ``tqdm.tqdm``: the items after those already run;
    appends each iteration's seconds to ``self._seconds``."""
    clock = timing.Stopwatch()
    for item in itertools.islice(iterable, self.done, None):
      yield item
      self._seconds.append(clock.lap())
      self.done += 1

  def run(self, n: int) -> list[float]:
    """Runs the next ``n`` iterations; returns the seconds of each."""
    self._seconds = []
    ns, real_tqdm = self.ns, self.ns.get("tqdm")
    ns["tqdm"], ns[self._count_name] = self, self.done + n
    try:
      exec(self._loop, ns)
    finally:
      ns["tqdm"] = real_tqdm
    return self._seconds
