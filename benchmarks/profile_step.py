"""Where the time of the learner step and of the meta-step goes, per operation.

  python benchmarks/profile_step.py                   # both programs
  python benchmarks/profile_step.py --only learner_step --top 20
  python benchmarks/profile_step.py --only meta_step --num_agents 16
  python benchmarks/profile_step.py --tiny --calls 2  # smoke test

Runs each program (``flops.py``'s: the published evaluation notebook's
learner step and the meta-training notebook's meta-step) ``--calls`` times
under ``jax.profiler`` and reads the trace back (``jax.profiler.ProfileData``).
On the CPU, XLA records one event per executed HLO instruction (a fusion, a
matrix product, a copy; loop bodies once per trip) when
``--xla_cpu_enable_xprof_traceme=true`` is in ``XLA_FLAGS``, which this
script sets. Each instruction's matrix-product FLOPs come from the optimised
HLO (``flops.dot_flops``, counting the products inside a fusion), so every
row gets its share of the time and its achieved GFLOP/s, beside a large
float32 matmul (``timing.Matmul``) timed in the same run.

Rows are grouped into:

* ``matrix products``: instructions that contain a ``dot``;
* ``elementwise fusions``: other fusions (activations, the LSTM's gates,
  losses, Adam, reductions);
* ``data movement``: copies, transposes, slices, concatenations,
  dynamic-update-slices, pads and broadcasts outside fusions;
* ``other``: everything else (random bits, sorts, scatters, custom calls).

Control flow (``while``, ``conditional``, ``call``) encloses other rows and
is left out of the sums. Timings are only meaningful on an otherwise idle
machine; the shares less so depend on the load.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import glob
import os
from pathlib import Path
import sys
import tempfile

_TRACEME = "--xla_cpu_enable_xprof_traceme=true"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_TRACEME}"

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

import jax  # noqa: E402 - after XLA_FLAGS

from benchmarks import cli  # noqa: E402
from benchmarks import flops  # noqa: E402
from benchmarks import meta_train_step  # noqa: E402
from benchmarks import timing  # noqa: E402

CONTROL_FLOW = ("while", "conditional", "call")
DATA_MOVEMENT = (
    "copy",
    "transpose",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "concatenate",
    "pad",
    "broadcast",
    "reshape",
    "bitcast",
    "copy-start",
    "copy-done",
)
GROUPS = ("matrix products", "elementwise fusions", "data movement", "other")


@dataclasses.dataclass(frozen=True)
class Instruction:
  """An executed HLO instruction: its opcode, group and the matrix-product
  FLOPs of one execution."""

  opcode: str
  group: str
  flops: float
  op_name: str


def instructions(hlo_text: str) -> dict[str, Instruction]:
  """Every instruction of an optimised HLO module that the CPU runtime can
  record, by name (control flow excluded)."""
  comps, _ = flops.parse_hlo(hlo_text)
  shapes = flops.instruction_shapes(comps)
  memo: dict[str, float] = {}

  def comp_flops(comp: str) -> float:
    if comp not in memo:
      memo[comp] = sum(
          own_flops(shape, op, rest) for _, shape, op, rest in comps[comp]
      )
    return memo[comp]

  def own_flops(shape: str, op: str, rest: str) -> float:
    if op == "dot":
      return flops.dot_flops(shape, rest, shapes)
    if op in CONTROL_FLOW:
      return 0.0
    return sum(comp_flops(c) for c in flops.callees(rest) if c in comps)

  out = {}
  for instrs in comps.values():
    for name, shape, op, rest in instrs:
      if op in CONTROL_FLOW:
        continue
      f = own_flops(shape, op, rest)
      if f > 0:
        group = "matrix products"
      elif op == "fusion":
        group = "elementwise fusions"
      elif op in DATA_MOVEMENT:
        group = "data movement"
      else:
        group = "other"
      op_name = (flops.attr(rest, "op_name") or '"-"')[1:-1]
      out[name] = Instruction(op, group, f, flops.clean_op_name(op_name))
  return out


def traced(run, calls: int) -> tuple[dict[str, list[float]], float]:
  """Runs ``run()`` ``calls`` times under the profiler: ``({event name:
  [count, total seconds]}, wall seconds)``."""
  events: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
  with tempfile.TemporaryDirectory(prefix="disco-profile-") as trace_dir:
    with timing.Stopwatch() as clock, jax.profiler.trace(trace_dir):
      for _ in range(calls):
        run()
    wall = clock.wall
    (path,) = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    for plane in jax.profiler.ProfileData.from_file(path).planes:
      for line in plane.lines:
        for event in line.events:
          e = events[event.name]
          e[0] += 1
          e[1] += event.duration_ns * 1e-9
  return events, wall


def report(
    name: str, hlo_text: str, run, calls: int, matmul: float, top: int
) -> dict[str, float]:
  """Prints the profile of ``calls`` runs of a compiled program."""
  table = instructions(hlo_text)
  events, wall = traced(run, calls)
  rows = [
      (n, table[n], int(count), seconds)
      for n, (count, seconds) in events.items()
      if n in table
  ]
  if not rows:
    raise RuntimeError(
        "The trace holds no HLO instruction events: this JAX/XLA build does "
        f"not record them on {jax.default_backend()} (needs {_TRACEME})."
    )
  busy = sum(r[3] for r in rows)
  total_flops = sum(r[1].flops * r[2] for r in rows)
  print(
      f"\n{name}: {calls} calls, {wall / calls * 1e3:.1f} ms per call (wall, "
      f"profiler on); {busy / calls * 1e3:.1f} ms per call in "
      f"{len(rows)} recorded instructions; matrix products "
      f"{total_flops / calls / 1e9:.2f} GFLOP per call; matmul reference "
      f"{matmul:.1f} GFLOP/s"
  )
  print(
      f"{'group':<22} {'time %':>7} {'GFLOP/call':>11} {'GFLOP/s':>8} {'% of matmul':>12}"
  )
  summary = {}
  for group in GROUPS:
    members = [r for r in rows if r[1].group == group]
    seconds = sum(r[3] for r in members)
    gflop = sum(r[1].flops * r[2] for r in members) / 1e9
    rate = gflop / seconds if seconds and gflop else 0.0
    summary[group] = seconds / busy
    print(
        f"{group:<22} {100 * seconds / busy:>7.1f} {gflop / calls:>11.2f} "
        + (
            f"{rate:>8.1f} {100 * rate / matmul:>11.0f}%"
            if gflop
            else f"{'-':>8} {'-':>12}"
        )
    )
  overall = total_flops / busy / 1e9
  summary["matmul_rate_share"] = (
      total_flops / 1e9 / sum(r[3] for r in rows if r[1].flops) / matmul
  )
  summary["overall_share"] = overall / matmul
  print(
      f"{'all':<22} {100.0:>7.1f} {total_flops / calls / 1e9:>11.2f} "
      f"{overall:>8.1f} {100 * overall / matmul:>11.0f}%"
  )
  print(f"\nthe {top} costliest instructions:")
  print(
      f"{'time %':>7} {'runs/call':>9} {'GFLOP/s':>8}  instruction (group): "
      "JAX operation"
  )
  for n, ins, count, seconds in sorted(rows, key=lambda r: -r[3])[:top]:
    rate = ins.flops * count / seconds / 1e9 if ins.flops else None
    print(
        f"{100 * seconds / busy:>7.1f} {count / calls:>9.0f} "
        f"{'-' if rate is None else f'{rate:.1f}':>8}  {n} ({ins.group}): "
        f"{ins.op_name[:90]}"
    )
  return summary


def learner_step(tiny: bool):
  """``(HLO text, run)`` of the evaluation notebook's learner step."""
  network = dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))
  if tiny:
    fn, args = flops.eval_learner_step(16, 5, network=network)
  else:
    fn, args = flops.eval_learner_step()
  compiled = fn.lower(*args).compile()
  state = [args[2]]

  def run():
    new_state, _ = compiled(args[0], args[1], state[0], args[3])
    state[0] = jax.block_until_ready(new_state)

  run()
  return compiled.as_text(), run


def meta_step(tiny: bool, num_agents: int = 2):
  """``(HLO text, run)`` of the meta-training notebook's meta-step
  (``num_agents`` agents)."""
  argv = ["--tiny"] * tiny + [f"--num_agents={num_agents}"]
  plan, state = meta_train_step.build(
      meta_train_step.arg_parser().parse_args(argv), inner_steps=2
  )
  holder = [state]

  def run():
    new_state, logs = plan.population.step(holder[0])
    holder[0] = jax.block_until_ready(new_state)

  run()
  return plan.population.lower(holder[0]).compile().as_text(), run


def main(argv=None) -> dict[str, dict[str, float]]:
  parser = cli.parser(__doc__)
  parser.add_argument("--calls", type=int, default=5, help="profiled calls")
  parser.add_argument("--top", type=int, default=12, help="instructions listed")
  parser.add_argument(
      "--only", choices=("learner_step", "meta_step"), default=None
  )
  parser.add_argument(
      "--num_agents", type=int, default=2, help="agents in the meta-step"
  )
  parser.add_argument("--matmul_size", type=int, default=4096)
  parser.add_argument("--tiny", action="store_true", help="smoke-test sizes")
  args = parser.parse_args(argv)
  if args.calls < 1:
    parser.error("--calls must be >= 1")
  matmul = timing.Matmul(args.matmul_size)
  programs = {
      "learner_step": learner_step,
      "meta_step": functools.partial(meta_step, num_agents=args.num_agents),
  }
  results = {}
  for name, build in programs.items():
    if args.only in (None, name):
      hlo_text, run = build(args.tiny)
      results[name] = report(
          name, hlo_text, run, args.calls, matmul.gflops(5), args.top
      )
  return results


if __name__ == "__main__":
  main()
