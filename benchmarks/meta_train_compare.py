"""Whole meta-training runs of ours and of the published notebook, compared.

Three commands:

* ``run``: one meta-training run at the published notebook's settings
  (``configs/meta_train.py``), ours (``disco-meta-train``) or the published
  notebook's own code (``benchmarks/published_meta_train.py``, which needs
  ``--published``). Seed ``k`` uses key ``1 + k`` for random meta-parameters
  and ``4 + k`` for the agents (seed 0: the notebook's keys), for both codes.
  The reward per actor step of every meta-step goes to ``metrics.csv``
  (ours) or ``rewards.csv`` (published); both continue an interrupted run::

    python benchmarks/meta_train_compare.py run --code ours --seed 0 \
        --output_dir /tmp/runs/ours-s0
    python benchmarks/meta_train_compare.py run --code published \
        --published ../published --seed 0 --output_dir /tmp/runs/published-s0
    python benchmarks/meta_train_compare.py run --code ours --init disco103 \
        --steps 200 --seed 0 --output_dir /tmp/runs/finetune-s0

* ``eval``: ``disco-eval`` of a run's exported rule on Catch 8x8
  (``--env_steps`` environment steps, the evaluation defaults) into
  ``<run>/eval``.
* ``report``: per run (folders ``<label>-s<k>``), the meta-step at which the
  20-step moving average of the reward per step first passes each
  threshold, the final average and the evaluation; per label the median
  crossing (a run that never passed counts as later than all that did);
  one PNG of the curves::

    python benchmarks/meta_train_compare.py report /tmp/runs \
        --plot docs/meta_train_compare.png
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
import subprocess
import sys

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli

BENCHMARKS = Path(__file__).resolve().parent
THRESHOLDS = (0.1, 0.2)
WINDOW = 20
EVAL_THRESHOLD = 0.9
EVAL_EPISODES = 500
LEGEND = {"ours": "ours", "pub": "published notebook"}


# ------------------------------------------------------------------- run ----


def run(args) -> None:
  out = Path(args.output_dir)
  if args.code == "published":
    if not args.published:
      sys.exit("meta_train_compare: error: --code published needs --published")
    command = [
        sys.executable,
        str(BENCHMARKS / "published_meta_train.py"),
        "--published",
        args.published,
        "--seed",
        str(args.seed),
        "--init",
        args.init,
        "run",
        "--steps",
        str(args.steps),
        "--output_dir",
        str(out),
    ]
    subprocess.run(command, check=True)
    return
  from disco.meta import trainer as mt

  config = mt.default_config()
  config.num_meta_steps = args.steps
  config.init_meta_params = args.init
  config.init_seed = 1 + args.seed
  config.seed = 4 + args.seed
  config.output_dir = str(out)
  config.resume = out.is_dir()
  mt.train(config, progress=False)


def evaluate(args) -> None:
  run_dir = Path(args.run_dir)
  command = [
      "disco-eval",
      f"--config.rule={run_dir / 'meta_params.npz'}",
      f"--config.total_env_steps={args.env_steps}",
      f"--config.output_dir={run_dir / 'eval'}",
      "--config.overwrite=True",
  ]
  subprocess.run(command, check=True)


# ---------------------------------------------------------------- report ----


def rewards(run_dir: Path) -> np.ndarray:
  """Reward per actor step of every meta-step of a run, in order."""
  for name in ("metrics.csv", "rewards.csv"):
    path = run_dir / name
    if path.is_file():
      with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
      step_key = "step" if "step" in rows[0] else "meta_step"
      rows.sort(key=lambda r: int(r[step_key]))
      return np.asarray([float(r["rewards"]) for r in rows])
  return np.zeros([0])


def moving_average(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
  """Trailing mean over ``window`` steps (NaN before ``window`` steps)."""
  out = np.full(x.shape, np.nan)
  if x.size >= window:
    c = np.cumsum(np.insert(x, 0, 0.0))
    out[window - 1 :] = (c[window:] - c[:-window]) / window
  return out


def first_crossing(average: np.ndarray, threshold: float) -> int | None:
  """1-based meta-step at which ``average`` first passes ``threshold``."""
  hit = np.nonzero(average > threshold)[0]
  return int(hit[0]) + 1 if hit.size else None


def eval_result(run_dir: Path) -> dict[str, float | None]:
  """Final return (last 500 episodes) and the first env step at which the
  500-episode mean reached 0.9, from ``<run>/eval``."""
  eval_dir = run_dir / "eval"
  if not (eval_dir / "summary.json").is_file():
    return {}
  from benchmarks import disco103_catch
  from disco.training import analysis

  summary = json.loads((eval_dir / "summary.json").read_text())
  metrics = analysis.read_metrics_csv(eval_dir / "metrics.csv")
  curve = disco103_catch.windowed_returns(metrics, EVAL_EPISODES)[0]
  hit = np.nonzero(curve >= EVAL_THRESHOLD)[0]
  return dict(
      final=summary["final_return_mean"],
      reached_at=float(metrics["env_steps"][0][hit[0]]) if hit.size else None,
  )


def _fmt(x, spec="") -> str:
  return "-" if x is None else format(x, spec)


def report(args) -> None:
  runs = sorted(
      p for p in Path(args.runs_dir).iterdir() if p.is_dir() and "-s" in p.name
  )
  table, curves = [], {}
  for run_dir in runs:
    r = rewards(run_dir)
    if not r.size:
      continue
    label, seed = run_dir.name.rsplit("-s", 1)
    avg = moving_average(r)
    curves.setdefault(label, []).append((seed, avg))
    table.append(
        dict(
            run=run_dir.name,
            steps=r.size,
            **{f"cross_{t}": first_crossing(avg, t) for t in THRESHOLDS},
            final=float(np.nanmean(r[-WINDOW:])),
            **{f"eval_{k}": v for k, v in eval_result(run_dir).items()},
        )
    )
  print(
      cli.table_header(
          (
              "run",
              "meta-steps",
              "passes +0.1",
              "passes +0.2",
              "last 20",
              "Catch 8x8 final (500 ep.)",
              "reached 0.9 at env step",
          )
      )
  )
  for row in table:
    print(
        f"| {row['run']} | {row['steps']} | {_fmt(row['cross_0.1'])} | "
        f"{_fmt(row['cross_0.2'])} | {row['final']:+.3f} | "
        f"{_fmt(row.get('eval_final'), '+.3f')} | "
        f"{_fmt(row.get('eval_reached_at'), '.0f')} |"
    )
  medians = {}
  for label in curves:
    for t in THRESHOLDS:
      hits = [
          r[f"cross_{t}"] for r in table if r["run"].startswith(label + "-s")
      ]
      passed = [h for h in hits if h is not None]
      # A run that never passed counts as later than every run that did.
      median = float(np.median([np.inf if h is None else h for h in hits]))
      median = None if np.isinf(median) else median
      medians[label, t] = median
      print(
          f"{label}: median meta-step passing +{t}: {_fmt(median, '.0f')} "
          f"({len(passed)}/{len(hits)} runs passed)"
      )
  for t in THRESHOLDS:
    ours, pub = medians.get(("ours", t)), medians.get(("pub", t))
    if ours is not None and pub is not None:
      print(f"+{t}: ours / published median = {ours / pub:.2f}")
  if args.plot:
    labels = args.plot_labels.split(",")
    _plot({k: v for k, v in curves.items() if k in labels}, Path(args.plot))
    print(f"wrote {args.plot}")


def _plot(curves, path: Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  fig, ax = plt.subplots(figsize=(8, 4.5))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  styles = ("-", "--", ":", "-.")
  for color, (label, runs) in zip(colors, sorted(curves.items()), strict=False):
    for k, (seed, avg) in enumerate(runs):
      ax.plot(
          np.arange(1, avg.size + 1),
          avg,
          color=color,
          ls=styles[k % len(styles)],
          lw=1.2,
          label=f"{LEGEND.get(label, label)}, seed {seed}",
      )
  for t in THRESHOLDS:
    ax.axhline(t, color="grey", lw=0.6, ls=":")
  ax.set_xlabel("meta-step")
  ax.set_ylabel(f"reward per step ({WINDOW}-step moving average)")
  ax.set_title("Meta-training on Catch 5x5 from random meta-parameters")
  ax.legend()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


# ------------------------------------------------------------------ main ----


def _run_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--code", choices=("ours", "published"), default="ours")
  p.add_argument("--published", default="", help="the published code's folder")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--init", default="random", help="random | disco103")
  p.add_argument("--steps", type=int, default=800)
  p.add_argument("--output_dir", required=True)


def _eval_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--run_dir", required=True)
  p.add_argument("--env_steps", type=int, default=60_000)


def _report_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("runs_dir")
  p.add_argument("--plot", default="")
  p.add_argument("--plot_labels", default="ours,pub", help="run labels to plot")


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      {
          "run": cli.Command(run, _run_flags, "one meta-training run"),
          "eval": cli.Command(
              evaluate, _eval_flags, "disco-eval of a run's rule"
          ),
          "report": cli.Command(
              report, _report_flags, "crossings table and curves"
          ),
      },
      argv=argv,
  )


if __name__ == "__main__":
  main()
