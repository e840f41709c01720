"""Tests for disco.weights: npz layout, atomic saves, Disco103 lookup."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
import urllib.error
import urllib.request

import numpy as np
import pytest

from disco import weights
from disco.weights import WeightsError


def _params():
  return {
      "lstm/linear": {
          "w": np.arange(6, dtype=np.float32).reshape(2, 3),
          "b": np.zeros(3, np.float32),
      },
      "lstm/~/meta_lstm/~unroll/mlp/~/linear_0": {
          "w": np.ones((4, 2), np.float64),
          "b": np.array([1, 2], np.int32),
      },
  }


@pytest.fixture
def hermetic(tmp_path, monkeypatch):
  """No $DISCO_WEIGHTS, cache under tmp, empty shared search, no network."""
  monkeypatch.delenv(weights.ENV_VAR, raising=False)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
  shared = tmp_path / "shared" / "weights" / weights.DISCO103_FILENAME
  monkeypatch.setattr(weights, "shared_candidates", lambda start=None: [shared])

  def no_network(url, timeout=None):
    raise urllib.error.URLError("network disabled in tests")

  monkeypatch.setattr(urllib.request, "urlopen", no_network)
  return tmp_path


def _fake_disco103(tmp_path, monkeypatch) -> bytes:
  """Saves a small params file and makes its digest the 'published' one."""
  path = weights.save_meta_params(tmp_path / "src.npz", _params())
  data = path.read_bytes()
  monkeypatch.setattr(
      weights, "DISCO103_SHA256", hashlib.sha256(data).hexdigest()
  )
  return data


def _serve(monkeypatch, data: bytes) -> list:
  calls = []

  def urlopen(url, timeout=None):
    calls.append((url, timeout))
    return io.BytesIO(data)

  monkeypatch.setattr(urllib.request, "urlopen", urlopen)
  return calls


# ----------------------------------------------------------------- layout ----


def test_flatten_unflatten_round_trip():
  flat = weights.flatten_params(_params())
  assert sorted(flat) == sorted(
      [
          "lstm/linear/w",
          "lstm/linear/b",
          "lstm/~/meta_lstm/~unroll/mlp/~/linear_0/w",
          "lstm/~/meta_lstm/~unroll/mlp/~/linear_0/b",
      ]
  )
  back = weights.unflatten_params(flat)
  assert weights.params_diff(back, _params()) == []
  np.testing.assert_array_equal(
      back["lstm/linear"]["w"], _params()["lstm/linear"]["w"]
  )


def test_unflatten_rejects_keys_without_module():
  with pytest.raises(WeightsError, match="module/name"):
    weights.unflatten_params({"w": np.zeros(2)})


def test_save_load_round_trip_values_dtypes_metadata(tmp_path):
  meta = {"rule": "disco", "config": {"hidden": 256, "gammas": [0.9, 0.99]}}
  path = weights.save_meta_params(tmp_path / "sub" / "p.npz", _params(), meta)
  loaded = weights.load_meta_params(path, expected=_params())
  for module, leaves in _params().items():
    for name, value in leaves.items():
      assert loaded[module][name].dtype == value.dtype
      np.testing.assert_array_equal(loaded[module][name], value)
  assert weights.load_metadata(path) == meta
  # Same on-disk layout as the published file: plain arrays, '/'-joined keys.
  with np.load(path, allow_pickle=False) as data:
    assert weights.METADATA_KEY in data.files
    assert data[weights.METADATA_KEY].shape == ()
    assert "lstm/linear/w" in data.files


def test_no_metadata_is_empty_dict(tmp_path):
  path = weights.save_meta_params(tmp_path / "p.npz", _params())
  assert weights.load_metadata(path) == {}
  with np.load(path, allow_pickle=False) as data:
    assert weights.METADATA_KEY not in data.files


def test_atomic_save_leaves_no_temp_files(tmp_path):
  weights.save_meta_params(tmp_path / "p.npz", _params())
  weights.save_meta_params(tmp_path / "p.npz", _params(), {"v": 2})
  assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]


def test_failed_save_keeps_old_file_and_no_temp(tmp_path):
  path = weights.save_meta_params(tmp_path / "p.npz", _params(), {"v": 1})
  with pytest.raises(WeightsError, match="JSON"):
    weights.save_meta_params(path, _params(), {"bad": object()})
  bad = {"m": {"w": np.array([object()], dtype=object)}}
  with pytest.raises(WeightsError, match="object array"):
    weights.save_meta_params(path, bad)
  assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]
  assert weights.load_metadata(path) == {"v": 1}


def test_non_finite_parameters_are_neither_saved_nor_loaded(tmp_path):
  """A diverged run's NaN or inf parameters never reach a file, and a file
  holding them (written by other means) is refused, naming the arrays."""
  for bad in (np.nan, np.inf):
    params = _params()
    params["lstm/linear"]["w"][0, 1] = bad
    with pytest.raises(WeightsError, match="non-finite.*lstm/linear/w"):
      weights.save_meta_params(tmp_path / "p.npz", params)
    assert not (tmp_path / "p.npz").exists()
    flat = weights.flatten_params(params)
    np.savez(tmp_path / "nan.npz", **flat)
    with pytest.raises(WeightsError, match="1 of its 4 arrays") as info:
      weights.load_meta_params(tmp_path / "nan.npz")
    assert "\n" not in str(info.value)


def test_shape_mismatch_diff_lists_offending_key(tmp_path):
  path = weights.save_meta_params(tmp_path / "p.npz", _params())
  expected = _params()
  expected["lstm/linear"]["w"] = np.zeros((2, 4), np.float32)
  expected["lstm/linear"]["b"] = np.zeros(3, np.float64)
  expected["other"] = {"w": np.zeros(1, np.float32)}
  del expected["lstm/~/meta_lstm/~unroll/mlp/~/linear_0"]["b"]
  with pytest.raises(WeightsError) as info:
    weights.load_meta_params(path, expected=expected)
  lines = str(info.value).splitlines()
  assert "  shape mismatch: lstm/linear/w: got (2, 3), expected (2, 4)" in lines
  assert (
      "  dtype mismatch: lstm/linear/b: got float32, expected float64" in lines
  )
  assert any(x.startswith("  missing key: other/w") for x in lines)
  assert any(
      x.startswith(
          "  unexpected key: lstm/~/meta_lstm/~unroll/mlp/~/linear_0/b"
      )
      for x in lines
  )


def test_check_params_match_accepts_shape_dtype_structs():
  jax = pytest.importorskip("jax")
  expected = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _params()
  )
  weights.check_params_match(_params(), expected)
  with pytest.raises(WeightsError, match="my rule"):
    weights.check_params_match({}, expected, what="my rule")


def test_truncated_file_clear_error(tmp_path):
  path = weights.save_meta_params(tmp_path / "p.npz", _params())
  data = path.read_bytes()
  path.write_bytes(data[: len(data) // 2])
  with pytest.raises(WeightsError, match="truncated or corrupt"):
    weights.load_meta_params(path)
  path.write_bytes(b"")
  with pytest.raises(WeightsError, match="delete it"):
    weights.load_meta_params(path)
  path.write_bytes(b"<html>not found</html>")
  with pytest.raises(WeightsError, match="not a valid .npz"):
    weights.load_meta_params(path)


def test_pickled_object_array_clear_error(tmp_path):
  path = tmp_path / "p.npz"
  np.savez(path, **{"m/w": np.array([{"a": 1}], dtype=object)})
  with pytest.raises(WeightsError, match="pickled"):
    weights.load_meta_params(path)


def test_missing_file_clear_error(tmp_path):
  with pytest.raises(WeightsError, match="does not exist"):
    weights.load_meta_params(tmp_path / "nope.npz")


# --------------------------------------------------------------- Disco103 ----


def test_cache_dir_respects_xdg(tmp_path, monkeypatch):
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
  assert weights.cache_dir() == tmp_path / "home" / ".cache" / "disco"
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert weights.cache_dir() == tmp_path / "xdg" / "disco"


def test_shared_candidates_walk_up(tmp_path):
  start = tmp_path / "work" / "main" / "disco"
  got = weights.shared_candidates(start)
  tail = Path("shared", "weights", "disco_103.npz")
  assert got[:3] == [
      start.resolve() / tail,
      start.resolve().parent / tail,
      start.resolve().parent.parent / tail,
  ]
  assert (tmp_path / "work" / tail).resolve() in got
  assert len(got) == len(set(got))


def test_search_order(hermetic, monkeypatch):
  tmp = hermetic
  explicit = tmp / "explicit.npz"
  env = tmp / "env.npz"
  xdg_cache = tmp / "xdg" / "disco" / weights.DISCO103_FILENAME
  home_cache = tmp / "home" / ".cache" / "disco" / weights.DISCO103_FILENAME
  shared = tmp / "shared" / "weights" / weights.DISCO103_FILENAME
  for p in (explicit, env, xdg_cache, home_cache, shared):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(p.name.encode())

  def published(p):
    monkeypatch.setattr(
        weights, "DISCO103_SHA256", hashlib.sha256(p.read_bytes()).hexdigest()
    )

  assert weights.find_disco103() == home_cache
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
  assert weights.find_disco103() == xdg_cache
  monkeypatch.setenv(weights.ENV_VAR, str(env))
  assert weights.find_disco103() == env
  published(env)
  assert weights.disco103_path() == env
  published(explicit)
  assert weights.disco103_path(explicit) == explicit

  monkeypatch.delenv(weights.ENV_VAR)
  xdg_cache.unlink()
  home_cache.unlink()
  assert weights.find_disco103() == shared
  shared.unlink()
  assert weights.find_disco103() is None


def test_explicit_missing_path_does_not_fall_back(hermetic, monkeypatch):
  data = _fake_disco103(hermetic, monkeypatch)
  monkeypatch.setenv(weights.ENV_VAR, str(hermetic / "src.npz"))
  calls = _serve(monkeypatch, data)
  with pytest.raises(WeightsError, match="given path"):
    weights.load_disco103(hermetic / "missing.npz")
  assert calls == []


def test_env_var_to_missing_file_is_an_error(hermetic, monkeypatch):
  monkeypatch.setenv(weights.ENV_VAR, str(hermetic / "missing.npz"))
  with pytest.raises(WeightsError, match=r"\$DISCO_WEIGHTS"):
    weights.find_disco103()


def test_download_into_cache(hermetic, monkeypatch):
  data = _fake_disco103(hermetic, monkeypatch)
  calls = _serve(monkeypatch, data)
  params = weights.load_disco103()
  assert calls == [(weights.DISCO103_URL, weights.DOWNLOAD_TIMEOUT_S)]
  assert weights.params_diff(params, _params()) == []
  cache = hermetic / "home" / ".cache" / "disco"
  assert [p.name for p in cache.iterdir()] == [weights.DISCO103_FILENAME]
  # Second call uses the cache, no new download.
  weights.load_disco103(expected=_params())
  assert len(calls) == 1


def test_download_wrong_bytes_leaves_nothing(hermetic, monkeypatch):
  _fake_disco103(hermetic, monkeypatch)
  _serve(monkeypatch, b"<html>rate limited</html>")
  with pytest.raises(WeightsError) as info:
    weights.load_disco103()
  msg = str(info.value)
  assert weights.DISCO103_SHA256 in msg and "nothing was saved" in msg
  cache = hermetic / "home" / ".cache" / "disco"
  assert not cache.exists() or list(cache.iterdir()) == []


def test_no_network_clear_error(hermetic):
  with pytest.raises(WeightsError) as info:
    weights.load_disco103()
  msg = str(info.value)
  assert "download failed" in msg
  assert weights.DISCO103_URL in msg
  assert "$DISCO_WEIGHTS" in msg and "manually" in msg
  assert str(hermetic / "home" / ".cache" / "disco" / "disco_103.npz") in msg
  assert str(hermetic / "shared" / "weights" / "disco_103.npz") in msg


def test_download_false_does_not_touch_network(hermetic, monkeypatch):
  calls = _serve(monkeypatch, b"")
  with pytest.raises(WeightsError, match="download=False"):
    weights.disco103_path(download=False)
  assert calls == []


def test_wrong_digest_clear_error(hermetic):
  path = weights.save_meta_params(hermetic / "other.npz", _params())
  with pytest.raises(WeightsError) as info:
    weights.load_disco103(path)
  msg = str(info.value)
  assert weights.DISCO103_SHA256 in msg
  assert hashlib.sha256(path.read_bytes()).hexdigest() in msg
  assert "delete it" in msg and "re-download" in msg


def test_wrong_digest_in_cache_is_not_used_silently(hermetic, monkeypatch):
  cached = hermetic / "home" / ".cache" / "disco" / weights.DISCO103_FILENAME
  weights.save_meta_params(cached, _params())
  with pytest.raises(WeightsError, match="not the published Disco103"):
    weights.load_disco103()


# ------------------------------------------------ shared-folder helper ----


def test_shared_path_check_skips_or_fails(
    tmp_path, monkeypatch, require_shared_path
):
  missing = tmp_path / "shared" / "weights" / weights.DISCO103_FILENAME
  monkeypatch.delenv("CI", raising=False)
  with pytest.raises(pytest.skip.Exception, match="Disco103 weights"):
    require_shared_path(missing, "Disco103 weights file")
  monkeypatch.setenv("CI", "false")
  with pytest.raises(pytest.skip.Exception):
    require_shared_path(missing, "Disco103 weights file")
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="CI=true"):
    require_shared_path(missing, "Disco103 weights file")
  missing.parent.mkdir(parents=True)
  missing.write_bytes(b"x")
  assert require_shared_path(missing, "Disco103 weights file") == missing


def test_real_disco103_from_shared_folder(tmp_path, monkeypatch, disco103_path):
  path = disco103_path
  shared = path.parent.parent
  sums = (shared / "weights" / "SHA256SUMS").read_text().split()
  assert sums[0] == weights.DISCO103_SHA256

  params = weights.load_disco103(path)
  flat = weights.flatten_params(params)
  assert len(flat) == 42
  assert all(v.dtype == np.float32 for v in flat.values())
  assert flat["lstm/lstm/linear/w"].shape == (283, 1024)
  assert flat["lstm/~/meta_lstm/~unroll/lstm/linear/b"].shape == (512,)
  with np.load(path, allow_pickle=False) as data:
    assert sorted(data.files) == sorted(flat)
    for k in data.files:
      np.testing.assert_array_equal(data[k], flat[k])

  # Found by the real walk-up search from the package, with an empty cache.
  monkeypatch.delenv(weights.ENV_VAR, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  assert weights.find_disco103().resolve() == path.resolve()
  weights.load_disco103(expected=params)

  # Re-saving reproduces the published layout and values.
  out = weights.save_meta_params(tmp_path / "copy.npz", params, {"rule": "x"})
  weights.load_meta_params(out, expected=params)


def test_real_disco103_download_with_fake_urlopen(
    hermetic, monkeypatch, disco103_path
):
  data = disco103_path.read_bytes()
  _serve(monkeypatch, data)
  params = weights.load_disco103()
  assert len(weights.flatten_params(params)) == 42
  cached = hermetic / "home" / ".cache" / "disco" / weights.DISCO103_FILENAME
  assert cached.read_bytes() == data
