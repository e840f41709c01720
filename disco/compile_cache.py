"""The launchers' persistent compilation cache: ``enable`` turns on JAX's
on-disk cache (``$JAX_COMPILATION_CACHE_DIR``, else
``$XDG_CACHE_HOME/disco/jax``; LRU-bounded by ``MAX_BYTES``; shared by processes
under a lock; cleared by deleting it); ``CompileStats`` counts what it saved."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
import stat
import sys
import tempfile
import time
import warnings

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache
import jax.monitoring

from disco import errors
from disco import program_cache
from disco import weights as weights_lib

# Values of the launchers' ``compilation_cache`` setting that turn it off.
OFF_VALUES = ("off", "none", "false", "0")
# The cache's size bound: beyond it the least recently used programs are
# evicted.
MAX_BYTES = 4 * 2**30
ENV_VAR = "JAX_COMPILATION_CACHE_DIR"
# The folder `enable` turned on in this process (None: off).
_enabled: Path | None = None

_HITS = "/jax/compilation_cache/cache_hits"
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
# Recorded for top-level programs only (a jit traced inside another is not
# counted twice).
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"


def default_dir() -> Path:
  """``$JAX_COMPILATION_CACHE_DIR`` if set, else ``<cache>/disco/jax``."""
  from_env = os.environ.get(ENV_VAR)
  if from_env:
    return Path(from_env).expanduser()
  return weights_lib.cache_dir() / "jax"


def resolve(setting: str | None) -> Path | None:
  """The cache folder a ``compilation_cache`` setting names: ``''`` (or None)
  ``default_dir``, ``'off'`` None, anything else a folder."""
  setting = (setting or "").strip()
  if setting.lower() in OFF_VALUES:
    return None
  return Path(setting).expanduser() if setting else default_dir()


def _writable(folder: Path) -> str | None:
  """None if ``folder`` can be created and written, else why not."""
  try:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
      pass
  except OSError as e:
    return e.strerror or str(e)
  return None


def world_writable(folder: Path) -> bool:
  """Whether every user may add files to ``folder`` (even with the sticky bit)."""
  try:
    return bool(folder.stat().st_mode & stat.S_IWOTH)
  except OSError:
    return False


def repair(folder: Path) -> int:
  """Gives every program in ``folder`` lacking an access-time file one (as an
  unbounded JAX process stores them; bounded writes fail without); returns how
  many it repaired."""
  repaired = 0
  for stored in Path(folder).glob("*-cache"):
    atime = stored.with_name(stored.name.removesuffix("cache") + "atime")
    if not atime.exists():
      atime.write_bytes(time.time_ns().to_bytes(8, "little"))
      repaired += 1
  return repaired


def enable(setting: str | None, program: str) -> Path | None:
  """Turns on JAX's persistent compilation cache for this process, given the
  launcher's ``compilation_cache`` setting (``resolve``); returns its folder, or
  None when off or unwritable (then one warning line on stderr; the run goes on
  uncached)."""
  global _enabled
  _enabled = None
  folder = resolve(setting)
  # JAX decides once per process whether the cache is used: decide again.
  jax_cache.reset_cache()
  if folder is None:
    jax.config.update("jax_enable_compilation_cache", False)
    return None
  problem = _writable(folder)
  if problem is not None:
    print(
        f"{program}: warning: the compilation cache folder {folder} cannot "
        f"be written ({problem}); running without the cache (set "
        "--config.compilation_cache to a writable folder, or to 'off').",
        file=sys.stderr,
    )
    jax.config.update("jax_enable_compilation_cache", False)
    return None
  if world_writable(folder):
    print(
        f"{program}: warning: the compilation cache folder {folder} is "
        "writable by every user, and it holds native programs this process "
        f"runs: make it private (chmod o-w {folder}) or set "
        "--config.compilation_cache to a folder of your own.",
        file=sys.stderr,
    )
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", str(folder))
  # Every program is kept, however quick to compile.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  # A bound turns on the cache's file lock and LRU eviction.
  jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
  repair(folder)
  _enabled = folder
  _fold_write_warnings(program)
  return folder


# JAX's warning for each program it cannot write to the cache.
_WRITE_WARNING = "Error writing persistent compilation cache entry"


class _WriteWarnings:
  """Shows JAX's "cannot write to the cache" warnings (one per program) as one
  line, once; other warnings as ``shown`` does."""

  def __init__(self, shown):
    self.shown = shown
    self.program = ""
    self.said = False

  def __call__(self, message, category, filename, lineno, file=None, line=None):
    text = str(message)
    if not text.startswith(_WRITE_WARNING):
      self.shown(message, category, filename, lineno, file, line)
    elif not self.said:
      self.said = True
      reason = errors.one_line(text.partition("': ")[2] or text)
      print(
          f"{self.program}: warning: compiled programs cannot be written to "
          f"the compilation cache folder {_enabled} "
          f"({reason}); the run "
          "goes on, and later runs compile them again.",
          file=sys.stderr,
      )


def _fold_write_warnings(program: str) -> None:
  """Routes this process's warnings through one ``_WriteWarnings``."""
  fold = warnings.showwarning
  if not isinstance(fold, _WriteWarnings):
    fold = warnings.showwarning = _WriteWarnings(fold)
  fold.program, fold.said = program, False


def enabled_folder() -> Path | None:
  """The folder the last `enable` of this process turned on (None: none)."""
  return _enabled


@dataclasses.dataclass
class CompileStats:
  """Counts this process's compilations from its creation: ``programs`` handed
  to XLA, of them ``hits`` loaded from the cache, and seconds in XLA
  (``backend_seconds``), tracing (``trace_seconds``) and lowering
  (``lowering_seconds``)."""

  programs: int = 0
  hits: int = 0
  backend_seconds: float = 0.0
  trace_seconds: float = 0.0
  lowering_seconds: float = 0.0
  # Traced programs taken from `program_cache` stores before this began.
  _traced_before: int = dataclasses.field(init=False, default=0, repr=False)

  def __post_init__(self):
    self._traced_before = program_cache.loaded_count()
    jax.monitoring.register_event_listener(self._on_event)
    jax.monitoring.register_event_duration_secs_listener(self._on_duration)

  def _on_event(self, event: str, **_) -> None:
    if event == _HITS:
      self.hits += 1

  def _on_duration(self, event: str, seconds: float, **_) -> None:
    if event == _BACKEND_COMPILE:
      self.programs += 1
      self.backend_seconds += seconds
    elif event == _TRACE:
      self.trace_seconds += seconds
    elif event == _LOWER:
      self.lowering_seconds += seconds

  def close(self) -> None:
    """Stops counting."""
    jax.monitoring.unregister_event_listener(self._on_event)
    jax.monitoring.unregister_event_duration_listener(self._on_duration)

  @property
  def compiled(self) -> int:
    """Programs compiled by XLA (not found in the cache)."""
    return self.programs - self.hits

  def describe(self, folder: Path | None) -> str:
    """One line: where the cache is and what it saved."""
    seconds = (
        f"{self.backend_seconds:.1f} s in XLA; before it "
        f"{self.trace_seconds:.1f} s tracing, "
        f"{self.lowering_seconds:.1f} s lowering"
    )
    if folder is None:
      return (
          f"Compilation cache: off; {self.compiled} programs compiled "
          f"({seconds})."
      )
    traced = program_cache.loaded_count() - self._traced_before
    kept = f"; {traced} traced program(s) loaded" if traced else ""
    return (
        f"Compilation cache: {folder}; {self.hits} programs loaded, "
        f"{self.compiled} compiled ({seconds}{kept})."
    )
