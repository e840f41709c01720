"""Shared test set-up: two host devices, a persistent JAX compilation cache
and the shared folder.

Compilation dominates the run time of these tests on CPU, so compiled
programs are cached on disk and reused across runs, and across checkouts and
clean clones on the same machine: in ``$XDG_CACHE_HOME/disco/jax-tests``
(``~/.cache/disco/jax-tests``), beside the launchers' own cache folder, or in
``$JAX_COMPILATION_CACHE_DIR`` when set. The variable is exported, so the
launcher and notebook processes the tests start share the folder. Programs
are keyed by their HLO, compile options and JAX version, so a changed
program misses; delete the folder to clear it.

The golden fixtures and the Disco103 weights live in a ``shared`` folder beside
the checkout (``<repo>/../shared``). Tests that need them skip with a clear
reason when it is absent, except on CI (``CI=true``), where they fail instead,
so a CI run can never pass by silently skipping its parity checks.
"""

from __future__ import annotations

from collections.abc import Callable
import os
from pathlib import Path

# Two host devices for the whole session (set before JAX starts), so that
# sharded code runs on several devices in-process; a caller's own XLA_FLAGS
# device count wins.
if "xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
  os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "")
      + " --xla_force_host_platform_device_count=2"
  ).strip()

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import compile_cache
from disco import weights

REPO_DIR = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_DIR.parent / "shared"
DISCO103_FILENAME = "disco_103.npz"

# ------------------------------------------------ compilation cache ----
# The folder and its settings, in this process and, through the environment
# (JAX reads ``JAX_<OPTION>`` at import), in every JAX process the tests
# start: launchers, notebook kernels, scripts that never enable the cache
# themselves. Every writer must use the same size bound. A writer without
# one skips the cache's file lock and writes no access-time file, and every
# bounded writer after it then fails on the missing file ("Error writing
# persistent compilation cache entry"), so its programs are never stored
# (``compile_cache.repair`` mends a folder left so).
CACHE_SETTINGS = {  # option: value unless its JAX_<OPTION> variable is set
    "jax_compilation_cache_dir": str(weights.cache_dir() / "jax-tests"),
    "jax_compilation_cache_max_size": compile_cache.MAX_BYTES,
    "jax_persistent_cache_min_compile_time_secs": 0.1,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}
for _option, _value in CACHE_SETTINGS.items():
  _value = type(_value)(os.environ.setdefault(_option.upper(), str(_value)))
  jax.config.update(_option, _value)
TEST_CACHE_DIR = Path(jax.config.jax_compilation_cache_dir)
compile_cache.repair(TEST_CACHE_DIR)

# ------------------------------------------------- XLA optimisation ----
# Most tests compile a program, run it a few times at tiny sizes and check
# what it computes; XLA's cheap pipeline (``jax_disable_most_optimizations``:
# backend optimisation level 0, no expensive LLVM passes) takes 40-57% less
# CPU time to compile a meta-step (BENCHMARKS.md, "Where the meta-step's
# cold compile goes"; the whole suite: "CI"). It changes float
# rounding, not semantics. Tests marked ``xla_optimized`` (or ``slow``)
# compile with the full pipeline users get: the parity checks against the
# published implementation, comparisons of two programs bit for bit, and the
# learning checks, whose run time the cheap pipeline lengthens. Launcher and
# notebook subprocesses inherit the level through the environment variable.
# ``JAX_DISABLE_MOST_OPTIMIZATIONS=0 python -m pytest`` runs every test at
# the full pipeline.
OPTIMIZATION_ENV = "JAX_DISABLE_MOST_OPTIMIZATIONS"
CHEAP_XLA = os.environ.get(OPTIMIZATION_ENV, "1").strip().lower() not in (
    "0",
    "false",
)


def set_cheap_xla(cheap: bool) -> None:
  """Compiles what follows with XLA's cheap pipeline, or its full one, in
  this process and the subprocesses it starts. Programs compiled at the
  other level are dropped from JAX's in-memory caches, so that no test runs
  a program compiled for another (the persistent cache keys on the level)."""
  if jax.config.read("jax_disable_most_optimizations") != cheap:
    jax.clear_caches()
  jax.config.update("jax_disable_most_optimizations", cheap)
  os.environ[OPTIMIZATION_ENV] = "1" if cheap else "0"


set_cheap_xla(CHEAP_XLA)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
  # Before the test's fixtures are set up, so that they compile at its level.
  full = any(item.get_closest_marker(m) for m in ("xla_optimized", "slow"))
  set_cheap_xla(CHEAP_XLA and not full)


# -------------------------------------------------------- file order ----
# The longest test files, longest first (test-seconds of a profile,
# BENCHMARKS.md "CI"). pytest-xdist hands whole files to its two workers
# (``--dist loadfile``) in collection order (``--no-loadscope-reorder`` in
# pyproject.toml; its default orders files by their number of tests), so a
# long file handed out last kept one worker busy while the other sat idle;
# longest first leaves the short files to even out the end. Within a file
# the order is unchanged.
LONGEST_FILES_FIRST = (
    "test_population.py",
    "test_distributed.py",
    "test_parity.py",
    "test_distillation.py",
    "test_meta_notebook.py",
    "test_meta_train.py",
    "test_validation.py",
    "test_disco_rule.py",
    "test_training.py",
    "test_python_api.py",
    "test_meta_estimators.py",
    "test_compare_notebook.py",
    "test_compile_cache.py",
    "test_program_cache.py",
    "test_lpg.py",
    "test_continuous_actions.py",
    "test_mpo_spo_continuous.py",
    "test_env_brax.py",
    "test_env_craftax.py",
    "test_mpo_spo.py",
    "test_packaging.py",
    "test_notebooks.py",
    "test_level_samplers.py",
    "test_episode_boundaries.py",
    "test_divergence.py",
    "test_mixed_precision.py",
    "test_env_xminigrid.py",
    "test_env_contract.py",
    "test_evaluate_launcher.py",
    "test_tracking.py",
    "test_compare_launcher.py",
)


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# --------------------------------------------------------- rollouts ----
def step_fields(not_last, truncated=None) -> dict:
  """``step_types`` and ``discounts`` of an ``ActorRollout`` from a bool
  array that is False at episode ends (terminations, unless ``truncated``
  marks them as time limits)."""
  from disco import types

  not_last = np.asarray(not_last, bool)
  truncated = (
      np.zeros_like(not_last)
      if truncated is None
      else np.asarray(truncated, bool)
  )
  return dict(
      step_types=jnp.asarray(
          np.where(not_last, types.MID, types.LAST), jnp.int32
      ),
      discounts=jnp.asarray(not_last | truncated, jnp.float32),
  )


def assert_copies_step_alike(env, actions, copies: int = 3) -> None:
  """Copies of a batched environment state stacked along a new axis 1 (as
  SPO's search holds them) step exactly like the original; ``actions``
  ``[B]``."""
  state, _ = env.reset(jax.random.PRNGKey(5))
  for _ in range(3):
    state, _ = env.step(state, actions)
  expected = jax.device_get(env.step(state, actions))
  stacked = jax.tree.map(lambda x: jnp.stack([x] * copies, axis=1), state)
  stepped = jax.vmap(env.step, in_axes=(1, None), out_axes=1)(stacked, actions)
  stepped = jax.device_get(stepped)
  for k in range(copies):
    jax.tree.map(
        np.testing.assert_array_equal,
        jax.tree.map(lambda x, k=k: x[:, k], stepped),
        expected,
    )


# --------------------------------------------------- shared folder ----
def on_ci() -> bool:
  return os.environ.get("CI", "").strip().lower() == "true"


def require_path(path: Path, what: str) -> Path:
  """Returns ``path`` if it exists; otherwise skips the test (fails on CI)."""
  path = Path(path)
  if path.exists():
    return path
  msg = (
      f"{what} is absent: {path} does not exist (the shared folder beside "
      f"the checkout holds the weights and golden fixtures)"
  )
  if on_ci():
    pytest.fail(f"{msg}; CI=true, so the shared folder is required")
  pytest.skip(msg)


@pytest.fixture(scope="session")
def require_shared_path() -> Callable[[Path, str], Path]:
  """``require(path, what)``: the skip-or-fail check the fixtures below use."""
  return require_path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
  """``<repo>/../shared``."""
  return require_path(SHARED_DIR, "shared folder")


@pytest.fixture(scope="session")
def fixtures_dir(shared_dir) -> Path:
  """``shared/fixtures``: golden outputs of the published implementation."""
  return require_path(shared_dir / "fixtures", "golden fixtures folder")


@pytest.fixture(scope="session")
def disco103_path(shared_dir) -> Path:
  """``shared/weights/disco_103.npz``: the published Disco103 weights."""
  return require_path(
      shared_dir / "weights" / DISCO103_FILENAME, "Disco103 weights file"
  )


# ------------------------------------------------------------ notebooks ----


def require_python3_kernel() -> None:
  """Skips (fails on CI) unless a ``python3`` Jupyter kernel is installed."""
  from jupyter_client import kernelspec

  try:
    kernelspec.KernelSpecManager().get_kernel_spec("python3")
  except kernelspec.NoSuchKernel:
    message = (
        "no 'python3' Jupyter kernel: run "
        "`python -m ipykernel install --sys-prefix`"
    )
    if on_ci():
      pytest.fail(message)
    pytest.skip(message)


def parameters_cell(nb):
  """The notebook's first code cell, which must be the one tagged
  ``parameters`` (papermill style)."""
  code = [c for c in nb.cells if c.cell_type == "code"]
  tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
  assert len(tagged) == 1, "exactly one cell must be tagged 'parameters'"
  assert tagged[0] is code[0], "the parameters cell must be the first code cell"
  return tagged[0]


def check_notebook_is_generated(
    nb, notebook: Path, generator: Path, monkeypatch
) -> None:
  """``notebook`` is what ``generator``'s ``build()`` writes, without outputs."""
  import importlib.util

  import nbformat

  monkeypatch.syspath_prepend(str(generator.parent))  # notebook_cells
  spec = importlib.util.spec_from_file_location(generator.stem, generator)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)

  assert nbformat.writes(module.build()).strip() == (
      notebook.read_text().strip()
  ), f"{notebook.name} is stale: run python colabs/{generator.name}"
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert not cell.outputs and cell.execution_count is None


def run_notebook(nb, monkeypatch) -> tuple[str, int]:
  """Executes ``nb`` in place on the ``python3`` kernel from ``colabs/``
  (sharing the test session's compilation cache); returns its text output and
  the number of PNG images it displayed."""
  import nbclient

  client = nbclient.NotebookClient(
      nb,
      timeout=600,
      kernel_name="python3",
      resources={"metadata": {"path": str(REPO_DIR / "colabs")}},
  )
  client.execute()
  text, images = [], 0
  for cell in nb.cells:
    for out in cell.get("outputs", []):
      if out.output_type == "stream":
        text.append(out.text)
      elif out.output_type in ("execute_result", "display_data"):
        text.append(out.data.get("text/plain", ""))
        images += "image/png" in out.data
  return "".join(text), images
