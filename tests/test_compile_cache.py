"""Tests for the launchers' persistent compilation cache (disco.compile_cache)."""

from __future__ import annotations

import os
from pathlib import Path
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from disco import compile_cache
from disco import weights

import conftest

_LINE = re.compile(
    r"Compilation cache: (?P<folder>.+); (?P<hits>\d+) programs loaded, "
    r"(?P<compiled>\d+) compiled"
)


def test_resolve_default_folder_setting_and_off(monkeypatch, tmp_path):
  monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  # Beside the weights cache, under XDG_CACHE_HOME.
  assert compile_cache.resolve("") == tmp_path / "xdg" / "disco" / "jax"
  assert compile_cache.resolve(None) == weights.cache_dir() / "jax"
  # JAX's own variable names the default when it is set.
  monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "env"))
  assert compile_cache.resolve("") == tmp_path / "env"
  # An explicit folder wins; 'off' disables.
  assert compile_cache.resolve("~/x") == Path.home() / "x"
  for off in ("off", "OFF", " none ", "false", "0"):
    assert compile_cache.resolve(off) is None


@pytest.fixture
def restore_jax_cache_config():
  keys = (
      "jax_enable_compilation_cache",
      "jax_compilation_cache_dir",
      "jax_persistent_cache_min_compile_time_secs",
      "jax_persistent_cache_min_entry_size_bytes",
      "jax_compilation_cache_max_size",
  )
  saved = {k: getattr(jax.config, k) for k in keys}
  yield
  for k, v in saved.items():
    jax.config.update(k, v)
  compile_cache.jax_cache.reset_cache()


def test_unwritable_folder_warns_once_and_runs_uncached(
    tmp_path, capsys, restore_jax_cache_config
):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")
  folder = compile_cache.enable(str(blocker / "cache"), "disco-eval")
  assert folder is None
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  assert err.startswith("disco-eval: warning: the compilation cache folder")
  assert str(blocker / "cache") in err
  assert not jax.config.jax_enable_compilation_cache
  # The run goes on: programs still compile and run.
  assert float(jax.jit(lambda x: x * 2)(jnp.float32(3))) == 6.0


def test_a_world_writable_folder_is_warned_about(
    tmp_path, capsys, restore_jax_cache_config
):
  folder = tmp_path / "shared"
  folder.mkdir()
  folder.chmod(0o1777)  # even with the sticky bit: anyone may add programs
  assert compile_cache.enable(str(folder), "disco-eval") == folder
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  assert err.startswith("disco-eval: warning: the compilation cache folder")
  assert "writable by every user" in err
  folder.chmod(0o755)
  compile_cache.enable(str(folder), "disco-eval")
  assert capsys.readouterr().err == ""


def test_stats_count_compiled_and_loaded_programs(
    tmp_path, restore_jax_cache_config
):
  folder = compile_cache.enable(str(tmp_path / "cache"), "test")
  assert folder == tmp_path / "cache"
  assert jax.config.jax_compilation_cache_max_size == compile_cache.MAX_BYTES

  def program(scale):
    return jax.jit(lambda x: jnp.tanh(x * scale).sum())

  # Programs this process compiled before are compiled again (JAX's
  # in-memory caches are cleared), as in a new process.
  jax.clear_caches()
  stats = compile_cache.CompileStats()
  program(1.25)(jnp.ones(7))
  stats.close()
  assert stats.compiled >= 1 and stats.hits == 0
  assert any(p.name.endswith("-cache") for p in folder.iterdir())

  # The same programs built again are loaded from the folder.
  jax.clear_caches()
  stats = compile_cache.CompileStats()
  program(1.25)(jnp.ones(7))
  stats.close()
  assert stats.compiled == 0 and stats.hits >= 1, stats
  # A program loaded from the cache was still traced and lowered first.
  assert stats.trace_seconds > 0 and stats.lowering_seconds > 0, stats
  line = stats.describe(folder)
  assert "0 compiled" in line and " s tracing, " in line, line


def _eval(cache, out):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop(compile_cache.ENV_VAR, None)
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.rule=actor_critic",
          "--config.env_settings.rows=5",
          "--config.env_settings.columns=5",
          "--config.network.dense=(8,)",
          "--config.total_env_steps=200",
          "--config.num_envs=2",
          "--config.rollout_len=5",
          "--config.batch_size=4",
          "--config.replay_capacity=16",
          "--config.min_replay_size=4",
          "--config.iterations_per_call=10",
          "--config.last_episodes=5",
          f"--config.output_dir={out}",
          f"--config.compilation_cache={cache}",
      ],
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )


def test_second_launcher_process_compiles_nothing_new(tmp_path):
  cache = tmp_path / "cache"
  cold = _eval(cache, tmp_path / "cold")
  assert cold.returncode == 0, cold.stderr
  first = _LINE.search(cold.stdout)
  assert first, cold.stdout
  assert Path(first["folder"]) == cache
  assert int(first["compiled"]) > 0

  warm = _eval(cache, tmp_path / "warm")
  assert warm.returncode == 0, warm.stderr
  second = _LINE.search(warm.stdout)
  assert second, warm.stdout
  assert int(second["compiled"]) == 0, warm.stdout
  assert int(second["hits"]) >= int(first["compiled"])


def test_processes_the_tests_start_share_the_bounded_cache():
  # A JAX process that never enables the cache itself (a script, a kernel)
  # still writes to the tests' folder with the same bound (conftest.py).
  result = subprocess.run(
      [
          sys.executable,
          "-c",
          "import jax; c = jax.config; print(c.jax_compilation_cache_dir, "
          "c.jax_compilation_cache_max_size)",
      ],
      capture_output=True,
      text=True,
      timeout=120,
  )
  assert result.returncode == 0, result.stderr
  folder, bound = result.stdout.split()
  assert Path(folder) == conftest.TEST_CACHE_DIR
  assert int(bound) == compile_cache.MAX_BYTES


def test_repair_gives_unbounded_writers_programs_an_access_time(
    tmp_path, restore_jax_cache_config
):
  (tmp_path / "jit_f-abc-cache").write_bytes(b"program")
  (tmp_path / "jit_g-def-cache").write_bytes(b"program")
  (tmp_path / "jit_g-def-atime").write_bytes(b"12345678")
  assert compile_cache.repair(tmp_path) == 1
  assert (tmp_path / "jit_f-abc-atime").stat().st_size == 8
  assert (tmp_path / "jit_g-def-atime").read_bytes() == b"12345678"
  assert compile_cache.repair(tmp_path) == 0
  # The launchers repair the folder they enable.
  (tmp_path / "jit_h-ghi-cache").write_bytes(b"program")
  assert compile_cache.enable(str(tmp_path), "test") == tmp_path
  assert (tmp_path / "jit_h-ghi-atime").exists()
