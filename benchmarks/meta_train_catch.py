"""Discovering a rule from scratch on Catch 5x5 (the published notebook's run).

Meta-trains a Disco rule from random meta-parameters (key 1) with the
published meta-training settings (``configs/meta_train.py``: 2 agents, 32
environments each, rollouts of 16, 2 inner steps, Adam(5e-4), 800 meta-steps)
through the ``disco-meta-train`` launcher, then reports how the agents'
reward per actor step moved: with a working meta-gradient it rises from about
-0.15 (a random policy catches about 1 ball in 5; an episode lasts 4 steps)
towards +0.25 (every ball caught), and should reach >= +0.2.

  python benchmarks/meta_train_catch.py                 # the full run
  python benchmarks/meta_train_catch.py --resume --output_dir runs/meta-catch
  python benchmarks/meta_train_catch.py --num_meta_steps 3 --tiny  # smoke

Outputs (metrics CSV, curves, checkpoints, meta_params.npz) go to
``--output_dir``; an interrupted run continues with ``--resume``. The last
line is ``final_reward_per_step=<float>`` (the mean over the last
``--window`` meta-steps).
"""

from __future__ import annotations

import argparse
import datetime
import sys

import numpy as np

from disco import errors
from disco import run_folders
from disco.meta import history as history_lib
from disco.meta import run_folder
from disco.meta import settings
from disco.meta import trainer as mt

TARGET = 0.2


def main(argv=None) -> float:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_meta_steps", type=int, default=800)
  parser.add_argument("--output_dir", default="")
  parser.add_argument(
      "--resume", action="store_true", help="continue the run in --output_dir"
  )
  parser.add_argument(
      "--init", default="random", help="random | disco103 | path of a .npz"
  )
  parser.add_argument("--checkpoint_every", type=int, default=50)
  parser.add_argument(
      "--window",
      type=int,
      default=50,
      help="meta-steps averaged for the start/final reward",
  )
  parser.add_argument(
      "--tiny",
      action="store_true",
      help="tiny networks and batches (a smoke test)",
  )
  parser.add_argument("--no_progress", action="store_true")
  args = parser.parse_args(argv)

  config = settings.default_config()
  config.num_meta_steps = args.num_meta_steps
  config.init_meta_params = args.init
  config.checkpoint_every = args.checkpoint_every
  config.resume = args.resume
  stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
  config.output_dir = args.output_dir or f"runs/meta-catch-{stamp}"
  if args.tiny:
    config.batch_size, config.rollout_len, config.inner_steps = 2, 4, 1
    config.agent.network.update(
        dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
    )
    config.value_fn.dense = (8, 8)
  try:
    summary = mt.train(config, progress=not args.no_progress)
  except errors.UsageError as e:
    print(f"meta_train_catch: error: {errors.one_line(e)}", file=sys.stderr)
    sys.exit(2)

  history = history_lib.MetricsHistory.read_csv(
      f"{summary['output_dir']}/{run_folder.METRICS_FILE}"
  )
  rewards = history.column("rewards")
  window = max(1, min(args.window, len(rewards) // 2 or 1))
  start, final = float(np.mean(rewards[:window])), float(
      np.mean(rewards[-window:])
  )
  print(
      f"Reward per actor step: {start:+.3f} over the first {window} "
      f"meta-steps -> {final:+.3f} over the last {window} "
      f"(target >= {TARGET:+.2f}: "
      f"{'reached' if final >= TARGET else 'not reached'}); "
      f"{summary['meta_steps']} meta-steps, "
      f"{run_folders.fmt(summary['seconds_per_meta_step'], 3)} s each."
  )
  print(f"final_reward_per_step={final:.6f}")
  return final


if __name__ == "__main__":
  main()
