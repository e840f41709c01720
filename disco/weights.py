"""Saving and loading meta-parameters, including the published Disco103 rule.

On disk: ``.npz`` archives keyed by haiku paths joined with ``/``
(``lstm/~/meta_lstm/~unroll/lstm/linear/b``), optional JSON metadata under
``__disco_metadata__``, loaded with ``allow_pickle=False``; in memory:
``{module_path: {param_name: array}}``. Non-finite parameters are neither saved
nor loaded (``NonFiniteError``). Loading checks every member's header against
the expected shapes and ``MAX_BYTES`` before decompressing, and accepts only
stored or deflate members, so a damaged or hostile file is one ``WeightsError``.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import hashlib
import http.client
import json
import math
import os
from pathlib import Path
from typing import Any
import urllib.request
import zipfile

import numpy as np

from disco import files

DISCO103_SHA256 = (
    "dac840a15b81e8805326363458c33979626172618f620d9e6e170315388530aa"
)
DISCO103_URL = (
    "https://raw.githubusercontent.com/google-deepmind/disco_rl/main/"
    "disco_rl/update_rules/weights/disco_103.npz"
)
DISCO103_FILENAME = "disco_103.npz"
ENV_VAR = "DISCO_WEIGHTS"
METADATA_KEY = "__disco_metadata__"
DOWNLOAD_TIMEOUT_S = 30.0
# Bounds on what a meta-parameter file may declare (checked before any data
# is decompressed): all arrays, the metadata, a large member's compression
# ratio (a network's floats barely compress).
MAX_BYTES = 1 << 30
MAX_METADATA_BYTES = 1 << 20
_BOMB_MIN_BYTES = 1 << 24
_BOMB_RATIO = 100
_NPY_MAGIC = b"\x93NUMPY"
# Member compressions whose reads ``zipfile`` bounds by the declared size.
_BOUNDED_COMPRESSION = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


class WeightsError(ValueError):
  """A meta-parameter file is missing, corrupt or does not fit the rule."""


class NonFiniteError(WeightsError):
  """Parameters hold a NaN or an infinity (e.g. from a diverged run)."""


# ----------------------------------------------------------------- layout ----


def _flat_items(params: Mapping[str, Any]) -> dict[str, Any]:
  """`/`-joined keys -> leaves (not converted); accepts nested or flat trees."""
  flat = {}
  for module, value in params.items():
    if isinstance(value, Mapping):
      for name, leaf in value.items():
        flat[f"{module}/{name}"] = leaf
    else:
      flat[module] = value
  return flat


def flatten_params(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """``{module: {name: array}}`` -> ``{'module/name': np.ndarray}``."""
  flat = {k: np.asarray(v) for k, v in _flat_items(params).items()}
  for key, value in flat.items():
    if "/" not in key or key.startswith("/") or key.endswith("/"):
      raise WeightsError(
          f'Parameter key {key!r} is not of the form "module/name": pass a '
          "haiku parameter tree {module_path: {param_name: array}}."
      )
    if value.dtype.kind == "O":
      raise WeightsError(
          f"Parameter {key!r} is an object array, which cannot be saved "
          "without pickling: convert it to a numeric array."
      )
  return flat


def unflatten_params(
    flat: Mapping[str, Any],
) -> dict[str, dict[str, np.ndarray]]:
  """``{'module/name': array}`` -> ``{module: {name: array}}``."""
  params: dict[str, dict[str, np.ndarray]] = {}
  for key, value in flat.items():
    module, sep, name = key.rpartition("/")
    if not sep or not module or not name:
      raise WeightsError(
          f'Parameter key {key!r} is not of the form "module/name" (haiku '
          'path joined with "/"): this is not a meta-parameter file.'
      )
    params.setdefault(module, {})[name] = np.asarray(value)
  return params


def _describe(leaf: Any) -> str:
  return f"shape {tuple(np.shape(leaf))} {np.dtype(leaf.dtype).name}"


def params_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
  """One line per difference in keys, shapes or dtypes of ``a`` (actual) from
  ``b`` (expected), leaves arrays or ``jax.ShapeDtypeStruct``; empty if they
  match."""
  fa, fb = _flat_items(a), _flat_items(b)
  lines = [
      f"missing key: {k} (expected {_describe(fb[k])})"
      for k in sorted(fb.keys() - fa.keys())
  ]
  lines += [
      f"unexpected key: {k} ({_describe(fa[k])})"
      for k in sorted(fa.keys() - fb.keys())
  ]
  for k in sorted(fa.keys() & fb.keys()):
    shape_a, shape_b = tuple(np.shape(fa[k])), tuple(np.shape(fb[k]))
    if shape_a != shape_b:
      lines.append(f"shape mismatch: {k}: got {shape_a}, expected {shape_b}")
    dtype_a, dtype_b = np.dtype(fa[k].dtype), np.dtype(fb[k].dtype)
    if dtype_a != dtype_b:
      lines.append(
          f"dtype mismatch: {k}: got {dtype_a.name}, "
          f"expected {dtype_b.name}"
      )
  return lines


def check_params_match(
    actual: Mapping[str, Any],
    expected: Mapping[str, Any],
    what: str = "meta-parameters",
) -> None:
  """Raises `WeightsError` listing every difference in keys/shapes/dtypes."""
  diff = params_diff(actual, expected)
  if diff:
    raise WeightsError(
        f"{what} do not match the expected parameter tree "
        f"({len(diff)} problem(s)):\n  "
        + "\n  ".join(diff)
        + "\nThe weights were probably made for a different rule or "
        "configuration: use the matching file or configuration."
    )


def _non_finite(flat: Mapping[str, np.ndarray], path: Path, doing: str) -> None:
  """Raises ``WeightsError`` if a floating-point array of ``flat`` holds a
  NaN or an infinity."""
  bad = [
      k
      for k, v in flat.items()
      if v.dtype.kind in "fc" and not np.all(np.isfinite(v))
  ]
  if bad:
    names = ", ".join(bad[:3]) + (
        f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    )
    raise NonFiniteError(
        f"{doing} {path}: {len(bad)} of its {len(flat)} arrays hold non-finite "
        f"values (NaN or inf: {names}), as after training diverged. Use "
        "parameters from before the divergence (e.g. an earlier checkpoint)."
    )


# -------------------------------------------------------------- save/load ----


def save_meta_params(
    path: str | os.PathLike[str],
    params: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
  """Atomically writes ``params`` (and JSON ``metadata``) as an ``.npz``.

  Raises:
    WeightsError: a key is not ``module/name``, an array holds objects or a
      non-finite value, or the metadata is not JSON.
  """
  path = Path(path).expanduser()
  flat = flatten_params(params)
  _non_finite(flat, path, "Not saving")
  if metadata is not None:
    try:
      text = json.dumps(dict(metadata), sort_keys=True)
    except (TypeError, ValueError) as e:
      raise WeightsError(
          f"Metadata for {path} is not JSON-serialisable ({e}): pass plain "
          "dicts/lists/strings/numbers."
      ) from e
    flat[METADATA_KEY] = np.array(text)
  with files.atomic_write(path) as f:
    np.savez(f, **flat)
  return path


@dataclasses.dataclass(frozen=True)
class ArrayHeader:
  """What an ``.npy`` member of an ``.npz`` declares in its header."""

  shape: tuple[int, ...]
  dtype: np.dtype
  fortran_order: bool

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize


def _member_key(name: str) -> str:
  return name[: -len(".npy")] if name.endswith(".npy") else name


def _refuse_other_formats(path: Path) -> None:
  """Raises ``WeightsError`` for a file that is not a zip archive (one line
  saying what it is instead)."""
  with open(path, "rb") as f:
    start = f.read(8)
  if start.startswith(_NPY_MAGIC):
    raise WeightsError(
        f"{path} is a single .npy array, not an .npz archive of "
        "meta-parameters: save them with disco.weights.save_meta_params "
        "(or np.savez with one 'module/name' key per array)."
    )
  if not zipfile.is_zipfile(path):
    raise WeightsError(
        f"{path} is not a valid .npz archive (not a zip file): it is "
        "truncated or corrupt (e.g. an interrupted download or copy), or of "
        "another format; delete it and save (save_meta_params) or download "
        "it again."
    )


def _compression_name(method: int) -> str:
  names = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
  return names.get(method, "unknown")


class NpzFile:
  """An ``.npz`` opened once, its members' headers checked before any data is
  decompressed; ``max_bytes`` bounds what all arrays declare when no expected
  shapes are given.

  Raises:
    WeightsError: a missing or non-zip file; a member that is not a numeric
      ``.npy``, whose size differs from its header, that compresses implausibly
      well, or is neither stored nor deflated; arrays beyond ``max_bytes``.
  """

  def __init__(self, path: str | os.PathLike[str], max_bytes: int = MAX_BYTES):
    self.path = Path(path).expanduser()
    self.max_bytes = max_bytes
    if not self.path.is_file():
      raise WeightsError(
          f"Meta-parameter file {self.path} does not exist (or is not a "
          "file): check the path."
      )
    try:
      _refuse_other_formats(self.path)
      self._zip = zipfile.ZipFile(self.path)
    except OSError as e:
      raise WeightsError(f"Cannot read {self.path}: {e}.") from e
    except zipfile.BadZipFile as e:
      raise self._corrupt(e) from e
    try:
      self.headers = self._read_headers()
    except BaseException:
      self.close()
      raise

  def _corrupt(self, e: BaseException) -> WeightsError:
    return WeightsError(
        f"{self.path} could not be read as an .npz archive "
        f"({type(e).__name__}: {e}). It is probably truncated or corrupt "
        "(e.g. an interrupted download or copy): delete it and save or "
        "download it again."
    )

  def _read_header(self, info: zipfile.ZipInfo) -> ArrayHeader:
    with self._zip.open(info) as f:
      version = np.lib.format.read_magic(f)
      if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
      elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
      else:
        raise ValueError(f"unsupported .npy format version {version}")
      offset = f.tell()
    header = ArrayHeader(tuple(int(d) for d in shape), dtype, bool(fortran))
    if dtype.hasobject:
      raise WeightsError(
          f"{self.path} contains a pickled (object) array "
          f"({_member_key(info.filename)}), which is refused for safety. "
          "Meta-parameter files must hold numeric arrays only: re-save them "
          "with save_meta_params."
      )
    if header.nbytes != info.file_size - offset:
      raise WeightsError(
          f"{self.path}: array {_member_key(info.filename)} declares "
          f"{header.nbytes} bytes ({dtype.name}{list(header.shape)}) but its "
          f"member holds {info.file_size - offset}: the file is corrupt."
      )
    return header

  def _read_headers(self) -> dict[str, ArrayHeader]:
    headers, total = {}, 0
    for info in self._zip.infolist():
      key = _member_key(info.filename)
      if not info.filename.endswith(".npy"):
        raise WeightsError(
            f"{self.path} holds {info.filename!r}, which is not an .npy "
            "array: this is not a meta-parameter file."
        )
      if info.compress_type not in _BOUNDED_COMPRESSION:
        raise WeightsError(
            f"{self.path}: array {key} is compressed with method "
            f"{info.compress_type} ({_compression_name(info.compress_type)}); "
            "a meta-parameter file holds stored or deflate members only (as "
            "np.savez and np.savez_compressed write them): refused before "
            "decompressing it."
        )
      if (
          info.file_size > _BOMB_MIN_BYTES
          and info.file_size > _BOMB_RATIO * max(info.compress_size, 1)
      ):
        raise WeightsError(
            f"{self.path}: array {key} declares {info.file_size} bytes "
            f"compressed into {info.compress_size} (a zip bomb, or not a "
            "meta-parameter file): refused before decompressing it."
        )
      try:
        headers[key] = self._read_header(info)
      except (ValueError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise self._corrupt(e) from e
      if key != METADATA_KEY:
        total += headers[key].nbytes
    if total > self.max_bytes:
      raise WeightsError(
          f"{self.path}: its arrays declare {total} bytes, more than the "
          f"{self.max_bytes} a meta-parameter file may hold: refused before "
          "decompressing them."
      )
    meta = headers.get(METADATA_KEY)
    if meta is not None and (meta.shape or meta.nbytes > MAX_METADATA_BYTES):
      raise WeightsError(
          f"{self.path}: its metadata is not a short JSON string "
          f"({meta.dtype.name}{list(meta.shape)}, {meta.nbytes} bytes)."
      )
    return headers

  def close(self) -> None:
    self._zip.close()

  def __enter__(self) -> NpzFile:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _read_array(self, key: str) -> np.ndarray:
    try:
      with self._zip.open(key + ".npy") as f:
        return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile, OSError) as e:
      raise self._corrupt(e) from e

  def metadata(self) -> dict[str, Any]:
    """The metadata saved with the file (``{}`` if there is none)."""
    if METADATA_KEY not in self.headers:
      return {}
    value = self._read_array(METADATA_KEY)
    try:
      metadata = json.loads(str(value))
    except ValueError as e:
      raise WeightsError(
          f"Metadata in {self.path} is not valid JSON ({e}): the file is "
          "corrupt or was not written by save_meta_params."
      ) from e
    if not isinstance(metadata, dict):
      raise WeightsError(f"Metadata in {self.path} is not a JSON object.")
    return metadata

  def params(
      self, expected: Mapping[str, Any] | None = None
  ) -> dict[str, dict[str, np.ndarray]]:
    """The parameters, checked against ``expected`` (keys, shapes and dtypes,
    from the headers) before any data is read.

    Raises:
      WeightsError: a tree that does not match ``expected``, or non-finite
        values.
    """
    keys = [k for k in self.headers if k != METADATA_KEY]
    for key in keys:
      module, sep, name = key.rpartition("/")
      if not sep or not module or not name:
        raise WeightsError(
            f"Parameter key {key!r} in {self.path} is not of the form "
            '"module/name" (haiku path joined with "/"): this is not a '
            "meta-parameter file."
        )
    if expected is not None:
      check_params_match(
          {k: self.headers[k] for k in keys},
          expected,
          what=f"Meta-parameters in {self.path}",
      )
    flat = {k: self._read_array(k) for k in keys}
    _non_finite(flat, self.path, "Refusing")
    return unflatten_params(flat)


def load_meta_params(
    path: str | os.PathLike[str],
    expected: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
  """Loads params from ``path``, checked against ``expected`` (if given) before
  their data is read.

  Raises:
    WeightsError: a missing or unreadable file, non-finite values, or a tree
      that does not match ``expected``.
  """
  with NpzFile(path) as npz:
    return npz.params(expected)


def load_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
  """The metadata saved with ``path`` (``{}`` if none); no other array is read."""
  with NpzFile(path) as npz:
    return npz.metadata()


# --------------------------------------------------------------- Disco103 ----


def cache_dir() -> Path:
  """``$XDG_CACHE_HOME/disco`` if set, else ``~/.cache/disco``."""
  base = os.environ.get("XDG_CACHE_HOME")
  return (Path(base) if base else Path.home() / ".cache") / "disco"


def shared_candidates(
    start: str | os.PathLike[str] | None = None,
) -> list[Path]:
  """``D/shared/weights/disco_103.npz`` and
  ``D/../shared/weights/disco_103.npz`` for every folder ``D`` from ``start``
  (default: this module's folder) up."""
  start = Path(start) if start is not None else Path(__file__).parent
  start = start.resolve()
  out: list[Path] = []
  for d in (start, *start.parents):
    for root in (d, d.parent):
      candidate = root / "shared" / "weights" / DISCO103_FILENAME
      if candidate not in out:
        out.append(candidate)
  return out


def _env_path() -> Path | None:
  value = os.environ.get(ENV_VAR)
  if not value:
    return None
  path = Path(value).expanduser()
  if not path.is_file():
    raise WeightsError(
        f"${ENV_VAR} is set to {value!r}, but no such file exists: fix or "
        f"unset ${ENV_VAR}."
    )
  return path


def find_disco103() -> Path | None:
  """``$DISCO_WEIGHTS``, the cache, then the ``shared/weights`` folders; None if
  not found (no download, no digest check).

  Raises:
    WeightsError: ``$DISCO_WEIGHTS`` names a missing file.
  """
  env = _env_path()
  if env is not None:
    return env
  for candidate in (cache_dir() / DISCO103_FILENAME, *shared_candidates()):
    if candidate.is_file():
      return candidate
  return None


def _sha256(path: Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def verify_disco103(path: str | os.PathLike[str]) -> Path:
  """Raises `WeightsError` unless ``path`` has the published sha256."""
  path = Path(path)
  actual = _sha256(path)
  if actual != DISCO103_SHA256:
    raise WeightsError(
        f"{path} is not the published Disco103 file: sha256 is\n"
        f"  {actual}, expected\n  {DISCO103_SHA256}.\n"
        "The file is corrupt (e.g. a truncated download) or a different "
        f"file: delete it and re-download it from {DISCO103_URL} (or pass "
        "the path of a good copy)."
    )
  return path


def _download_disco103(dest: Path) -> Path:
  """Downloads into ``dest`` atomically, only once the digest checks out."""
  with urllib.request.urlopen(DISCO103_URL, timeout=DOWNLOAD_TIMEOUT_S) as r:
    data = r.read()
  actual = hashlib.sha256(data).hexdigest()
  if actual != DISCO103_SHA256:
    raise WeightsError(
        f"The download from {DISCO103_URL} has sha256 {actual}, expected "
        f"{DISCO103_SHA256} ({len(data)} bytes received): nothing was saved. "
        "Retry later, or download the file manually, check its sha256 and "
        f"pass its path or set ${ENV_VAR}."
    )
  with files.atomic_write(dest) as f:
    f.write(data)
  return dest


def disco103_path(
    path: str | os.PathLike[str] | None = None, *, download: bool = True
) -> Path:
  """Locates (or downloads) the Disco103 weights and verifies their sha256.

  Order: ``path`` (an error if missing, no fallback), ``$DISCO_WEIGHTS``,
  ``$XDG_CACHE_HOME/disco`` (or ``~/.cache/disco``), ``shared/weights`` beside
  the checkout, then (if ``download``) a download from ``DISCO103_URL`` into the
  cache.
  """
  if path is not None:
    found = Path(path).expanduser()
    if not found.is_file():
      raise WeightsError(
          f"Disco103 weights not found at the given path {found}: check the "
          "path, or pass path=None to search the usual places "
          f"(${ENV_VAR}, {cache_dir()}, shared/weights) and download."
      )
    return verify_disco103(found)
  found = find_disco103()
  if found is not None:
    return verify_disco103(found)
  cached = cache_dir() / DISCO103_FILENAME
  looked = "\n  ".join(
      [f"${ENV_VAR} (unset)", str(cached), *map(str, shared_candidates())]
  )
  advice = (
      f"Download {DISCO103_URL} manually (sha256 {DISCO103_SHA256}) "
      f"and pass its path (load_disco103(path=...)), set ${ENV_VAR} to "
      f"it, or put it at {cached}."
  )
  if not download:
    raise WeightsError(
        f"Disco103 weights not found (download=False). Looked in:\n  "
        f"{looked}\n{advice}"
    )
  try:
    return _download_disco103(cached)
  except (OSError, http.client.HTTPException) as e:
    raise WeightsError(
        f"Disco103 weights not found and the download failed "
        f"({type(e).__name__}: {e}). Looked in:\n  {looked}\n"
        f"URL: {DISCO103_URL}\n{advice}"
    ) from e


def load_disco103(
    path: str | os.PathLike[str] | None = None,
    *,
    download: bool = True,
    expected: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
  """The published Disco103 meta-parameters (see `disco103_path`)."""
  return load_meta_params(disco103_path(path, download=download), expected)
