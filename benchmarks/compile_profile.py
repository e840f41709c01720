r"""Where the meta-step's cold compile goes, and what shrinks it.

For the published meta-training settings (``meta_train_step.py``'s defaults)
and variants of them, each in a fresh process with the persistent cache off,
prints:

* tracing + lowering to StableHLO (s), the StableHLO size (operations);
* XLA's compile (s), and the size of the optimised HLO (instructions);
* the steady time of a meta-step (s), so that a cheaper compile is not paid
  for at run time.

Seconds are the process's CPU seconds (user + system) spent in each phase, not
wall time, so that a shared machine inflates them less (XLA's CPU compile is
close to single-threaded); each row also prints the wall seconds. Variants::

  python benchmarks/compile_profile.py                  # all variants
  python benchmarks/compile_profile.py --variants published,scan_inner

``--variants`` picks among: ``published`` (2 inner steps without a loop),
``scan_inner`` (the second inner step in a ``lax.scan``: the loop body is
compiled once for any number of steps), ``remat`` (inner steps recomputed
in the backward pass), and ``xla_o0`` (XLA's backend optimisation level 0:
LLVM's cheap pipeline). The agent's action-conditional LSTM needs no variant:
it is one LSTM step vectorised over the actions, a constant share.
``--breakdown`` prints instead the meta-step's jaxpr equations (what XLA
compiles, before its own passes) per module of this package.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import re
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_train_step
from benchmarks import timing

VARIANTS = {
    "published": [],
    "scan_inner": ["--max_unrolled=1"],
    "remat": ["--remat"],
    "xla_o0": ["--xla_o0"],
}


def _count_ops(text: str, pattern: str) -> int:
  return len(re.findall(pattern, text, flags=re.MULTILINE))


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      if hasattr(v, "jaxpr") and hasattr(v, "consts"):  # a ClosedJaxpr
        yield v.jaxpr
      elif hasattr(v, "eqns"):  # a Jaxpr
        yield v


def equation_breakdown(jaxpr) -> dict[tuple[str, str], int]:
  """Equations of ``jaxpr`` and of every sub-program (loop bodies, nested
  jits, custom derivatives: each counted once, as XLA compiles it once) per
  ``(part, pass)``: the package module that traced it (``networks/meta_nets``,
  ``update_rules/disco``, ...; ``other`` for JAX and library code) and
  ``forward`` or ``backward`` (an equation JAX's transpose named as such;
  most of the meta-gradient's backward pass carries no name and counts as
  ``forward`` of ``other``, JAX's own code)."""
  from jax._src import source_info_util

  counts: dict[tuple[str, str], int] = {}

  def visit(j):
    for eqn in j.eqns:
      subs = list(_sub_jaxprs(eqn))
      if subs:
        for sub in subs:
          visit(sub)
        continue
      part = "other"
      # The innermost frame of this package: library code (haiku modules,
      # optax, rlax) counts for the module that called it.
      for frame in source_info_util.user_frames(eqn.source_info.traceback):
        if "/disco/" in frame.file_name:
          part = frame.file_name.rsplit("/disco/", 1)[1].removesuffix(".py")
          break
      stack = str(eqn.source_info.name_stack)
      direction = "backward" if "transpose" in stack else "forward"
      counts[(part, direction)] = counts.get((part, direction), 0) + 1

  visit(jaxpr)
  return counts


def breakdown(argv: list[str]) -> None:
  """Prints the meta-step's equations per module and pass."""
  args = meta_train_step.arg_parser().parse_args(argv)
  plan, state = meta_train_step.build(args, inner_steps=2)
  population = plan.population
  traced = population._step.trace(*population._step_args(state))  # private
  counts = equation_breakdown(traced.jaxpr.jaxpr)
  total = sum(counts.values())
  parts = sorted({p for p, _ in counts})
  rows = sorted(
      parts,
      key=lambda p: -(
          counts.get((p, "forward"), 0) + counts.get((p, "backward"), 0)
      ),
  )
  print(
      cli.table_header(
          ("module", "forward equations", "backward equations", "share")
      )
  )
  for p in rows:
    f, b = counts.get((p, "forward"), 0), counts.get((p, "backward"), 0)
    print(f"| {p} | {f} | {b} | {100 * (f + b) / total:.0f}% |")
  print(f"| total | | | {total} |")


def run_variant(argv: list[str], steps: int) -> dict:
  """One variant in this process (the cache off): its phases' seconds."""
  import jax

  jax.config.update("jax_enable_compilation_cache", False)
  parser = meta_train_step.arg_parser()
  parser.add_argument("--xla_o0", action="store_true")
  args = parser.parse_args(argv)
  plan, state = meta_train_step.build(args, inner_steps=2)
  population = plan.population
  with timing.Stopwatch() as lowering:
    lowered = population.lower(state)
    stablehlo = lowered.as_text()
  options = {"xla_backend_optimization_level": 0} if args.xla_o0 else None
  with timing.Stopwatch() as compiling:
    compiled = lowered.compile(compiler_options=options)
  hlo = compiled.as_text()
  step_args = population._step_args(state)  # a private helper: a benchmark
  _, times = timing.repeat(lambda: timing.timed(compiled, *step_args)[1], steps)
  return dict(
      lowering_cpu_s=lowering.cpu,
      lowering_wall_s=lowering.wall,
      stablehlo_ops=_count_ops(stablehlo, r"^\s*(%\S+ = )?\"?stablehlo\."),
      compile_cpu_s=compiling.cpu,
      compile_wall_s=compiling.wall,
      hlo_instructions=_count_ops(hlo, r"^\s+(ROOT )?%\S+ = "),
      steady_step_s=timing.median(times),
  )


def main() -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--steps", type=int, default=3, help="timed meta-steps")
  parser.add_argument(
      "--breakdown",
      action="store_true",
      help="only print the meta-step's equations per module and pass",
  )
  parser.add_argument(
      "--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS
  )
  flags = parser.parse_args()
  if flags.child is not None:
    cli.print_result(run_variant(flags.child, flags.steps))
    return
  if flags.breakdown:
    breakdown([])
    return
  print(
      cli.table_header(
          (
              "variant",
              "lowering CPU s (wall)",
              "StableHLO ops",
              "compile CPU s (wall)",
              "optimised HLO instructions",
              "steady meta-step s",
          )
      )
  )
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  for name in flags.variants.split(","):
    r, proc = cli.child_result(
        [
            sys.executable,
            __file__,
            f"--steps={flags.steps}",
            "--child",
            *VARIANTS[name],
        ],
        env,
    )
    if r is None:
      print(f"| {name} | failed: {proc.stderr.strip().splitlines()[-1:]} |")
      continue
    print(
        f"| {name} | {r['lowering_cpu_s']:.1f} ({r['lowering_wall_s']:.1f}) "
        f"| {r['stablehlo_ops']} | {r['compile_cpu_s']:.1f} "
        f"({r['compile_wall_s']:.1f}) | {r['hlo_instructions']} | "
        f"{r['steady_step_s']:.2f} |",
        flush=True,
    )


if __name__ == "__main__":
  main()
