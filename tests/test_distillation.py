"""Tests for distillation (disco.distillation, disco-distill): a student
Disco meta-network fitted to a teacher's targets."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import jax
import nbformat
import numpy as np
import pytest

from disco import distillation
from disco import errors
from disco import weights
from disco.distillation import dataset as dataset_lib
from disco.distillation import fitting
from disco.update_rules import resolve

import conftest
from meta_settings import subprocess_env

# Catch 5x5, 2 envs x 5 steps, a replay of 16: two agents per environment,
# two samples each, 20 fitting steps.
TINY = dict(
    envs=("catch:rows=5,columns=5",),
    held_out_envs=("catch:rows=6,columns=6",),
    dataset=dict(
        num_seeds=2,
        total_env_steps=400,
        samples_per_seed=2,
        num_envs=2,
        rollout_len=5,
        batch_size=4,
        replay_capacity=16,
        min_replay_size=4,
        iterations_per_call=10,
    ),
    fit=dict(steps=20, log_every=10),
)


def tiny_config(**overrides):
  return distillation.make_config(**{**TINY, **overrides})


NOTEBOOK = conftest.REPO_DIR / "colabs" / "distill.ipynb"
TINY_LOOP = (
    "dict(num_envs=2, rollout_len=5, batch_size=4, replay_capacity=16, "
    "min_replay_size=4, iterations_per_call={})"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory, disco103_path):
  """One tiny distillation of Disco103 into a flat student (no action-
  conditional model) at ``TINY``'s sizes, by the notebook (which runs the
  library's ``distill``, then trains agents with the student file): its run
  folder and output."""
  conftest.require_python3_kernel()
  out = tmp_path_factory.mktemp("distill") / "run"
  nb = nbformat.read(NOTEBOOK, as_version=4)
  data = TINY["dataset"]
  conftest.parameters_cell(nb).source = f"""\
teacher = 'disco103'
student_hidden_size = 64
student_agent = 'flat'
envs = {TINY['envs']!r}
held_out_envs = {TINY['held_out_envs']!r}
num_seeds = {data['num_seeds']}
total_env_steps = {data['total_env_steps']}
samples_per_seed = {data['samples_per_seed']}
loop = {TINY_LOOP.format(data['iterations_per_call'])}
fit_steps = {TINY['fit']['steps']}
log_every = {TINY['fit']['log_every']}
output_dir = {str(out)!r}
eval_rows, eval_columns = 5, 5
eval_env_steps = 100
eval_seeds = 2
eval_loop = {TINY_LOOP.format(5)}
"""
  mp = pytest.MonkeyPatch()
  mp.setenv("DISCO_WEIGHTS", str(disco103_path))
  text, images = conftest.run_notebook(nb, mp)
  mp.undo()
  yield dict(
      out=out,
      summary=json.loads((out / "summary.json").read_text()),
      text=text,
      images=images,
  )


def test_notebook_is_valid_and_up_to_date(monkeypatch):
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  conftest.parameters_cell(nb)
  conftest.check_notebook_is_generated(
      nb, NOTEBOOK, NOTEBOOK.parent / "make_distill_notebook.py", monkeypatch
  )


def test_notebook_runs(run):
  text = run["text"]
  assert "meta-parameters: teacher 754,778, student " in text
  assert "held_out catch:rows=6,columns=6" in text and "untrained" in text
  assert "teacher: mean return over the last episodes" in text
  assert "student: mean return over the last episodes" in text
  assert run["images"] == 2  # the fit, the learning curves


def _shards(run, **overrides):
  settings = distillation.DistillSettings.from_config(
      tiny_config(output_dir=str(run["out"]), **overrides)
  )
  teacher = resolve.resolve_rule(settings.teacher)
  lines = []
  shards = dataset_lib.gather(
      settings, teacher, run["out"] / "dataset", lines.append
  )
  return teacher, shards, lines


def test_run_writes_its_outputs(run):
  out, summary = run["out"], run["summary"]
  for name in ("config.json", "fit.csv", "fit.png", "agreement.csv"):
    assert (out / name).is_file(), name
  assert sorted(p.name for p in (out / "dataset").glob("*.npz")) == [
      "held_out-0.npz",
      "train-0.npz",
  ]
  assert json.loads((out / "summary.json").read_text())["teacher"] == "disco103"
  assert summary["student_meta_params"] < summary["teacher_meta_params"] / 5
  rows = list(csv.DictReader((out / "agreement.csv").open()))
  assert {(r["split"], r["who"]) for r in rows} == {
      (split, who)
      for split in ("train", "held_out")
      for who in ("student", "untrained")
  }
  for row in rows:
    assert row["samples"] == "4"  # 2 agents x 2 points
    assert 0.0 <= float(row["pi_top1"]) <= 1.0
    # A flat student learns the pi and y targets only.
    assert all(np.isfinite(float(row[f"{k}_kl"])) for k in ("pi", "y"))
    assert "z_kl" not in row
  fit = list(csv.DictReader((out / "fit.csv").open()))
  assert [int(r["step"]) for r in fit] == [10, 20]
  assert list(fit[0]) == ["step", "loss", "pi_kl", "y_kl"]


def test_loss_is_zero_for_a_student_that_is_the_teacher(run):
  teacher, shards, _ = _shards(run)
  shard = shards[0]
  pair = fitting.Pair(shard, teacher.meta_params, teacher.rule)
  costs = dict(pi_cost=1.0, y_cost=1.0, z_cost=1.0)
  loss_fn = jax.jit(
      lambda params, sample, state: fitting.sample_loss(
          pair, costs, params, sample, state
      )
  )
  for i in range(shard.num_samples):
    sample = jax.tree.map(lambda x, i=i: x[i], shard.samples)
    state = sample["rule_state"]["rnn_state"]
    loss, kls = loss_fn(teacher.meta_params, sample, state)
    # Zero up to float32 rounding (XLA fuses the two networks' identical
    # computations differently).
    assert abs(float(loss)) < 1e-6, (i, kls)
  # ... and not for another student, nor the teacher at another lifetime
  # state: the loss sees both.
  nudged = jax.tree.map(lambda w: w * 1.05, teacher.meta_params)
  assert float(loss_fn(nudged, sample, state)[0]) > 1e-4
  zeros = jax.tree.map(np.zeros_like, state)
  assert float(loss_fn(teacher.meta_params, sample, zeros)[0]) > 1e-4


def test_the_student_file_loads_and_evaluates(run):
  path = run["out"] / distillation.STUDENT_FILE
  metadata = weights.load_metadata(path)
  assert (
      metadata["rule"] == "disco" and metadata["distilled_from"] == "disco103"
  )
  assert "CC-BY 4.0" in metadata["licence"]
  rule = resolve.resolve_rule(str(path))
  net = rule.rule.net_config
  assert (net.hidden_size, net.meta_hidden_size) == (64, 0)
  assert net.lifetime_conditioning and net.prediction_size == 600
  assert net.input_option == "flat" and not rule.rule.action_model
  # Without student_torso, the teacher's agent network (none in the file).
  assert "settings" not in metadata
  assert tuple(rule.settings.network["dense"]) == (512, 512)
  assert set(rule.rule.agent_output_spec(3)) == {"logits", "y", "q"}
  # A student of it, in turn, carries the same terms.
  teacher = resolve.resolve_rule(str(path))
  assert distillation.outputs._licence(teacher, str(path)) == (
      metadata["licence"]
  )
  # The notebook trained agents with it (evaluation.run on its path).
  found = re.search(
      r"student: mean return over the last episodes (\S+)", run["text"]
  )
  assert found and np.isfinite(float(found.group(1))), run["text"][-2000:]


def test_a_student_with_the_teachers_agent_fits_and_exports(run, tmp_path):
  """The default ``student_agent='teacher'`` on the run's dataset: the
  student learns all three targets and keeps Disco103's agent (its action-
  conditional model and z, aux_pi, q outputs), here with a torso of its
  own that its file carries."""
  out = tmp_path / "teacher_agent"
  summary = distillation.distill(
      tiny_config(
          student_torso=(32,),
          dataset=dict(TINY["dataset"], folder=str(run["out"] / "dataset")),
          fit=dict(steps=10, log_every=10),
          output_dir=str(out),
      ),
      log=lambda _: None,
  )
  fit = list(csv.DictReader((out / "fit.csv").open()))
  assert list(fit[0]) == ["step", "loss", "pi_kl", "y_kl", "z_kl"]
  rows = list(csv.DictReader((out / "agreement.csv").open()))
  assert all(np.isfinite(float(r["z_kl"])) for r in rows)
  path = out / distillation.STUDENT_FILE
  kwargs = weights.load_metadata(path)["rule_kwargs"]
  assert kwargs["action_model"] is True
  assert kwargs["net"]["input_option"] == "disco103"
  resolved = resolve.resolve_rule(str(path))
  assert tuple(resolved.settings.network["dense"]) == (32,)
  student = resolved.rule
  assert student.action_model and student.target_heads == ("pi", "y", "z")
  assert set(student.agent_output_spec(3)) == {
      "logits",
      "y",
      "z",
      "aux_pi",
      "q",
  }
  assert summary["student_meta_params"] < summary["teacher_meta_params"] / 5


def test_the_dataset_is_reused_and_checked(run):
  _, shards, lines = _shards(run)
  assert not lines  # both shards read, nothing gathered
  assert [s.split for s in shards] == ["train", "held_out"]
  assert all(s.num_samples == 4 for s in shards)
  with pytest.raises(
      errors.UsageError, match="other settings .*total_env_steps"
  ):
    _shards(run, dataset=dict(TINY["dataset"], total_env_steps=500))


def test_a_stopped_gathering_resumes_at_the_missing_shard(
    run, tmp_path, monkeypatch
):
  """Only the environments without a shard train again (here: the held-out
  one; its training is replaced by a stop)."""
  folder = tmp_path / "dataset"
  folder.mkdir()
  (folder / "train-0.npz").write_bytes(
      (run["out"] / "dataset" / "train-0.npz").read_bytes()
  )
  trained = []

  class Stop(Exception):
    pass

  def gather_one(plan, *unused):
    trained.append(plan.settings.env_settings)
    raise Stop

  monkeypatch.setattr(dataset_lib, "_gather_one", gather_one)
  settings = distillation.DistillSettings.from_config(tiny_config())
  teacher = resolve.resolve_rule(settings.teacher)
  lines = []
  with pytest.raises(Stop):
    dataset_lib.gather(settings, teacher, folder, lines.append)
  assert trained == [{"rows": 6, "columns": 6}], trained
  assert len(lines) == 1 and lines[0].startswith("Gathering held_out"), lines
  assert sorted(p.name for p in folder.iterdir()) == ["train-0.npz"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(teacher="actor_critic"), "not a Disco meta-network rule"),
        (
            dict(student=dict(prediction_size=64)),
            "teacher's targets y and z have 600 entries",
        ),
        (dict(student=dict(meta_hidden_size=8)), "per-lifetime LSTM"),
        (dict(envs=("catchh",)), "Unknown environment 'catchh'"),
        (dict(fit=dict(steps=0)), "fit.steps must be >= 1"),
        (dict(student_agent="tiny"), "student_agent='tiny': give one of"),
        (dict(student_torso=(0, 8)), "student_torso=.* positive integers"),
        (
            dict(student_agent="flat", student=dict(input_option="disco103")),
            "only the action-conditional model gives",
        ),
        (
            dict(student_agent="flat", fit=dict(pi_cost=0.0, y_cost=0.0)),
            r"costs of the student's targets \('pi', 'y'\) are all 0",
        ),
    ],
)
def test_mismatches_and_bad_settings_are_one_line(
    overrides, message, tmp_path, disco103_path, monkeypatch
):
  monkeypatch.setenv("DISCO_WEIGHTS", str(disco103_path))
  out = tmp_path / "run"
  with pytest.raises(errors.UsageError, match=message) as e:
    distillation.distill(tiny_config(output_dir=str(out), **overrides))
  assert "\n" not in str(e.value)
  assert not out.exists()  # refused before the run folder was made


def test_launcher_refuses_a_mismatched_student_with_exit_2(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.distill",
          "--config.student.prediction_size=64",
          f"--config.output_dir={tmp_path / 'run'}",
      ],
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 2, result.stderr[-2000:]
  lines = [x for x in result.stderr.splitlines() if "error" in x]
  assert lines == [
      "disco-distill: error: config.student.prediction_size=64 but the "
      "teacher's targets y and z have 600 entries: the student must predict "
      "targets of the teacher's size (drop the setting)."
  ], result.stderr[-2000:]
