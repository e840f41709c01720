"""Several processes as one run (``jax.distributed`` on CPU with Gloo).

The multi-process tests start real launcher processes on this machine, one
host device each, joined through a coordinator on a free local port; every
process a test starts is killed when the test ends (``Processes``). They are
the expensive tests here, so they share one uninterrupted 2-process
meta-training run (``killed_and_resumed``: process 1 dies before meta-step
3, then both resume to meta-step 4).

Tolerances: a population of 2 agents on 2 devices (of one or two processes)
runs the same per-device program, and the mean of two meta-gradients is the
same float sum in either order, so those runs agree exactly. On one device
the two agents are vmapped together, which changes the rounding of the
agents' own computations (about 1e-7 relative per operation, as in
``test_population.py``); 4 meta-steps of Adam amplify that to below 1e-4 of
the meta-parameters' scale.
"""

from __future__ import annotations

from collections.abc import Sequence
import json
import os
from pathlib import Path
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from disco import comparison
from disco import distributed
from disco import errors
from disco import evaluation
from disco import weights as weights_lib
from disco.meta import run_folder
from disco.meta import settings
from disco.meta import trainer as mt
from disco.training import analysis

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import TINY_LPG_FLAGS
from meta_settings import tiny_config
import test_evaluate_launcher as eval_tests

# Bounds on whole processes (compiling included), so that a test fails
# instead of hanging when a process does not end.
PROCESS_TIMEOUT_S = 600
# After the other process died, a process stops at once when it is in a
# collective (its Gloo connection is reset), else within JAX's heartbeat
# timeout (HEARTBEAT_S; the test expects the first). The heartbeat timeout is
# long because on a 2-core machine running several test sessions at once,
# compiling starved JAX's heartbeats for over a minute.
HEARTBEAT_S = 300
STOP_TIMEOUT_S = 180
ONE_DEVICE_TOLERANCE = 1e-4
# The disco-eval settings of test_evaluate_launcher's tiny run, as flags.
EVAL_KEYS = (
    *comparison.settings.EVAL_KEYS,
    "rule",
    "total_env_steps",
    "num_seeds",
    "seed",
    "learning_rate",
    "output_dir",
)
# The tiny LPG rule of meta_settings: what is tested here (processes,
# sharding, kills and resumes) does not depend on the rule.
RUN_FLAGS = (
    *TINY_FLAGS,
    *TINY_LPG_FLAGS,
    "--config.num_meta_steps=4",
    "--config.checkpoint_every=2",
)
# The launcher, in a process that kills itself (SIGKILL: no clean-up at all)
# when it is about to run meta-step 3, after the checkpoint of step 2.
DIE_BEFORE_STEP_3 = """
import os, signal, sys
from disco.launch import meta_train
from disco.meta import population
step = population.BackpropPopulation.step
def step_or_die(self, state):
  if int(state.step) == 2:
    os.kill(os.getpid(), signal.SIGKILL)
  return step(self, state)
population.BackpropPopulation.step = step_or_die
sys.argv[0] = "disco-meta-train"
meta_train.main()
"""


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def distributed_flags(port: int, process_id: int, num_processes: int = 2):
  return [
      f"--config.distributed.coordinator_address=127.0.0.1:{port}",
      f"--config.distributed.num_processes={num_processes}",
      f"--config.distributed.process_id={process_id}",
      f"--config.distributed.heartbeat_timeout={HEARTBEAT_S}",
      "--config.distributed.initialization_timeout=120",
  ]


class Processes:
  """Processes started together, each with one host device; every one still
  running is killed on exit. Their output goes to files in ``folder``."""

  def __init__(self, commands: Sequence[Sequence[str]], folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
    )
    self.files = [
        (folder / f"{i}.out", folder / f"{i}.err") for i in range(len(commands))
    ]
    self.procs = []
    for command, (out, err) in zip(commands, self.files, strict=True):
      with open(out, "w") as fo, open(err, "w") as fe:
        self.procs.append(
            subprocess.Popen(
                command, cwd=folder, env=env, stdout=fo, stderr=fe, text=True
            )
        )

  def wait(self, i: int, timeout: float = PROCESS_TIMEOUT_S) -> int:
    return self.procs[i].wait(timeout=timeout)

  def output(self, i: int) -> tuple[str, str]:
    """``(stdout, stderr)`` of process ``i``."""
    return tuple(p.read_text() for p in self.files[i])

  def results(self) -> list[tuple[int, str, str]]:
    """Waits for every process: ``[(status, stdout, stderr)]``."""
    statuses = [self.wait(i) for i in range(len(self.procs))]
    return [(s, *self.output(i)) for i, s in enumerate(statuses)]

  def __enter__(self) -> Processes:
    return self

  def __exit__(self, *exc) -> None:
    for p in self.procs:
      if p.poll() is None:
        p.kill()
    for p in self.procs:
      p.wait(timeout=60)


def meta_train_command(out: Path, port: int, i: int, *extra: str) -> list[str]:
  return [
      sys.executable,
      "-m",
      "disco.launch.meta_train",
      *RUN_FLAGS,
      f"--config.output_dir={out}",
      *distributed_flags(port, i),
      *extra,
  ]


def check_all_succeeded(results) -> None:
  for status, _, err in results:
    assert status == 0, err[-3000:]


def meta_params(out: Path):
  return weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE)


def max_rel(a, b) -> float:
  """max |a - b| relative to max |b| over the leaves of two trees."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  scale = max(float(np.abs(y).max()) for y in lb)
  diff = max(float(np.abs(x - y).max()) for x, y in zip(la, lb, strict=True))
  return diff / scale


def trees_equal(a, b) -> bool:
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
      np.array_equal(x, y)
      for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


def own_lines(stdout: str) -> list[str]:
  """``stdout`` without Gloo's connection messages."""
  return [s for s in stdout.splitlines() if s and not s.startswith("[Gloo]")]


def error_line(stderr: str, program: str) -> str:
  """The one error line of a launcher's stderr (JAX may log more)."""
  lines = [
      line
      for line in stderr.splitlines()
      if line.startswith(f"{program}: error: ")
  ]
  assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
  return lines[0]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
  """A 2-process x 1-device meta-training run of 2 agents whose process 1
  dies (SIGKILL) before meta-step 3, after the checkpoint of step 2; then
  both processes restarted with resume=True, to meta-step 4."""
  root = tmp_path_factory.mktemp("dist")
  out, port = root / "run", free_port()
  dying = [
      sys.executable,
      "-c",
      DIE_BEFORE_STEP_3,
      *RUN_FLAGS,
      f"--config.output_dir={out}",
      *distributed_flags(port, 1),
  ]
  with Processes(
      [meta_train_command(out, port, 0), dying], root / "killed"
  ) as procs:
    killed = procs.wait(1)
    # Process 0 must stop by itself, soon: a hang fails here.
    status = procs.wait(0, timeout=STOP_TIMEOUT_S)
    _, err = procs.output(0)
  # Only the checkpoint of step 2 survives the crash.
  checkpoint_2 = root / "checkpoint_2"
  shutil.copytree(out / run_folder.CHECKPOINT_DIR / "2", checkpoint_2)

  port = free_port()
  commands = [
      meta_train_command(out, port, i, "--config.resume=True") for i in range(2)
  ]
  with Processes(commands, root / "resumed") as procs:
    results = procs.results()
  return dict(
      out=out,
      killed=killed,
      first=(status, err),
      resumed=results,
      checkpoint_2=checkpoint_2,
  )


def test_process_death_stops_the_other(killed_and_resumed):
  assert killed_and_resumed["killed"] == -signal.SIGKILL
  status, err = killed_and_resumed["first"]
  assert status == 1, err[-3000:]
  line = error_line(err, settings.PROGRAM)
  assert "process 0 of 2 failed" in line and "--config.resume=True" in line


def test_two_processes_resume_and_match_one_process(
    killed_and_resumed, tmp_path
):
  out, results = killed_and_resumed["out"], killed_and_resumed["resumed"]
  check_all_succeeded(results)
  (_, stdout0, _), (_, stdout1, _) = results
  assert "Resuming from" in stdout0 and "(meta-step 2)" in stdout0
  assert "over 2 device(s) of 2 processes" in stdout0
  # Process 0 alone logs and writes the outputs.
  assert "Meta-step 4" in stdout0 and not own_lines(stdout1), stdout1
  rows = (out / run_folder.METRICS_FILE).read_text().splitlines()
  assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4"]
  assert sorted(
      p.name for p in (out / run_folder.CHECKPOINT_DIR).iterdir()
  ) == [
      "2",
      "4",
  ]
  two = meta_params(out)
  # The same run in this process, on its two host devices and on one.
  for num_devices, tolerance in ((2, 0.0), (1, ONE_DEVICE_TOLERANCE)):
    here = tmp_path / f"devices{num_devices}"
    mt.train(
        tiny_config(
            **TINY_LPG,
            num_meta_steps=4,
            checkpoint_every=2,
            num_devices=num_devices,
            output_dir=str(here),
        ),
        log=lambda _: None,
        progress=False,
    )
    error = max_rel(meta_params(here), two)
    assert error <= tolerance, (num_devices, error)
    if not tolerance:
      assert (here / run_folder.METRICS_FILE).read_text() == (
          out / run_folder.METRICS_FILE
      ).read_text()


def test_resume_two_process_checkpoint_in_one_process(
    killed_and_resumed, tmp_path
):
  """The 2-process checkpoint of step 2 resumes in this process on one
  device (the agents re-sharded from two devices onto one) and ends like the
  2-process run, to the one-device tolerance."""
  src, out = killed_and_resumed["out"], tmp_path / "resumed"
  (out / run_folder.CHECKPOINT_DIR).mkdir(parents=True)
  for name in (run_folder.CONFIG_FILE, run_folder.METRICS_FILE):
    shutil.copy(src / name, out / name)
  shutil.copytree(
      killed_and_resumed["checkpoint_2"], out / run_folder.CHECKPOINT_DIR / "2"
  )
  lines = []
  summary = mt.train(
      tiny_config(
          **TINY_LPG,
          num_meta_steps=4,
          checkpoint_every=2,
          num_devices=1,
          output_dir=str(out),
          resume=True,
      ),
      log=lines.append,
      progress=False,
  )
  assert any("Resuming from" in line for line in lines)
  assert summary["resumed_from"] == 2 and summary["steps_this_run"] == 2
  assert max_rel(meta_params(out), meta_params(src)) <= ONE_DEVICE_TOLERANCE
  # The rows of meta-steps 1 and 2 come from the checkpoint, exactly.
  rows = (out / run_folder.METRICS_FILE).read_text().splitlines()
  assert (
      rows[:3] == (src / run_folder.METRICS_FILE).read_text().splitlines()[:3]
  )


@pytest.mark.slow
def test_sigterm_stops_every_process_at_one_checkpoint(tmp_path):
  """SIGTERM to process 1 (a scheduler's pre-emption): both processes stop
  at the same meta-step, after a checkpoint of it, with status 130."""
  # Far more meta-steps than run before the signal arrives.
  out, port, steps = tmp_path / "run", free_port(), 100_000
  commands = [
      meta_train_command(
          out,
          port,
          i,
          f"--config.num_meta_steps={steps}",
          "--config.checkpoint_every=0",
      )
      for i in range(2)
  ]
  with Processes(commands, tmp_path / "procs") as procs:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while "s_per_step" not in procs.output(0)[1]:  # a meta-step is done
      assert procs.procs[0].poll() is None and time.monotonic() < deadline
      time.sleep(0.5)
    procs.procs[1].send_signal(signal.SIGTERM)
    results = procs.results()
  assert [status for status, _, _ in results] == [130, 130], results
  saved = [int(p.name) for p in (out / run_folder.CHECKPOINT_DIR).iterdir()]
  assert len(saved) == 1 and 0 < saved[0] < steps, saved
  assert f"Interrupted at meta-step {saved[0]}; saved" in results[0][1]


# ------------------------------------------------------ bad settings ----


def _settings(**overrides):
  return distributed.settings(
      {**settings.default_config().distributed.to_dict(), **overrides}
  )


def test_settings():
  assert _settings() is None  # not enabled: one process
  s = _settings(coordinator_address="10.0.0.1:8476", num_processes=4)
  assert s.coordinator_address == "10.0.0.1:8476" and s.num_processes == 4
  assert s.process_id is None  # detected
  assert _settings(enabled=True).coordinator_address is None
  assert _settings(process_id=0, local_device_ids="0,1").local_device_ids == (
      0,
      1,
  )


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(process_id=2, num_processes=2), "out of range"),
        (dict(coordinator_address="localhost"), "write 'host:port'"),
        (dict(coordinator_address="h:99999"), "write 'host:port'"),
        (dict(enabled=True, local_device_ids="gpu0"), "device numbers"),
        (dict(enabled=True, heartbeat_timeout=0), "heartbeat_timeout"),
        (dict(enabled="yes"), "True or False"),
    ],
)
def test_bad_settings(overrides, match):
  with pytest.raises(errors.UsageError, match=match):
    _settings(**overrides)


def test_unreachable_coordinator_and_taken_port():
  """Checked before JAX is asked (which would abort the process)."""
  port = free_port()
  late = _settings(
      coordinator_address=f"127.0.0.1:{port}",
      num_processes=2,
      process_id=1,
      initialization_timeout=1,
  )
  with pytest.raises(errors.UsageError, match="cannot reach the coordinator"):
    distributed.initialize(late, "test")
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    first = _settings(
        coordinator_address=f"127.0.0.1:{taken.getsockname()[1]}",
        num_processes=2,
        process_id=0,
    )
    with pytest.raises(errors.UsageError, match="is taken"):
      distributed.initialize(first, "test")
  assert not jax.distributed.is_initialized()


def test_bad_settings_end_launchers_with_one_line(tmp_path):
  """Exit status 2 and one line, not a hang: a coordinator that nobody
  answers at, a process whose peer never joins, and agents that do not
  split over the devices of two processes."""
  port, lone_port, pair_port = free_port(), free_port(), free_port()

  def command(out, port, i, *extra, timeout=5):
    return [
        sys.executable,
        "-m",
        "disco.launch.meta_train",
        *TINY_FLAGS,
        f"--config.output_dir={tmp_path / out}",
        *distributed_flags(port, i)[:3],
        f"--config.distributed.initialization_timeout={timeout}",
        *extra,
    ]

  three_agents = (
      "--config.population=({'env': 'catch', 'env_settings': "
      "{'rows': 5, 'columns': 5}, 'num_agents': 3},)"
  )
  commands = [
      command("a", port, 1),
      command("b", lone_port, 0),
      *(command("c", pair_port, i, three_agents, timeout=120) for i in (0, 1)),
  ]
  with Processes(commands, tmp_path / "procs") as procs:
    results = procs.results()
  expected = [
      "process 1 of 2 cannot reach the coordinator",
      "process 0 of 2: not every process joined",
      "split evenly over the 2 device(s) of 2 processes",
      "split evenly over the 2 device(s) of 2 processes",
  ]
  for (status, _, err), match in zip(results, expected, strict=True):
    assert status == 2, err[-3000:]
    assert match in error_line(err, settings.PROGRAM)
  for out in ("a", "b", "c"):
    assert not (tmp_path / out).exists()


# -------------------------------------------------------- evaluation ----


def test_eval_seeds_spread_over_processes(tmp_path):
  """Seeds 3, 4, 5 over two processes (3, 4 | 5): process 0 writes the
  metrics of all three, each process its seeds' parameters; process 0's
  block trains exactly as the same two seeds in one process."""
  out, port = tmp_path / "run", free_port()
  config = eval_tests.tiny_config(tmp_path, num_seeds=3, output_dir=str(out))
  flags = [f"--config.{k}={config[k]}" for k in EVAL_KEYS] + [
      f"--config.env_settings.{k}={v}" for k, v in config.env_settings.items()
  ]
  commands = [
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          *flags,
          *distributed_flags(port, i),
      ]
      for i in range(2)
  ]
  with Processes(commands, tmp_path / "procs") as procs:
    results = procs.results()
  check_all_succeeded(results)
  assert "over 2 processes" in results[0][1] and not own_lines(results[1][1])
  metrics = analysis.read_metrics_csv(out / "metrics.csv")
  np.testing.assert_array_equal(metrics["seed"][:, 0], [3, 4, 5])
  summary = json.loads((out / "summary.json").read_text())
  assert summary["seeds"] == [3, 4, 5]
  for seed in (3, 4, 5):
    assert (out / f"params_seed{seed}.npz").is_file()

  # The first two seeds in this process (test_evaluate_launcher's run).
  config = eval_tests.tiny_config(tmp_path, output_dir=str(tmp_path / "here"))
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  here = analysis.read_metrics_csv(tmp_path / "here" / "metrics.csv")
  for key in ("return_sum", "episodes", "learner/total_loss"):
    np.testing.assert_array_equal(metrics[key][:2], here[key], err_msg=key)
