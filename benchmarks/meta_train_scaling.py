"""How meta-training scales with agents per device, devices and hosts.

The published meta-training settings (Catch 5x5, 32 environments per agent,
rollouts of 16 steps, 2 inner steps, an MLP agent (512, 512) with an LSTM
action model (256), a value function (256, 256)), with 2 to 64 agents per
device:

  python benchmarks/meta_train_scaling.py
  python benchmarks/meta_train_scaling.py --agents_per_device 2,8 --processes 2
  python benchmarks/meta_train_scaling.py --tiny --agents_per_device 1,2 --steps 1

Prints, for each number of agents per device, the seconds per meta-step, the
seconds per agent (flat once the device is busy: the table marks where it
bends) and XLA's count of FLOPs of one device's part of the meta-step. Then
the bytes all-reduced per meta-step (the meta-gradient: 754,778 float32
parameters of the Disco network, about 3 MB, plus a few logs), the measured
time of that all-reduce over this run's devices, and the scaling model:
with ``N`` hosts a meta-step takes its compute time plus a ring all-reduce of
``S`` bytes, ``t_comm(N) = 2 (N - 1) / N * S / B + 2 (N - 1) * latency``, so
the efficiency is ``t_compute / (t_compute + t_comm(N))`` (no overlap of
communication and compute assumed), printed for ``--hosts`` at
``--bandwidth_gbit`` and ``--latency_us``.

``--estimator es`` sweeps evolution strategies instead: "agents" are then
ES members (antithetic pairs, so the total must be even), one agent each,
trained for ``--es_lifetime`` iterations of the evaluation loop per
generation; the table adds env steps and member lifetimes per second (per
device and in all):

  python benchmarks/meta_train_scaling.py --estimator es --agents_per_device 2,4
  python benchmarks/meta_train_scaling.py --estimator es --agents_per_device 2,4 --processes 2

``--processes P`` runs the sweep in ``P`` processes of this machine, joined
by ``jax.distributed`` (Gloo collectives over local TCP), each with
``--devices_per_process`` host devices: the model's one measured data point
on a CPU. Without it, one process uses all its devices (set
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` for N host devices).

Timings are only meaningful on an otherwise idle machine. The last line is
``seconds_per_agent=<float>`` at the largest number of agents per device.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
import socket
import subprocess
import sys
import tempfile

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing


def _config(args, agents: int, process_id: int | None, port: int | None):
  from disco.meta import trainer as mt

  config = mt.default_config()
  config.population = (
      dict(
          env="catch",
          env_settings=dict(rows=args.rows, columns=args.rows),
          num_agents=1 if args.estimator == "es" else agents,
      ),
  )
  if args.estimator == "es":
    config.estimator = "es"
    config.es.population_size = agents
    config.es.lifetime_iterations = args.es_lifetime
    config.es.final_iterations = min(8, args.es_lifetime)
  config.batch_size = args.batch_size
  config.rollout_len = args.rollout_len
  config.inner_steps = args.inner_steps
  config.num_devices = args.num_devices
  if args.tiny:  # smoke-test sizes
    config.agent.network.update(
        dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
    )
    config.value_fn.dense = (8, 8)
  if process_id is not None:
    config.distributed.update(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=args.processes,
        process_id=process_id,
    )
  config.output_dir = tempfile.mkdtemp(prefix="meta-scaling-")
  return config


def _time_steps(population, state, steps: int):
  stepper = timing.Stepper(population.step, state, logs=True)
  first, times = timing.repeat(stepper, steps)
  return stepper.state, first, timing.median(times)


def _flops(population, state) -> float | None:
  try:
    cost = population.lower(state).compile().cost_analysis()
  except Exception:  # noqa: BLE001 - not every backend reports costs
    return None
  if isinstance(cost, list):  # older JAX: one dict per program
    cost = cost[0] if cost else {}
  flops = (cost or {}).get("flops")
  return float(flops) if flops is not None and flops > 0 else None


def _allreduce_seconds(population, meta_params, repeats: int = 20) -> float:
  """Median time of a mean over the population's devices of a tree shaped
  like the meta-parameters (the meta-gradient's all-reduce)."""
  import jax
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  from disco.meta import population as population_lib

  mesh = population.mesh
  mean = jax.jit(
      jax.shard_map(
          lambda g: jax.lax.pmean(g, population_lib.AXIS),
          mesh=mesh,
          in_specs=P(),
          out_specs=P(),
          check_vma=False,
      )
  )
  grads = jax.device_put(meta_params, NamedSharding(mesh, P()))
  _, times = timing.repeat(lambda: timing.timed(mean, grads)[1], repeats)
  return timing.median(times)


def sweep(args, process_id: int | None = None, port: int | None = None):
  """Runs every setting in this process; process 0 (or the only one)
  prints."""
  import jax
  import numpy as np

  from disco import distributed
  from disco.meta import trainer as mt

  if process_id is not None:
    block = mt.default_config().distributed
    block.update(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=args.processes,
        process_id=process_id,
    )
    distributed.initialize(distributed.settings(block), "meta_train_scaling")
  if args.num_devices:
    devices = args.num_devices * jax.process_count()
  else:
    devices = len(jax.devices())
  rows, meta_bytes = [], None
  for per_device in args.agents_per_device:
    config = _config(args, per_device * devices, process_id, port)
    plan = mt.build(config)
    os.rmdir(config.output_dir)  # nothing is written there
    state = mt.initial_state(plan)
    jax.block_until_ready(state)
    state, first, steady = _time_steps(plan.population, state, args.steps)
    flops = _flops(plan.population, state)
    if meta_bytes is None:
      leaves = jax.tree.leaves(state.meta_params)
      meta_bytes = sum(x.size * x.dtype.itemsize for x in leaves)
      params = sum(x.size for x in leaves)
      allreduce_s = _allreduce_seconds(plan.population, state.meta_params)
    if args.estimator == "es":
      env_steps = plan.population.env_steps_per_generation()
    else:
      env_steps = None
    rows.append(
        dict(
            per_device=per_device,
            agents=per_device * devices,
            first=first,
            steady=steady,
            per_agent=steady / per_device,
            flops=flops,
            env_steps=env_steps,
        )
    )
    del state, plan
  if not distributed.is_main():
    return None
  kind = jax.devices()[0].device_kind
  print(
      f"{devices} {kind} device(s) in {jax.process_count()} process(es); "
      f"Catch {args.rows}x{args.rows}, {args.batch_size} envs x "
      + (
          f"{args.rollout_len + 1} steps, ES members of one agent, lifetimes "
          f"of {args.es_lifetime} iterations"
          if args.estimator == "es"
          else f"{args.rollout_len} steps, {args.inner_steps} inner step(s)"
      )
      + (" (tiny networks)" if args.tiny else "")
  )
  if args.estimator == "es":
    print(
        f"{'members/device':>14} {'members':>8} {'s/generation':>13} "
        f"{'lifetimes/s':>12} {'lifetimes/s/device':>19} "
        f"{'env steps/s':>12} {'env steps/s/device':>19}"
    )
    for r in rows:
      lives, steps = r["agents"] / r["steady"], r["env_steps"] / r["steady"]
      print(
          f"{r['per_device']:>14} {r['agents']:>8} {r['steady']:>13.3f} "
          f"{lives:>12.3f} {lives / devices:>19.3f} {steps:>12.0f} "
          f"{steps / devices:>19.0f}"
      )
  best = min(r["per_agent"] for r in rows)
  busy = next(r for r in rows if r["per_agent"] <= 1.1 * best)
  print(
      f"{'agents/device':>13} {'agents':>7} {'s/meta-step':>12} "
      f"{'s/agent':>9} {'GFLOP/device':>13} {'GFLOP/s/device':>15} "
      f"{'compile s':>10}"
  )
  for r in rows:
    gflop = r["flops"] / 1e9 if r["flops"] else math.nan
    mark = "  <- within 10% of the best s/agent" if r is busy else ""
    print(
        f"{r['per_device']:>13} {r['agents']:>7} {r['steady']:>12.4f} "
        f"{r['per_agent']:>9.4f} {gflop:>13.3g} "
        f"{gflop / r['steady']:>15.3g} "
        f"{max(0.0, r['first'] - r['steady']):>10.1f}{mark}"
    )
  print(
      f"all-reduced per meta-step: the meta-gradient, {params:,} float32 "
      f"parameters = {meta_bytes / 1e6:.2f} MB; measured mean over these "
      f"{devices} device(s): {allreduce_s * 1e3:.2f} ms"
  )
  bandwidth = args.bandwidth_gbit * 1e9 / 8
  latency = args.latency_us * 1e-6
  print(
      f"scaling model: ring all-reduce of {meta_bytes / 1e6:.2f} MB at "
      f"{args.bandwidth_gbit:g} Gbit/s, {args.latency_us:g} us per hop, no "
      "overlap; efficiency = t_compute / (t_compute + t_comm)"
  )
  header = "".join(f"{r['per_device']:>10}" for r in rows)
  print(f"{'hosts':>6} {'t_comm ms':>10}  efficiency at agents/device:{header}")
  for n in args.hosts:
    comm = 2 * (n - 1) / n * meta_bytes / bandwidth + 2 * (n - 1) * latency
    eff = "".join(f"{r['steady'] / (r['steady'] + comm):>10.3f}" for r in rows)
    print(f"{n:>6} {comm * 1e3:>10.3f}  {'':>28}{eff}")
  last = rows[-1]["per_agent"]
  print(f"seconds_per_agent={last:.6f}")
  return np.asarray([r["per_agent"] for r in rows])


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _spawn(args, argv) -> int:
  """Starts ``--processes`` copies of this script joined by
  jax.distributed; returns the worst exit status."""
  port = _free_port()
  env = dict(os.environ)
  env["XLA_FLAGS"] = (
      env.get("XLA_FLAGS", "")
      + f" --xla_force_host_platform_device_count={args.devices_per_process}"
  ).strip()
  procs = [
      subprocess.Popen(
          [
              sys.executable,
              os.path.abspath(__file__),
              *argv,
              f"--process_id={i}",
              f"--port={port}",
          ],
          env=env,
          stdout=None if i == 0 else subprocess.DEVNULL,
      )
      for i in range(args.processes)
  ]
  try:
    return max(abs(p.wait()) for p in procs)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()


def _ints(text: str) -> list[int]:
  values = [int(x) for x in text.split(",") if x.strip()]
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError(f"positive integers, got {text!r}")
  return values


def main(argv=None):
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--agents_per_device", type=_ints, default=_ints("2,4,8,16,32,64")
  )
  parser.add_argument(
      "--steps", type=int, default=5, help="timed meta-steps after the first"
  )
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--rollout_len", type=int, default=16)
  parser.add_argument("--inner_steps", type=int, default=2)
  parser.add_argument("--rows", type=int, default=5, help="Catch rows/columns")
  parser.add_argument(
      "--estimator",
      choices=("backprop", "es"),
      default="backprop",
      help="backprop: agents per device; es: ES members per device",
  )
  parser.add_argument(
      "--es_lifetime",
      type=int,
      default=16,
      help="ES: iterations of the evaluation loop per member lifetime",
  )
  parser.add_argument(
      "--num_devices",
      type=int,
      default=0,
      help="devices per process (0: all)",
  )
  parser.add_argument(
      "--processes",
      type=int,
      default=1,
      help="processes on this machine joined by jax.distributed",
  )
  parser.add_argument("--devices_per_process", type=int, default=1)
  parser.add_argument("--hosts", type=_ints, default=_ints("1,2,4,8,16,64"))
  parser.add_argument("--bandwidth_gbit", type=float, default=100.0)
  parser.add_argument("--latency_us", type=float, default=10.0)
  parser.add_argument(
      "--tiny",
      action="store_true",
      help="tiny networks (a smoke test of this script)",
  )
  parser.add_argument("--process_id", type=int, help=argparse.SUPPRESS)
  parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.steps < 1 or args.processes < 1:
    parser.error("--steps and --processes must be >= 1")
  if args.processes > 1 and args.process_id is None:
    sys.exit(_spawn(args, list(sys.argv[1:] if argv is None else argv)))
  return sweep(args, args.process_id, args.port)


if __name__ == "__main__":
  main()
