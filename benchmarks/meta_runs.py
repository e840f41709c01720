"""What the benchmark scripts that start ``disco-meta-train`` runs share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
import subprocess
import sys

import numpy as np

from disco.launch import validation as validation_lib
from disco.meta import history as history_lib


def read_history(run_dir: Path) -> history_lib.MetricsHistory:
  """A run's ``metrics.csv`` (empty before its first meta-step)."""
  metrics = run_dir / "metrics.csv"
  if not metrics.is_file():
    return history_lib.MetricsHistory()
  return history_lib.MetricsHistory.read_csv(metrics)


def validation_means(run_dir: Path) -> dict[int, float]:
  """``{meta_step: mean return over the validation rows}`` of a run's
  ``validation.csv``, in meta-step order (empty if it has none)."""
  by_step = {}
  for r in validation_lib.read_rows(run_dir / validation_lib.CSV_FILE):
    by_step.setdefault(r["meta_step"], []).append(r["return"])
  return {s: float(np.mean(x)) for s, x in sorted(by_step.items())}


def finished_steps(run_dir: Path) -> int:
  """The last meta-step in a run's ``metrics.csv`` (0 before the first)."""
  steps = read_history(run_dir).steps
  return int(steps[-1]) if len(steps) else 0


def run_logged(
    command: Sequence[str], out: Path, env: Mapping[str, str] | None = None
) -> None:
  """Runs ``command``, appending its output to ``out/log.txt``; raises if it
  fails."""
  out.mkdir(parents=True, exist_ok=True)
  print(f"{out.name}: {' '.join(command[2:])}", flush=True)
  with open(out / "log.txt", "a") as log:
    subprocess.run(command, stdout=log, stderr=log, check=True, env=env)


def meta_train(flags: Sequence[str], out: Path) -> None:
  """``disco-meta-train FLAGS --config.output_dir=OUT`` in a child process."""
  run_logged(
      [
          sys.executable,
          "-m",
          "disco.launch.meta_train",
          *flags,
          f"--config.output_dir={out}",
      ],
      out,
  )
