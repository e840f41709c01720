"""Speed and memory of one meta-step with the published meta-training settings.

2 agents on Catch 5x5, 32 environments per agent, rollouts of 16 steps,
2 inner steps, an MLP agent (512, 512) with an LSTM action model (256) and
head (256,), a value function MLP (256, 256), Adam(5e-4) on the Disco
meta-parameters (random initialisation). Every setting can be changed:

  python benchmarks/meta_train_step.py --steps 10
  python benchmarks/meta_train_step.py --inner_steps 1,2,4,8 --remat

Prints the compile time (first meta-step minus the steady-state time), the
seconds per meta-step over ``--steps`` further meta-steps, and the peak host
memory (``ru_maxrss``) and, where the device reports it, peak device memory.
With several ``--inner_steps`` each runs in its own subprocess (so the peak
memory is that setting's) and a table of memory and time against the number
of inner steps follows. The last line is ``seconds_per_meta_step=<float>``
(of the notebook's 2 inner steps when swept, else of the first setting).

Timings are only meaningful on an otherwise idle machine. The persistent
compilation cache is not enabled here (unless ``JAX_COMPILATION_CACHE_DIR``
is set), so compile time is real.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import resource
import sys
import tempfile

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing


def _config(args, inner_steps: int):
  from disco.meta import trainer as mt

  config = mt.default_config()
  config.population = (
      dict(
          env="catch",
          env_settings=dict(rows=args.rows, columns=args.rows),
          num_agents=args.num_agents,
      ),
  )
  config.batch_size = args.batch_size
  config.rollout_len = args.rollout_len
  config.inner_steps = inner_steps
  config.remat_inner_steps = args.remat
  config.max_unrolled_inner_steps = args.max_unrolled
  config.init_meta_params = args.init
  config.num_devices = args.num_devices
  if args.tiny:  # smoke-test sizes
    config.agent.network.update(
        dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
    )
    config.value_fn.dense = (8, 8)
  config.output_dir = tempfile.mkdtemp(prefix="meta-bench-")
  return config


def _peak_device_bytes(devices) -> int | None:
  peaks = []
  for d in devices:
    try:
      stats = d.memory_stats() or {}
    except Exception:  # noqa: BLE001 - some backends have no memory stats
      stats = {}
    if "peak_bytes_in_use" in stats:
      peaks.append(int(stats["peak_bytes_in_use"]))
  return max(peaks) if peaks else None


def build(args, inner_steps: int):
  """``(plan, initial state)`` of the population that ``args`` describe."""
  import jax

  from disco.meta import trainer as mt

  config = _config(args, inner_steps)
  plan = mt.build(config)
  os.rmdir(config.output_dir)  # nothing is written there
  state = mt.initial_state(plan)
  jax.block_until_ready(state)
  return plan, state


def timed_step(plan, state):
  """One meta-step: ``(state, logs, seconds)``."""
  (state, logs), seconds = timing.timed(plan.population.step, state)
  return state, logs, seconds


def run_one(args, inner_steps: int) -> dict:
  """Builds the population, times its meta-steps; returns the numbers."""
  plan, state = build(args, inner_steps)
  stepper = timing.Stepper(plan.population.step, state, logs=True)
  first, times = timing.repeat(stepper, args.steps)
  logs = stepper.logs
  steady = sum(times) / len(times)
  return dict(
      inner_steps=inner_steps,
      remat=args.remat,
      num_agents=args.num_agents,
      batch_size=args.batch_size,
      rollout_len=args.rollout_len,
      devices=len(plan.population.devices),
      device_kind=plan.population.devices[0].device_kind,
      first_step_s=first,
      compile_s=max(0.0, first - steady),
      seconds_per_meta_step=steady,
      timed_steps=len(times),
      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      peak_device_mib=(lambda b: None if b is None else b / 2**20)(
          _peak_device_bytes(plan.population.devices)
      ),
      meta_loss=float(logs["meta_loss"]),
      rewards=float(logs["rewards"]),
  )


def _fmt_mib(x) -> str:
  return "n/a" if x is None else f"{x:.0f} MiB"


def _report(r: dict) -> None:
  print(
      f"inner_steps={r['inner_steps']} remat={r['remat']}: "
      f"{r['num_agents']} agents x {r['batch_size']} envs x "
      f"{r['rollout_len']} steps on {r['devices']} {r['device_kind']} "
      f"device(s)"
  )
  print(
      f"  compile time: {r['compile_s']:.1f} s (first meta-step "
      f"{r['first_step_s']:.1f} s)"
  )
  print(
      f"  seconds per meta-step: {r['seconds_per_meta_step']:.4f} "
      f"(mean of {r['timed_steps']})"
  )
  print(
      f"  peak host memory (ru_maxrss): {_fmt_mib(r['peak_rss_mib'])}; "
      f"peak device memory: {_fmt_mib(r['peak_device_mib'])}"
  )


def arg_parser() -> argparse.ArgumentParser:
  """The command line (also read by ``published_compare.py --meta``)."""
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--steps", type=int, default=5, help="timed meta-steps after the first"
  )
  parser.add_argument(
      "--inner_steps",
      default="2",
      help="inner steps, or a comma-separated sweep",
  )
  parser.add_argument(
      "--remat",
      action="store_true",
      help="rematerialise inner steps in the backward pass",
  )
  parser.add_argument(
      "--max_unrolled",
      type=int,
      default=2,
      help="config.max_unrolled_inner_steps: up to this many "
      "inner steps compile without a loop",
  )
  parser.add_argument("--num_agents", type=int, default=2)
  parser.add_argument(
      "--batch_size", type=int, default=32, help="environments per agent"
  )
  parser.add_argument("--rollout_len", type=int, default=16)
  parser.add_argument("--rows", type=int, default=5, help="Catch rows/columns")
  parser.add_argument(
      "--init", default="random", help="random | disco103 | path of a .npz"
  )
  parser.add_argument(
      "--num_devices", type=int, default=0, help="0: all devices"
  )
  parser.add_argument(
      "--tiny",
      action="store_true",
      help="tiny networks (a smoke test of this script)",
  )
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  return parser


def main(argv=None) -> float:
  parser = arg_parser()
  args = parser.parse_args(argv)
  try:
    sweep = [int(x) for x in args.inner_steps.split(",") if x.strip()]
  except ValueError:
    parser.error(f"--inner_steps must be integers, got {args.inner_steps!r}")
  if not sweep or min(sweep) < 1 or args.steps < 1:
    parser.error("--inner_steps and --steps must be >= 1")

  if args.child or len(sweep) == 1:
    result = run_one(args, sweep[0])
    if args.child:
      cli.print_result(result)
      return result["seconds_per_meta_step"]
    _report(result)
    print(f"seconds_per_meta_step={result['seconds_per_meta_step']:.6f}")
    return result["seconds_per_meta_step"]

  results = []
  given = list(argv if argv is not None else sys.argv[1:])
  base = [
      a
      for i, a in enumerate(given)
      if not a.startswith("--inner_steps")
      and not (i > 0 and given[i - 1] == "--inner_steps")
  ]
  for k in sweep:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        *base,
        f"--inner_steps={k}",
        "--child",
    ]
    result, proc = cli.child_result(cmd)
    if result is None:
      tail = proc.stderr.strip().splitlines()[-3:]
      print(
          f"inner_steps={k}: failed (exit {proc.returncode}): "
          + " | ".join(tail)
      )
      continue
    _report(result)
    results.append(result)
  if not results:
    print("seconds_per_meta_step=nan")
    return float("nan")
  print(f"\nremat={args.remat}")
  print(
      f"{'inner_steps':>11} {'s/meta-step':>12} {'compile s':>10} "
      f"{'peak RSS':>10} {'peak device':>12}"
  )
  for r in results:
    print(
        f"{r['inner_steps']:>11} {r['seconds_per_meta_step']:>12.4f} "
        f"{r['compile_s']:>10.1f} {_fmt_mib(r['peak_rss_mib']):>10} "
        f"{_fmt_mib(r['peak_device_mib']):>12}"
    )
  chosen = next((r for r in results if r["inner_steps"] == 2), results[0])
  print(f"seconds_per_meta_step={chosen['seconds_per_meta_step']:.6f}")
  return chosen["seconds_per_meta_step"]


if __name__ == "__main__":
  main()
