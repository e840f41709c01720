"""What the benchmark scripts that start ``disco-meta-train`` runs share:
their run folders (``<root>/<name>-s<seed>``), starting the runs that are not
finished, and reading their histories and validations."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
import json
from pathlib import Path
import shutil
import subprocess
import sys
from typing import Any

import numpy as np

from benchmarks import cli
from disco.meta import history as history_lib
from disco.meta import validation_record


def run_dirs(root: Path, name: str) -> list[Path]:
  """The folders of ``name``'s runs, ``<root>/<name>-s<seed>``, sorted."""
  return sorted(root.glob(f"{name}-s*"))


def seed_major(names: Sequence[str], seeds: int) -> list[tuple[str, int]]:
  """``(name, seed)`` of every run, seed 0 of every name first."""
  return [(name, seed) for seed in range(seeds) for name in names]


def run_each(
    root: Path,
    runs: Iterable[tuple[str, int]],
    done: Callable[[str, Path], bool],
    start: Callable[[str, int, Path], None],
    only: Iterable[str] | None = None,
) -> None:
  """Starts (or resumes) each run ``(name, seed)`` in ``<root>/<name>-s<seed>``
  unless ``done(name, folder)``; ``only``: these folder names alone."""
  only = None if only is None else set(only)
  for name, seed in runs:
    out = root / f"{name}-s{seed}"
    if only is not None and out.name not in only:
      continue
    if done(name, out):
      print(f"{out.name}: done", flush=True)
      continue
    start(name, seed, out)


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
  for r in validation_record.read_rows(run_dir / validation_record.CSV_FILE):
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


def validation_scores(run_dir: Path) -> dict[int, float]:
  """``{meta-step: aggregate score}`` of a run's validations."""
  rows = validation_record.read_rows(run_dir / validation_record.CSV_FILE)
  return {int(r["meta_step"]): float(r["aggregate"]) for r in rows}


def validation_rows(run_dir: Path) -> list[dict]:
  """A run's ``validation.csv`` rows, each with the run's folder name."""
  rows = validation_record.read_rows(run_dir / validation_record.CSV_FILE)
  return [dict(r, run=run_dir.name) for r in rows]


def validation_table_row(run_dir: Path, scores: Mapping[int, float]) -> str:
  """``| run | meta-steps | score at the first validation | at the last |
  best (meta-step) |`` of a run with ``scores``."""
  steps = sorted(scores)
  best = max(steps, key=scores.get)
  return (
      f"| {run_dir.name} | {finished_steps(run_dir)} | "
      f"{scores[steps[0]]:.3f} | {scores[steps[-1]]:.3f} | "
      f"{scores[best]:.3f} ({best}) |"
  )


def run_compare(command: Sequence[str], shards: int) -> None:
  """``disco-compare`` (``command``): with ``shards > 1`` its runs in that
  many processes first (waiting for every one), then the report."""
  if shards > 1:
    processes = [
        subprocess.Popen([*command, f"--config.shard={i}/{shards}"])
        for i in range(shards)
    ]
    if any([p.wait() for p in processes]):
      raise SystemExit("a disco-compare shard failed (its output is above)")
  subprocess.run(command, check=True)


def copy_comparison(
    compared: Path, out: Path, prefix: str = "compare_"
) -> None:
  """The comparison's report, tables and figures into ``out``, their names
  prefixed by ``prefix``."""
  for name in ("report.md", "results.csv", "tuning.csv", "statistics.json"):
    if (compared / name).is_file():
      shutil.copyfile(compared / name, out / f"{prefix}{name}")
  for figure in compared.glob("*.png"):
    shutil.copyfile(figure, out / f"{prefix}{figure.name}")


def best_score(scores: Mapping[int, float]) -> float:
  """A run's highest validation score."""
  return max(scores.values())


def last_score(scores: Mapping[int, float]) -> float:
  """A run's validation score at its last validation."""
  return scores[max(scores)]


def best_validated(
    root: Path,
    names: Sequence[str],
    file: str = "best_meta_params.npz",
    score: Callable[[Mapping[int, float]], float] = best_score,
) -> tuple[Path, float] | None:
  """``(<run>/<file>, score)`` of the run of ``names`` (any seed) whose
  validations ``score`` highest: by default the best validated
  meta-parameters of all (None: no validated run)."""
  best = None
  for run_dir in (d for name in names for d in run_dirs(root, name)):
    scores = validation_scores(run_dir)
    path = run_dir / file
    if scores and path.is_file():
      score_of_run = score(scores)
      if best is None or score_of_run > best[1]:
        best = (path, score_of_run)
  return best


def pick_rules(
    root: Path, candidates: Mapping[str, Sequence[str]], **how: Any
) -> dict[str, Path]:
  """For each rule, copies the meta-parameters `best_validated` picks
  (``how``: its ``file`` and ``score``) among its candidate runs
  (``{rule: names}``) to
  ``<root>/rules/<rule>.npz`` and records the pick in
  ``<root>/rules/chosen.json``; ``{rule: copy}`` of the rules with a
  validated run.

  Raises:
    SystemExit: a rule's best run changed since the last pick (the
      comparison's finished runs of the earlier pick would stand for it).
  """
  rules_dir = root / "rules"
  rules_dir.mkdir(parents=True, exist_ok=True)
  chosen_file = rules_dir / "chosen.json"
  before = json.loads(chosen_file.read_text()) if chosen_file.is_file() else {}
  chosen, paths = {}, {}
  for rule, names in candidates.items():
    best = best_validated(root, names, **how)
    if best is None:
      continue
    path = rules_dir / f"{rule}.npz"
    chosen[rule] = dict(
        source=str(best[0]),
        validation_score=best[1],
        by=how.get("score", best_score).__name__.replace("_", " "),
    )
    earlier = before.get(rule, chosen[rule])
    if any(
        earlier[k] != chosen[rule][k] for k in ("source", "validation_score")
    ):
      cli.usage_error(
          f"the best {rule} rule changed since the last comparison "
          f"({earlier['source']} -> {best[0]}): delete "
          f"{root / 'compare' / 'runs' / rule} and {chosen_file}, then "
          "compare again"
      )
    shutil.copyfile(best[0], path)
    paths[rule] = path
  if chosen:
    chosen_file.write_text(json.dumps(chosen, indent=2))
  return paths


def write_validation_report(
    root: Path,
    out: Path,
    groups: Mapping[str, Sequence[Path]],
    title: str,
    xlabel: str = "meta-step",
) -> None:
  """Into ``out``: ``validation.csv`` and ``validation.png`` of the runs'
  validations (one colour per group, ``{label: run folders}``), ``table.md``
  (a row per run, then the rules `pick_rules` took to the comparison) and
  the comparison's report and figures (`copy_comparison`).

  Raises:
    SystemExit: no run has a validation.
  """
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  out.mkdir(parents=True, exist_ok=True)
  lines = [
      "| run | meta-steps | validation IQM at 0 | at the end | best (meta-step) |",
      "|---|---|---|---|---|",
  ]
  rows = []
  fig, ax = plt.subplots(figsize=(7, 4))
  for i, (label, dirs) in enumerate(groups.items()):
    labelled = False
    for run_dir in dirs:
      scores = validation_scores(run_dir)
      if not scores:
        continue
      rows += validation_rows(run_dir)
      lines.append(validation_table_row(run_dir, scores))
      steps = sorted(scores)
      ax.plot(
          steps,
          [scores[s] for s in steps],
          color=f"C{i}",
          alpha=0.8,
          marker="o" if len(steps) < 20 else None,
          label=None if labelled else label,
      )
      labelled = True
  if not rows:
    cli.usage_error(f"no validation.csv under {root}: run `run` first")
  cli.write_csv(out / "validation.csv", rows)
  ax.set_xlabel(xlabel)
  ax.set_ylabel("held-out validation IQM (0: random, 1: reference)")
  ax.set_title(title)
  ax.legend()
  fig.tight_layout()
  fig.savefig(out / "validation.png", dpi=100)
  plt.close(fig)
  chosen = root / "rules" / "chosen.json"
  if chosen.is_file():
    lines += ["", "Rules taken to the comparison:", ""]
    for rule, c in json.loads(chosen.read_text()).items():
      by = c.get("by", "best score")
      lines.append(
          f"* `{rule}`: {c['source']} (validation IQM "
          f"{c['validation_score']:.3f}, the runs' {by})"
      )
  copy_comparison(root / "compare", out)
  cli.write_table(out, "\n".join(lines) + "\n")
