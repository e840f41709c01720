"""FLOPs of the learner step and the meta-step, from the compiled programs.

  python benchmarks/flops.py                       # both, notebook settings
  python benchmarks/flops.py --breakdown 15        # and the largest ops
  python benchmarks/flops.py --inner_steps 4 --remat

Two counts per program, both independent of the machine's load:

* ``cost_analysis``: XLA's own count (``Compiled.cost_analysis()``), every
  operation included, but the body of a loop (``lax.scan``) counted once;
* ``matmul``: the matrix products (``dot``) of the optimised program, each
  loop body counted as often as the loop runs (XLA's known trip count) and
  the costlier branch of a ``cond``. Matrix products are almost all of the
  work here; ``--breakdown N`` lists the ``N`` costliest, grouped by the
  JAX operation that produced them (``transpose(jvp(...))`` is a backward
  pass).

The learner step is the published evaluation notebook's (Disco103, Catch
8x8, 64 trajectories of 29 steps); the meta-step the published
meta-training notebook's (2 agents, Catch 5x5, 32 environments, rollouts of
16 steps, 2 inner steps, agent (512, 512) with an LSTM model of 256). The
other benchmarks import ``compiled_flops`` to print achieved GFLOP/s.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
import re
import sys
from typing import Any

import jax
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli

_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.+?) (\S+)\((.*)$")
_SHAPE = re.compile(r"^[a-z]+\d*\[([\d,]*)\]")
_OPERAND = re.compile(r"%([\w.\-]+)")


def _dims(shape: str) -> list[int] | None:
  m = _SHAPE.match(shape)
  if m is None:
    return None
  return [int(d) for d in m.group(1).split(",") if d]


def attr(rest: str, name: str) -> str | None:
  m = re.search(name + r"=(\{[^}]*\}|[^,\s]+)", rest)
  return m.group(1) if m else None


def callees(rest: str) -> list[str]:
  names = []
  for key in ("calls", "to_apply", "body", "branch_computations"):
    value = attr(rest, key)
    if value:
      names += _OPERAND.findall(value)
  for key in ("true_computation", "false_computation"):
    value = attr(rest, key)
    if value:
      names.append(value.lstrip("%"))
  return names


def clean_op_name(op_name: str) -> str:
  op_name = re.sub(r"^jit\([^)]*\)/", "", op_name)
  for noise in ("while/body/", "closed_call/", "checkpoint/", "remat/"):
    op_name = op_name.replace(noise, "")
  return op_name


def parse_hlo(hlo_text: str) -> tuple[dict[str, list[tuple]], str]:
  """The computations of an optimised HLO module, ``{name: [(instruction,
  shape, opcode, rest of the line)]}``, and the entry computation's name."""
  comps: dict[str, list[tuple[str, str, str, str]]] = {}
  entry, current = None, None
  for line in hlo_text.splitlines():
    m = _COMPUTATION.match(line)
    if m:
      current = m.group(1)
      comps[current] = []
      if line.startswith("ENTRY"):
        entry = current
      continue
    if current is None:
      continue
    m = _INSTRUCTION.match(line)
    if m:
      comps[current].append(m.groups())
  return comps, entry


def dot_flops(shape: str, rest: str, shapes: dict[str, str]) -> float:
  """FLOPs of one ``dot`` instruction (output shape and operands line)."""
  lhs = _OPERAND.findall(rest.split(")")[0])[0]
  lhs_dims = _dims(shapes.get(lhs, "")) or []
  contract = attr(rest, "lhs_contracting_dims") or "{}"
  k = int(np.prod([lhs_dims[int(i)] for i in re.findall(r"\d+", contract)]))
  return 2.0 * np.prod(_dims(shape) or []) * k


def instruction_shapes(comps) -> dict[str, str]:
  """``{instruction: shape}`` over every computation of ``parse_hlo``."""
  return {n: shape for instrs in comps.values() for n, shape, _, _ in instrs}


def hlo_matmul_flops(hlo_text: str) -> tuple[float, dict[str, float]]:
  """Matrix-product FLOPs of an optimised HLO module, loops multiplied by
  their trip counts, and the same FLOPs by (cleaned) JAX op name."""
  comps, entry = parse_hlo(hlo_text)
  shapes = instruction_shapes(comps)

  def own_dots(comp):
    out = []
    for _, shape, op, rest in comps[comp]:
      if op != "dot":
        continue
      op_name = attr(rest, "op_name") or '"?"'
      out.append((dot_flops(shape, rest, shapes), clean_op_name(op_name[1:-1])))
    return out

  memo: dict[str, collections.Counter] = {}

  def count(comp) -> collections.Counter:
    if comp in memo:
      return memo[comp]
    total = collections.Counter()
    for flops, name in own_dots(comp):
      total[name] += flops
    for _, _, op, rest in comps[comp]:
      called = [c for c in callees(rest) if c in comps]
      if not called:
        continue
      if op == "while":
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', rest)
        body = attr(rest, "body").lstrip("%")
        total.update(
            {
                k: v * (int(trip.group(1)) if trip else 1)
                for k, v in count(body).items()
            }
        )
      elif op == "conditional":
        branches = [count(c) for c in called]
        total.update(max(branches, key=lambda c: sum(c.values())))
      else:
        for c in called:
          total.update(count(c))
    memo[comp] = total
    return total

  by_op = count(entry)
  return float(sum(by_op.values())), dict(by_op)


def compiled_flops(fn, *args, **kwargs) -> dict[str, Any]:
  """``{"cost_analysis": ..., "matmul": ..., "by_op": {...}}`` of
  ``jax.jit(fn)`` compiled for ``args`` (arrays or shape structs)."""
  jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
  return lowered_flops(jitted.lower(*args, **kwargs))


def lowered_flops(lowered) -> dict[str, Any]:
  """``compiled_flops`` of a lowered program (``jax.stages.Lowered``)."""
  compiled = lowered.compile()
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):  # older JAX: one per device
    analysis = analysis[0]
  matmul, by_op = hlo_matmul_flops(compiled.as_text())
  return dict(
      cost_analysis=float(analysis.get("flops", float("nan"))),
      matmul=matmul,
      by_op=by_op,
      memory=compiled_memory(compiled),
  )


def compiled_memory(compiled) -> float | None:
  """Bytes XLA's buffer assignment reserves for a compiled program:
  arguments, outputs and temporaries (what it needs at its peak, up to
  fragmentation), or None where the backend does not say."""
  try:
    stats = compiled.memory_analysis()
  except Exception:  # noqa: BLE001 - not every backend implements it
    return None
  if stats is None:
    return None
  peak = getattr(stats, "peak_memory_in_bytes", 0)
  if peak:
    return float(peak)
  return float(
      stats.argument_size_in_bytes
      + stats.output_size_in_bytes
      + stats.temp_size_in_bytes
      - stats.alias_size_in_bytes
  )


# ------------------------------------------------------------ programs ----
def eval_learner_step(
    batch_size: int = 64, rollout_len: int = 29, rows=8, network=None
):
  """``(fn, args)``: the evaluation notebook's learner step (Disco103
  shapes, random meta-parameters: the FLOPs do not depend on values);
  ``network`` replaces some of the agent network's settings."""
  from disco import agent as agent_lib
  from disco.environments import registry
  from disco.training import acting
  from disco.update_rules import registry as rule_registry

  settings = rule_registry.default_settings("disco")
  settings = settings.replace(
      learning_rate=1e-2, network=dict(settings.network, **(network or {}))
  )
  env = registry.make_env("catch", batch_size, rows=rows, columns=rows)
  agent = agent_lib.make_agent(settings, env.num_actions)
  rng = jax.random.PRNGKey(0)
  actor = acting.init_actor(env, rng)
  obs = jax.tree.map(lambda x: x[0], actor.timestep.observation)
  learner = agent.initial_learner_state(rng, obs)
  _, rollout = jax.jit(
      lambda p, s, a: acting.unroll_actor(agent, env, p, s, a, rng, rollout_len)
  )(learner.params, learner.rule_state, actor)
  meta_params = agent.rule.init_meta_params(rng)
  fn = jax.jit(agent.learner_step, static_argnums=4)
  return fn, (rng, rollout, learner, meta_params, False)


def meta_step(inner_steps: int = 2, remat: bool = False, max_unrolled=2):
  """The meta-training notebook's meta-step, lowered."""
  import tempfile

  from disco.meta import trainer as mt

  config = mt.default_config()
  config.inner_steps = inner_steps
  config.remat_inner_steps = remat
  config.max_unrolled_inner_steps = max_unrolled
  config.num_devices = 1
  config.output_dir = tempfile.mkdtemp(prefix="flops-")
  plan = mt.build(config)
  return plan.population.lower(mt.abstract_state(plan.population, plan.rule))


def _print(name: str, flops: dict[str, Any], breakdown: int) -> None:
  memory = flops["memory"]
  print(
      f"{name}: cost_analysis {flops['cost_analysis'] / 1e9:.2f} GFLOP "
      f"(loop bodies once), matmul {flops['matmul'] / 1e9:.2f} GFLOP "
      "(loops counted per trip), memory "
      + ("n/a" if memory is None else f"{memory / 2**20:.0f} MiB")
  )
  if breakdown:
    top = sorted(flops["by_op"].items(), key=lambda kv: -kv[1])[:breakdown]
    for op, f in top:
      print(f"    {f / 1e9:8.3f} GFLOP {100 * f / flops['matmul']:5.1f}%  {op}")


def main(argv=None) -> dict[str, float]:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--breakdown", type=int, default=0, help="list the N costliest ops"
  )
  parser.add_argument("--inner_steps", type=int, default=2)
  parser.add_argument("--remat", action="store_true")
  parser.add_argument("--max_unrolled", type=int, default=2)
  parser.add_argument(
      "--only", choices=("learner_step", "meta_step"), default=None
  )
  args = parser.parse_args(argv)
  results = {}
  if args.only in (None, "learner_step"):
    fn, step_args = eval_learner_step()
    flops = compiled_flops(fn, *step_args)
    _print("eval learner step", flops, args.breakdown)
    results["learner_step"] = flops
  if args.only in (None, "meta_step"):
    flops = lowered_flops(
        meta_step(args.inner_steps, args.remat, args.max_unrolled)
    )
    _print(
        f"meta-step ({args.inner_steps} inner steps, remat={args.remat}, "
        f"max_unrolled={args.max_unrolled})",
        flops,
        args.breakdown,
    )
    results["meta_step"] = flops
  summary = {
      k: {m: v[m] for m in ("cost_analysis", "matmul", "memory")}
      for k, v in results.items()
  }
  print("FLOPS " + json.dumps(summary))
  return summary


if __name__ == "__main__":
  main()
