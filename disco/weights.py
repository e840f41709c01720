"""Saving and loading meta-parameters, including the published Disco103 rule.

On disk, meta-parameters are ``.npz`` archives (``np.savez``) whose keys are
haiku parameter paths joined with ``/``, ending with the parameter name, e.g.
``lstm/linear/w`` or ``lstm/~/meta_lstm/~unroll/lstm/linear/b``: the module
path is everything before the last ``/``. In memory they use the haiku layout
``{module_path: {param_name: array}}``.

Optional metadata (rule name, config, ...) is stored as a JSON string in a 0-d
unicode array under the reserved key ``__disco_metadata__``, so every file
loads with ``allow_pickle=False``.

Parameters with non-finite values (NaN or infinity, e.g. from a run that
diverged) are neither saved nor loaded: both raise ``WeightsError``.

``load_disco103`` finds the published Disco103 weights (explicit path,
``$DISCO_WEIGHTS``, the user cache, a ``shared/weights`` folder beside the
checkout, or a download into the cache) and always checks their sha256.
"""

from __future__ import annotations

from collections.abc import Mapping
import hashlib
import http.client
import json
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
  """Human-readable differences of ``a`` (actual) relative to ``b`` (expected).

  Compares keys, shapes and dtypes only (leaves may be arrays or
  ``jax.ShapeDtypeStruct``); returns one line per problem, empty if equal.
  """
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


def _read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
  """Every array of an ``.npz`` (metadata key included), errors explained."""
  path = Path(path).expanduser()
  if not path.is_file():
    raise WeightsError(
        f"Meta-parameter file {path} does not exist (or is not a file): "
        "check the path."
    )
  try:
    with np.load(path, allow_pickle=False) as data:
      return {k: data[k] for k in data.files}
  except ValueError as e:
    if zipfile.is_zipfile(path) and "pickle" in str(e):
      raise WeightsError(
          f"{path} contains a pickled (object) array, which is refused for "
          "safety (allow_pickle=False). Meta-parameter files must hold "
          "numeric arrays only: re-save them with save_meta_params."
      ) from e
    raise WeightsError(
        f"{path} is not a valid .npz archive ({e}). The file is corrupt, "
        "truncated or of another format: delete it and save or download it "
        "again."
    ) from e
  except (zipfile.BadZipFile, OSError, EOFError) as e:
    raise WeightsError(
        f"{path} could not be read as an .npz archive "
        f"({type(e).__name__}: {e}). It is probably truncated or corrupt "
        "(e.g. an interrupted download or copy): delete it and save or "
        "download it again."
    ) from e


def load_meta_params(
    path: str | os.PathLike[str],
    expected: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
  """Loads params from ``path``; checks them against ``expected`` if given.

  Raises:
    WeightsError: a missing or unreadable file, non-finite values, or a
      tree that does not match ``expected``.
  """
  flat = _read_npz(path)
  flat.pop(METADATA_KEY, None)
  _non_finite(flat, Path(path).expanduser(), "Refusing")
  params = unflatten_params(flat)
  if expected is not None:
    check_params_match(params, expected, what=f"Meta-parameters in {path}")
  return params


def load_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
  """The metadata saved with ``path`` (``{}`` if there is none)."""
  value = _read_npz(path).get(METADATA_KEY)
  if value is None:
    return {}
  try:
    metadata = json.loads(str(value))
  except ValueError as e:
    raise WeightsError(
        f"Metadata in {path} is not valid JSON ({e}): the file is corrupt or "
        "was not written by save_meta_params."
    ) from e
  if not isinstance(metadata, dict):
    raise WeightsError(f"Metadata in {path} is not a JSON object.")
  return metadata


# --------------------------------------------------------------- Disco103 ----


def cache_dir() -> Path:
  """``$XDG_CACHE_HOME/disco`` if set, else ``~/.cache/disco``."""
  base = os.environ.get("XDG_CACHE_HOME")
  return (Path(base) if base else Path.home() / ".cache") / "disco"


def shared_candidates(
    start: str | os.PathLike[str] | None = None,
) -> list[Path]:
  """``D/shared/weights/...`` and ``D/../shared/weights/...`` for D above start.

  ``start`` defaults to this module's directory (so a checkout at
  ``/work/main`` finds ``/work/shared/weights/disco_103.npz``).
  """
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
  """Searches ``$DISCO_WEIGHTS``, the cache, then ``shared/weights`` folders.

  Does not download nor check the digest. Raises `WeightsError` if
  ``$DISCO_WEIGHTS`` names a missing file (rather than silently ignoring it).
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

  Order: explicit ``path`` (an error if missing, no fallback),
  ``$DISCO_WEIGHTS``, ``$XDG_CACHE_HOME/disco`` (or ``~/.cache/disco``),
  ``shared/weights`` beside the checkout, then (if ``download``) a download
  from `DISCO103_URL` into the cache.
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
