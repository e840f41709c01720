"""The tests' XLA pipeline (tests/conftest.py): cheap unless a test is
marked ``xla_optimized`` or ``slow``, in-process and for subprocesses."""

from __future__ import annotations

import os

import jax
import pytest

import conftest


def _level() -> tuple[bool, str]:
  return (
      jax.config.read("jax_disable_most_optimizations"),
      os.environ[conftest.OPTIMIZATION_ENV],
  )


def test_unmarked_tests_compile_with_the_cheap_pipeline():
  if not conftest.CHEAP_XLA:
    pytest.skip(f"{conftest.OPTIMIZATION_ENV}=0: the full pipeline everywhere")
  assert _level() == (True, "1")


@pytest.mark.xla_optimized
def test_marked_tests_compile_with_the_full_pipeline():
  assert _level() == (False, "0")


@pytest.fixture(scope="module")
def level_of_module_fixture():
  return _level()


@pytest.mark.xla_optimized
def test_fixtures_of_a_marked_test_compile_at_its_level(
    level_of_module_fixture,
):
  assert level_of_module_fixture == (False, "0")


def test_longest_files_first_names_test_files(pytestconfig):
  # A renamed file would silently fall back to the alphabetical order.
  for name in conftest.LONGEST_FILES_FIRST:
    assert (conftest.REPO_DIR / "tests" / name).is_file(), name
  # Without it, pytest-xdist reorders the files by their number of tests.
  if pytestconfig.pluginmanager.hasplugin("xdist"):
    assert pytestconfig.getoption("loadscopereorder") is False
