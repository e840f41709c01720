"""Throughput of the meta-evaluation loop with the published notebook settings.

Disco103 on Catch 8x8, 2 environments x 29 steps per iteration, a replay of
1024 trajectories (learning from 64), batches of 64, learning rate 1e-2.

  python benchmarks/eval_throughput.py --iterations 20 --seeds 1
  python benchmarks/eval_throughput.py --compute_dtype bfloat16

``--compute_dtype`` sets the agent network's compute dtype
(``NetConfig.compute_dtype``; float32 parameters and outputs either way).

Phases (every call runs the same ``--iterations``, so the loop compiles once):
  1. the first call from fresh states (compiles, then runs);
  2. the same call again from the same fresh states: identical work, already
     compiled, so compile time = (1) - (2);
  3. further calls until the replay holds ``min_replay_size`` trajectories;
  4. ``--timed_calls`` timed calls, in which every iteration does a learner
     step; the rates are those of the median call.

Prints compile time, learner steps/s and env steps/s (over all seeds), and as
the last line ``learner_steps_per_s=<float>``. Timings are only meaningful on
an otherwise idle machine; on a shared VM single calls vary by 10-20%, hence
the median of several. The persistent compilation cache is not enabled
here (unless ``JAX_COMPILATION_CACHE_DIR`` is set), so compile time is real.
"""

from __future__ import annotations

import argparse
import math
import time

import jax
import numpy as np

from disco import agent as agent_lib
from disco import weights
from disco.environments import registry
from disco.networks import agent_nets
from disco.training import loop as loop_lib
from disco.update_rules import registry as rule_registry

NOTEBOOK = dict(
    rows=8,
    columns=8,
    num_envs=2,
    rollout_len=29,
    replay_capacity=1024,
    min_replay_size=64,
    batch_size=64,
    learning_rate=1e-2,
)


def _timed_run(loop, states, meta_params, iterations):
  start = time.perf_counter()
  states, metrics = loop.run(states, meta_params, iterations)
  jax.block_until_ready(states)
  return states, metrics, time.perf_counter() - start


def main(argv=None) -> float:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "--iterations",
      type=int,
      default=20,
      help="iterations per call (and in the timed call)",
  )
  parser.add_argument(
      "--timed_calls",
      type=int,
      default=5,
      help="timed calls after warm-up (the median is reported)",
  )
  parser.add_argument(
      "--seeds", type=int, default=1, help="seeds trained together (vmapped)"
  )
  parser.add_argument(
      "--weights",
      default=None,
      help="Disco103 file (default: found or downloaded)",
  )
  parser.add_argument(
      "--compute_dtype",
      default=agent_nets.COMPUTE_DTYPES[0],
      choices=agent_nets.COMPUTE_DTYPES,
      help="the agent network's compute dtype",
  )
  args = parser.parse_args(argv)
  if min(args.iterations, args.seeds, args.timed_calls) < 1:
    parser.error("--iterations, --seeds and --timed_calls must be >= 1")

  settings = rule_registry.default_settings("disco")
  settings.learning_rate = NOTEBOOK["learning_rate"]
  settings.network.compute_dtype = args.compute_dtype
  env = registry.make_env(
      "catch",
      NOTEBOOK["num_envs"],
      rows=NOTEBOOK["rows"],
      columns=NOTEBOOK["columns"],
  )
  agent = agent_lib.make_agent(settings, env.num_actions)
  meta_params = weights.load_disco103(
      args.weights,
      expected=jax.eval_shape(
          agent.rule.init_meta_params, jax.random.PRNGKey(0)
      ),
  )
  config = loop_lib.LoopConfig(
      num_envs=NOTEBOOK["num_envs"],
      rollout_len=NOTEBOOK["rollout_len"],
      batch_size=NOTEBOOK["batch_size"],
      replay_capacity=NOTEBOOK["replay_capacity"],
      min_replay_size=NOTEBOOK["min_replay_size"],
  )
  loop = loop_lib.EvalLoop(agent, env, config)
  fresh = loop.init_seeds(list(range(args.seeds)))
  n = args.iterations
  print(
      f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); "
      f"seeds={args.seeds}, iterations per call={n}, "
      f"compute_dtype={args.compute_dtype}, "
      f"{config.env_steps_per_iteration} env steps per iteration"
  )

  states, _, first = _timed_run(loop, fresh, meta_params, n)
  _, _, again = _timed_run(loop, fresh, meta_params, n)
  compile_time = max(0.0, first - again)
  print(
      f"first call: {first:.2f} s; same call compiled: {again:.2f} s; "
      f"compile time: {compile_time:.2f} s"
  )

  warm_iterations = math.ceil(config.min_replay_size / config.num_envs)
  for _ in range(max(0, math.ceil(warm_iterations / n) - 1)):
    states, _, _ = _timed_run(loop, states, meta_params, n)
  elapsed = []
  for _ in range(args.timed_calls):
    before = np.asarray(states.learner_steps).sum()
    states, metrics, seconds = _timed_run(loop, states, meta_params, n)
    learner_steps = int(np.asarray(states.learner_steps).sum() - before)
    if learner_steps != n * args.seeds:
      raise RuntimeError(
          f"expected {n * args.seeds} learner steps in a timed call, got "
          f"{learner_steps}: the replay was not warm."
      )
    elapsed.append(seconds)
  median = float(np.median(elapsed))
  env_steps = n * args.seeds * config.env_steps_per_iteration
  learner_rate = n * args.seeds / median
  last_return = np.nanmean(metrics["mean_return"])
  print(
      f"timed calls ({n} iterations x {args.seeds} seed(s) each): "
      + ", ".join(f"{t:.2f}" for t in elapsed)
      + f" s; median {median:.2f} "
      f"s; mean return in the last call {last_return:.3f}"
  )
  print(f"compile_time_s={compile_time:.2f}")
  print(f"env_steps_per_s={env_steps / median:.1f}")
  print(f"learner_steps_per_s={learner_rate:.3f}")
  return learner_rate


if __name__ == "__main__":
  main()
