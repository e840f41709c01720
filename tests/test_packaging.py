"""A plain (non-editable) install runs both launchers from any directory."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys

import pytest

import conftest


def _declared_packages() -> set[str]:
  parser = configparser.ConfigParser()
  parser.read(conftest.REPO_DIR / "setup.cfg")
  return set(parser["options"]["packages"].split())


def test_setup_cfg_lists_every_package():
  found = {
      ".".join(p.parent.relative_to(conftest.REPO_DIR).parts)
      for p in (conftest.REPO_DIR / "disco").rglob("__init__.py")
  }
  assert _declared_packages() == found | {"disco.configs"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """The package installed with pip (not editable) into a folder of its own;
  returns ``(folder, environment for subprocesses)``."""
  target = tmp_path_factory.mktemp("site")
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "pip",
          "install",
          "--quiet",
          "--no-deps",
          "--no-compile",
          "--target",
          str(target),
          str(conftest.REPO_DIR),
      ],
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  env = dict(os.environ, PYTHONPATH=str(target))
  return target, env


def _run(args, env, cwd):
  return subprocess.run(
      args, capture_output=True, text=True, env=env, cwd=cwd, timeout=600
  )


def test_installed_package_is_used_and_ships_the_configs(installed, tmp_path):
  target, env = installed
  result = _run(
      [
          sys.executable,
          "-c",
          "import disco, disco.configs.evaluate as c; "
          "print(disco.__file__); print(c.get_config().rule)",
      ],
      env,
      tmp_path,
  )
  assert result.returncode == 0, result.stderr
  path, rule = result.stdout.split()
  assert path.startswith(str(target)) and rule == "disco103"


def test_installed_disco_eval_runs_from_another_directory(installed, tmp_path):
  target, env = installed
  result = _run(
      [
          str(target / "bin" / "disco-eval"),
          "--config.rule=actor_critic",
          "--config.env_settings.rows=5",
          "--config.env_settings.columns=5",
          "--config.total_env_steps=50",
          "--config.rollout_len=5",
          "--config.batch_size=2",
          "--config.replay_capacity=0",
          "--config.min_replay_size=0",
          "--config.last_episodes=5",
          "--config.output_dir=out",
      ],
      env,
      tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert (
      json.loads((tmp_path / "out" / "summary.json").read_text())["rule"]
      == "actor_critic"
  )


@pytest.mark.slow  # 30 s; CI runs the installed disco-eval the same way
def test_installed_disco_meta_train_runs_from_another_directory(
    installed, tmp_path
):
  target, env = installed
  result = _run(
      [
          str(target / "bin" / "disco-meta-train"),
          "--config.num_meta_steps=1",
          "--config.batch_size=2",
          "--config.rollout_len=3",
          "--config.inner_steps=1",
          "--config.agent.network.dense=(8,)",
          "--config.agent.network.model_lstm_size=4",
          "--config.agent.network.model_head_hiddens=(4,)",
          "--config.value_fn.dense=(4,)",
          "--config.num_devices=1",
          "--config.output_dir=out",
      ],
      env,
      tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert (tmp_path / "out" / "meta_params.npz").is_file()


def test_accelerator_extras_match_the_jax_bounds():
  """``pip install -e '.[cuda12]'`` (or cuda13, tpu) installs JAX's own
  accelerator build within the same version bounds as the CPU install."""
  parser = configparser.ConfigParser()
  parser.read(conftest.REPO_DIR / "setup.cfg")
  requires = parser["options"]["install_requires"].split("\n")
  jax_bounds = next(r for r in requires if r.startswith("jax>="))[len("jax") :]
  extras = parser["options.extras_require"]
  for extra in ("cuda12", "cuda13", "tpu"):
    assert extras[extra].split() == [f"jax[{extra}]{jax_bounds}"], extra


# Imported by the functions that need them: about two seconds that every
# launcher process would otherwise pay before it parses its flags (orbax:
# when a run first writes or reads a checkpoint).
HEAVY_MODULES = (
    "scipy.stats",
    "rliable",
    "matplotlib",
    "pandas",
    "arch",
    "orbax",
    "rlax",
    "distrax",
    "tensorflow_probability",
    "evosax",
)


def _modules_imported_by(statements: str, modules: tuple[str, ...]) -> str:
  """Which of ``modules`` a fresh Python process has imported after running
  ``statements`` (the printed sorted list)."""
  code = (
      "import sys\n"
      + statements
      + f"print(sorted(m for m in {modules!r} if m in sys.modules))\n"
  )
  result = subprocess.run(
      [sys.executable, "-c", code],
      capture_output=True,
      text=True,
      check=True,
      cwd=conftest.REPO_DIR,
  )
  return result.stdout.strip().splitlines()[-1]


def test_launchers_start_without_statistics_plotting_or_checkpoint_libraries():
  statements = "from disco.launch import compare, distill, evaluate, meta_train, validate\n"
  assert _modules_imported_by(statements, HEAVY_MODULES) == "[]"


@pytest.mark.parametrize(
    "versions, refused",
    [
        (dict(pandas="3.0.1", arch="7.2.0"), True),
        (dict(pandas="2.3.3", arch="7.2.0"), False),
        (dict(pandas="3.0.1", arch="8.0.0"), False),
        (dict(pandas="3.0.1"), False),  # no arch installed
    ],
)
def test_pandas_3_beside_arch_7_is_refused_before_anything_runs(
    versions, refused
):
  from importlib import metadata  # pylint: disable=g-import-not-at-top

  from disco.scoring import aggregates  # pylint: disable=g-import-not-at-top

  def version(package):
    if package not in versions:
      raise metadata.PackageNotFoundError(package)
    return versions[package]

  if refused:
    with pytest.raises(ImportError, match="Install pandas<3"):
      aggregates.check_installed_versions(version)
  else:
    aggregates.check_installed_versions(version)


def test_initialising_a_disco_population_imports_no_rlax_or_distrax(tmp_path):
  """A warm meta-training start loads its meta-step already traced, so only
  the population's initialisation is traced: it needs neither library."""
  statements = (
      f"sys.path.insert(0, {str(conftest.REPO_DIR / 'tests')!r})\n"
      "import meta_settings\n"
      "from disco.meta import plan\n"
      "config = meta_settings.tiny_config(\n"
      f"    output_dir={str(tmp_path / 'run')!r}, compilation_cache='off'\n"
      ")\n"
      "plan.initial_state(plan.build(config))\n"
  )
  modules = ("rlax", "distrax", "tensorflow_probability")
  assert _modules_imported_by(statements, modules) == "[]"
