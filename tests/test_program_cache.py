"""Traced programs kept on disk (disco/program_cache.py): a later process
takes the meta-step from the store instead of tracing it, and computes the
same numbers."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from disco import program_cache
from disco.meta import plan as plan_lib

import meta_settings


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _State:
  x: jax.Array
  count: jax.Array


def _traced_function():
  """A jitted ``(state, scale) -> (state, {'total': ...})`` and the list
  that grows by one whenever it is traced."""
  traces = []

  @jax.jit
  def step(state, scale):
    traces.append(1)
    new = _State(x=jnp.tanh(state.x * scale), count=state.count + 1)
    return new, {"total": new.x.sum(), "first": new.x[0]}

  return step, traces


def _describe(out):
  return sorted(out[1])


def _structure(args, names):
  return jax.tree.structure((args[0], dict.fromkeys(names, 0)))


def _program(step, folder, key="settings", structure=_structure):
  return program_cache.ExportedProgram(
      step, program_cache.Store(folder), key, _describe, structure
  )


_STATE = _State(x=jnp.linspace(-1.0, 1.0, 5), count=jnp.zeros([], jnp.int32))


def _expected():
  x = np.tanh(np.linspace(-1.0, 1.0, 5, dtype=np.float32) * 1.5)
  return x, {"total": x.sum(), "first": x[0]}


def _check(out):
  state, logs = out
  x, expected_logs = _expected()
  assert isinstance(state, _State)
  np.testing.assert_allclose(state.x, x, rtol=1e-6)
  assert int(state.count) == 1
  assert sorted(logs) == sorted(expected_logs)
  for k, v in expected_logs.items():
    np.testing.assert_allclose(logs[k], v, rtol=1e-6)


def test_a_second_program_is_loaded_not_traced(tmp_path):
  # Each process has its own function object: a new one per program.
  step, traces = _traced_function()
  _check(_program(step, tmp_path)(_STATE, 1.5))
  assert len(traces) == 1
  assert len(list((tmp_path / program_cache.FOLDER).glob("*.jaxexport"))) == 1

  before = program_cache.loaded_count()
  step, traces = _traced_function()
  _check(_program(step, tmp_path)(_STATE, 1.5))
  assert not traces  # taken from the store
  assert program_cache.loaded_count() == before + 1

  # Another key, or other argument shapes, trace afresh.
  step, traces = _traced_function()
  _check(_program(step, tmp_path, key="other settings")(_STATE, 1.5))
  assert len(traces) == 1
  bigger = _State(x=jnp.zeros([6]), count=_STATE.count)
  step, traces = _traced_function()
  out, _ = _program(step, tmp_path)(bigger, 1.5)
  assert out.x.shape == (6,) and len(traces) == 1


def test_a_corrupt_or_unrebuildable_program_is_traced_again(tmp_path):
  step, traces = _traced_function()
  _program(step, tmp_path)(_STATE, 1.5)
  (stored,) = (tmp_path / program_cache.FOLDER).glob("*.jaxexport")
  stored.write_bytes(b"not a program")
  step, traces = _traced_function()
  _check(_program(step, tmp_path)(_STATE, 1.5))
  assert len(traces) == 1
  assert stored.read_bytes() != b"not a program"  # stored afresh
  described = json.loads(stored.with_suffix(".json").read_text())
  stored.with_suffix(".json").write_text(json.dumps(dict(described, output=3)))
  step, traces = _traced_function()
  _check(_program(step, tmp_path)(_STATE, 1.5))
  assert len(traces) == 1

  # An output structure the caller cannot rebuild is used, not stored.
  other = tmp_path / "other"
  wrong = lambda args, names: jax.tree.structure(dict.fromkeys(names, 0))
  _check(_program(step, other, structure=wrong)(_STATE, 1.5))
  assert not list((other / program_cache.FOLDER).glob("*"))


def test_a_changed_constant_in_a_stored_program_is_caught(tmp_path):
  """A stored program whose constant 0.999 was changed to 0.25 on disk
  still deserialises and runs (to other numbers): its digest, saved with it,
  makes it a miss with one warning, and the result is right."""

  def make():
    traces = []

    @jax.jit
    def step(state, scale):
      traces.append(1)
      new = _State(x=state.x * scale * 0.999, count=state.count + 1)
      return new, {"total": new.x.sum(), "first": new.x[0]}

    return step, traces

  warnings = []

  def program(step):
    store = program_cache.Store(tmp_path, warn=warnings.append)
    return program_cache.ExportedProgram(
        step, store, "settings", _describe, _structure
    )

  step, _ = make()
  program(step)(_STATE, 1.5)
  (stored,) = (tmp_path / program_cache.FOLDER).glob("*.jaxexport")
  content = stored.read_bytes()
  constant = np.float32(0.999).tobytes()
  assert content.count(constant) == 1
  stored.write_bytes(content.replace(constant, np.float32(0.25).tobytes()))
  step, traces = make()
  state, _ = program(step)(_STATE, 1.5)
  np.testing.assert_allclose(state.x, np.asarray(_STATE.x) * 1.5 * 0.999)
  assert len(traces) == 1  # traced again, not loaded
  (line,) = warnings
  assert "differs from the digest" in line and str(stored) in line
  assert stored.read_bytes().count(constant) == 1  # stored afresh


def test_a_function_that_cannot_be_exported_is_traced(tmp_path):
  seen = []

  @jax.jit
  def step(state, scale):
    jax.debug.callback(lambda v: seen.append(float(v)), scale)
    new = _State(x=jnp.tanh(state.x * scale), count=state.count + 1)
    return new, {"total": new.x.sum(), "first": new.x[0]}

  _check(_program(step, tmp_path)(_STATE, 1.5))
  assert seen == [1.5]
  assert not list((tmp_path / program_cache.FOLDER).glob("*.jaxexport"))


def test_the_store_keeps_the_most_recently_used(tmp_path, monkeypatch):
  monkeypatch.setattr(program_cache, "MAX_PROGRAMS", 2)
  step, _ = _traced_function()
  for i in range(3):
    _program(step, tmp_path, key=f"k{i}")(_STATE, 1.5)
  assert len(list((tmp_path / program_cache.FOLDER).glob("*.jaxexport"))) == 2
  assert len(list((tmp_path / program_cache.FOLDER).glob("*.json"))) == 2


def test_the_loaded_meta_step_computes_what_the_traced_one_does(
    tmp_path, monkeypatch
):
  folder = tmp_path / "cache"
  monkeypatch.setattr(plan_lib.compile_cache, "enabled_folder", lambda: folder)
  config = meta_settings.tiny_config(
      **meta_settings.TINY_LPG, output_dir=str(tmp_path / "run")
  )

  def one_step():
    plan = plan_lib.build(config)
    state = plan_lib.initial_state(plan)
    return plan.population, state, plan.population.step(state)

  population, state, stored = one_step()
  assert len(list((folder / program_cache.FOLDER).glob("*.jaxexport"))) == 1
  before = program_cache.loaded_count()
  _, _, loaded = one_step()
  assert program_cache.loaded_count() == before + 1
  traced = population._step(*population._step_args(state))  # plain jit
  traced = (state.replace(**traced[0]), traced[1])
  for a, b, c in zip(
      jax.tree.leaves(traced),
      jax.tree.leaves(stored),
      jax.tree.leaves(loaded),
      strict=True,
  ):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_copies_of_the_package_in_two_folders_share_the_fingerprint(tmp_path):
  """The key holds disco's sources, not where they lie, so that clones of one
  commit share their stored programs; editing a source changes it."""
  package = Path(program_cache.__file__).resolve().parent
  roots = [tmp_path / "a", tmp_path / "elsewhere" / "b"]
  for root in roots:
    shutil.copytree(
        package, root / "disco", ignore=shutil.ignore_patterns("*.pyc")
    )

  def fingerprint(root):
    code = "from disco import program_cache; print(program_cache.fingerprint())"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(root)),
    ).stdout.strip()

  first = fingerprint(roots[0])
  assert fingerprint(roots[1]) == first
  ops = roots[1] / "disco" / "ops.py"
  ops.write_text(ops.read_text() + "\n# changed\n")
  assert fingerprint(roots[1]) != first
