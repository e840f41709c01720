"""Traced programs kept on disk, so that a later start skips tracing them.

``ExportedProgram`` keeps a jitted function's ``jax.export`` form in
``<compilation cache>/exported/``; a later process deserialises it instead of
tracing and lowering, and XLA finds the compiled program in
``disco.compile_cache``. The key hashes the caller's key (the run's settings),
this process's ``fingerprint`` (disco's sources, installed distributions,
Python, backend, devices, JAX's flags) and the arguments' structure, shapes,
dtypes and shardings. Code outside these (a module a ``--config.imports`` module
imports) is not in the key: after editing it, delete ``exported`` or use
``--config.compilation_cache=off``. Single-process runs only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import functools
import hashlib
import json
import os
from pathlib import Path
import sys
from typing import Any

import jax
import numpy as np

from disco import files

# Bump when what a stored program holds or how it is keyed changes.
FORMAT = "2"  # 2: the description holds the program's SHA-256
FOLDER = "exported"
# Programs kept; beyond it the least recently used go first.
MAX_PROGRAMS = 32
_PROGRAM_SUFFIX = ".jaxexport"
_DESCRIPTION_SUFFIX = ".json"
_PACKAGE_DIR = Path(__file__).resolve().parent
_loaded = 0  # programs this process took from a store


def _sha256(parts: Sequence[str | bytes]) -> str:
  digest = hashlib.sha256()
  for part in parts:
    data = part.encode() if isinstance(part, str) else part
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
  return digest.hexdigest()


def source_digest(
    paths: Sequence[str | os.PathLike[str]],
    root: str | os.PathLike[str] | None = None,
) -> str:
  """A hash of the files' names (relative to ``root``, when given) and
  contents (a missing file counts as missing)."""
  parts = []
  for path in sorted(str(p) for p in paths):
    parts.append(str(Path(path).relative_to(root)) if root else path)
    try:
      parts.append(Path(path).read_bytes())
    except OSError:
      parts.append("<missing>")
  return _sha256(parts)


def _installed_distributions() -> list[str]:
  """The installed distributions' metadata folders on ``sys.path``, whose names
  hold each one's name and version (listed, not read)."""
  names = []
  for entry in sys.path:
    try:
      with os.scandir(entry or ".") as found:
        names += [
            e.name
            for e in found
            if e.name.endswith((".dist-info", ".egg-info"))
        ]
    except OSError:
      continue
  return names


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
  """What, besides a program's key and arguments, decides what tracing makes of
  it in this process."""
  sources = sorted(_PACKAGE_DIR.rglob("*.py"))
  distributions = sorted(_installed_distributions())
  flags = sorted(
      f"{k}={v!r}"
      for k, v in jax.config.values.items()
      if "cache" not in k and "log" not in k
  )
  devices = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
  return _sha256(
      [
          FORMAT,
          sys.version,
          source_digest(sources, root=_PACKAGE_DIR),
          *distributions,
          *flags,
          jax.default_backend(),
          *devices,
          str(jax.process_count()),
      ]
  )


@functools.lru_cache(maxsize=4096)
def _placement(sharding: Any, shape: tuple[int, ...]) -> str:
  """Which part of an array of ``shape`` each device holds under ``sharding``."""
  parts = sharding.devices_indices_map(shape)
  return repr(sorted((d.id, index) for d, index in parts.items()))


def _arguments_key(in_tree: Any, leaves: Sequence[Any]) -> tuple[Any, ...]:
  """A quick hashable key of the arguments' structure, dtypes, shapes, weak
  types and shardings."""
  return (
      in_tree,
      *(
          (
              getattr(leaf, "dtype", type(leaf)),
              getattr(leaf, "shape", ()),
              getattr(getattr(leaf, "aval", None), "weak_type", None),
              getattr(leaf, "sharding", None),
          )
          for leaf in leaves
      ),
  )


def _signature(in_tree: Any, leaves: Sequence[Any]) -> str:
  """The arguments' structure, shapes, dtypes and placements as text, the same
  in every process."""
  parts = [str(in_tree)]
  for leaf in leaves:
    # A Python scalar has no dtype and is weakly typed.
    dtype = getattr(leaf, "dtype", type(leaf).__name__)
    weak = getattr(getattr(leaf, "aval", None), "weak_type", dtype == "float")
    sharding = getattr(leaf, "sharding", None)
    shape = tuple(np.shape(leaf))
    placed = "host" if sharding is None else _placement(sharding, shape)
    parts.append(f"{dtype}{list(shape)}|{weak}|{placed}")
  return "\n".join(parts)


def _warn_on_stderr(message: str) -> None:
  print(f"disco: warning: {message}", file=sys.stderr)


class Store:
  """The folder of exported programs (``<folder>/exported``).

  Args:
    folder: the compilation cache's folder.
    warn: says one line (a damaged program); default: stderr.
  """

  def __init__(
      self,
      folder: str | os.PathLike[str],
      warn: Callable[[str], None] = _warn_on_stderr,
  ):
    self.folder = Path(folder) / FOLDER
    self.warn = warn

  def _paths(self, name: str) -> tuple[Path, Path]:
    return (
        self.folder / f"{name}{_PROGRAM_SUFFIX}",
        self.folder / f"{name}{_DESCRIPTION_SUFFIX}",
    )

  def load(self, name: str) -> tuple[jax.export.Exported, dict] | None:
    """The program stored as ``name`` and its description (None: none, or
    unreadable). Its bytes are checked against the SHA-256 its description
    recorded before deserialising: a mismatch is a miss, with one warning line.
    """
    program, description = self._paths(name)
    try:
      described = json.loads(description.read_text())
      if not isinstance(described, dict) or described.get("format") != FORMAT:
        return None
      data = program.read_bytes()
    except Exception:  # noqa: BLE001 - absent or half-written: a miss
      return None
    if _sha256([data]) != described.get("sha256"):
      self.warn(
          f"the stored program {program} differs from the digest saved with "
          "it (damaged or changed on disk): tracing it again."
      )
      return None
    try:
      exported = jax.export.deserialize(bytearray(data))
      os.utime(program)  # recently used
    except Exception:  # noqa: BLE001 - unreadable by this JAX: a miss
      return None
    return exported, described

  def save(
      self, name: str, exported: jax.export.Exported, description: dict
  ) -> None:
    """Stores the program, evicting the least recently used beyond
    ``MAX_PROGRAMS``; an unwritable folder is left alone."""
    program, described = self._paths(name)
    data = exported.serialize()
    try:
      files.write_json(described, dict(description, sha256=_sha256([data])))
      files.write_bytes(program, data)
      self._evict()
    except OSError:
      pass

  def _evict(self) -> None:
    stored = sorted(
        self.folder.glob(f"*{_PROGRAM_SUFFIX}"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for program in stored[MAX_PROGRAMS:]:
      for path in self._paths(program.name.removesuffix(_PROGRAM_SUFFIX)):
        path.unlink(missing_ok=True)


class ExportedProgram:
  """A jitted function called through its exported form, kept in a ``Store``.
  ``describe`` turns an output (leaves None) into JSON and ``structure``
  rebuilds its tree structure from the arguments and that (JAX does not store
  it); a program whose structure does not rebuild is used in this process only.
  """

  def __init__(
      self,
      jitted: Callable[..., Any],
      store: Store,
      key: str,
      describe: Callable[[Any], Any],
      structure: Callable[[tuple[Any, ...], Any], Any],
  ):
    self._jitted = jitted
    self._store = store
    self._key = key
    self._describe = describe
    self._structure = structure
    # Per arguments key, and per stored name: (call, output structure), or
    # None for a function that is traced as usual.
    self._programs: dict[tuple[Any, ...], Any] = {}
    self._by_name: dict[str, Any] = {}

  def __call__(self, *args: Any) -> Any:
    leaves, in_tree = jax.tree.flatten(args)
    key = _arguments_key(in_tree, leaves)
    first = key not in self._programs
    if first:
      name = _sha256(
          [FORMAT, self._key, fingerprint(), _signature(in_tree, leaves)]
      )
      if name not in self._by_name:  # else: placed alike, the same program
        self._by_name[name] = self._prepare(args, leaves, in_tree, name)
      self._programs[key] = self._by_name[name]
    entry = self._programs[key]
    if entry is not None:
      call, out_tree = entry
      try:
        return jax.tree.unflatten(out_tree, call(*leaves))
      except Exception:  # the function's own call below decides
        if not first:
          raise
        self._programs[key] = None  # cannot run here: trace as usual
    return self._jitted(*args)

  def _prepare(self, args, leaves, in_tree, name):
    loaded = self._store.load(name)
    if loaded is not None:
      exported, stored = loaded
      try:
        out_tree = self._structure(args, stored.get("output"))
      except (TypeError, ValueError):  # a description of something else
        out_tree = None
      if (
          out_tree is not None
          and out_tree.num_leaves == len(exported.out_avals)
          and len(exported.in_avals) == len(leaves)
      ):
        global _loaded
        _loaded += 1
        return jax.jit(exported.call), out_tree
    try:
      exported, out_tree = _export(self._jitted, in_tree, leaves)
    except Exception:  # noqa: BLE001 - not exportable: traced as usual
      return None
    description = self._describe(
        jax.tree.unflatten(out_tree, [None] * out_tree.num_leaves)
    )
    if self._structure(args, description) == out_tree:
      self._store.save(
          name,
          exported,
          dict(format=FORMAT, jax=jax.__version__, output=description),
      )
    return jax.jit(exported.call), out_tree


def _export(jitted, in_tree, leaves) -> tuple[jax.export.Exported, Any]:
  """``jitted`` over the flattened arguments, exported, and its output's
  tree structure."""
  box = {}

  def flat(*flat_args):
    out = jitted(*jax.tree.unflatten(in_tree, flat_args))
    out_leaves, box["tree"] = jax.tree.flatten(out)
    return out_leaves

  exported = jax.export.export(jax.jit(flat))(*leaves)
  return exported, box["tree"]


def store(folder: str | os.PathLike[str] | None) -> Store | None:
  """The store in the compilation cache's ``folder`` (None: no folder, or
  several processes)."""
  if folder is None or jax.process_count() > 1:
    return None
  return Store(folder)


def loaded_count() -> int:
  """Programs this process took from a store instead of tracing them."""
  return _loaded
