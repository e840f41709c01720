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

import math
from pathlib import Path
import sys

import jax
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing
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


def build(weights_path=None, seeds=1, network=None, sizes=None):
  """``(loop, fresh seed states, Disco103 meta-parameters)`` at the
  notebook's settings (``sizes`` replaces some of ``NOTEBOOK``, ``network``
  some of the agent network's settings)."""
  s = dict(NOTEBOOK, **(sizes or {}))
  settings = rule_registry.default_settings("disco")
  settings = settings.replace(
      learning_rate=s["learning_rate"],
      network=dict(settings.network, **(network or {})),
  )
  env = registry.make_env(
      "catch", s["num_envs"], rows=s["rows"], columns=s["columns"]
  )
  agent = agent_lib.make_agent(settings, env.num_actions)
  meta_params = weights.load_disco103(
      weights_path,
      expected=jax.eval_shape(
          agent.rule.init_meta_params, jax.random.PRNGKey(0)
      ),
  )
  config = loop_lib.LoopConfig(
      num_envs=s["num_envs"],
      rollout_len=s["rollout_len"],
      batch_size=s["batch_size"],
      replay_capacity=s["replay_capacity"],
      min_replay_size=s["min_replay_size"],
  )
  loop = loop_lib.EvalLoop(agent, env, config)
  return loop, loop.init_seeds(list(range(seeds))), meta_params


def _timed_run(loop, states, meta_params, iterations):
  (states, metrics), seconds = timing.timed(
      loop.run, states, meta_params, iterations
  )
  return states, metrics, seconds


def warm_up(loop, fresh, meta_params, iterations):
  """Compiles the loop and fills the replay: ``(states, seconds of the
  first call, seconds of the same call compiled)``."""
  states, _, first = _timed_run(loop, fresh, meta_params, iterations)
  _, _, again = _timed_run(loop, fresh, meta_params, iterations)
  config = loop.config
  warm_iterations = math.ceil(config.min_replay_size / config.num_envs)
  for _ in range(max(0, math.ceil(warm_iterations / iterations) - 1)):
    states, _, _ = _timed_run(loop, states, meta_params, iterations)
  return states, first, again


def timed_call(loop, states, meta_params, iterations):
  """One call of ``iterations`` with a learner step in each (per seed):
  ``(states, metrics, seconds)``."""
  before = np.asarray(states.learner_steps).sum()
  states, metrics, seconds = _timed_run(loop, states, meta_params, iterations)
  learner_steps = int(np.asarray(states.learner_steps).sum() - before)
  expected = iterations * np.asarray(states.learner_steps).size
  if learner_steps != expected:
    raise RuntimeError(
        f"expected {expected} learner steps in a timed call, got "
        f"{learner_steps}: the replay was not warm."
    )
  return states, metrics, seconds


def main(argv=None) -> float:
  parser = cli.parser(__doc__)
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

  loop, fresh, meta_params = build(
      args.weights, args.seeds, network=dict(compute_dtype=args.compute_dtype)
  )
  config = loop.config
  n = args.iterations
  print(
      f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); "
      f"seeds={args.seeds}, iterations per call={n}, "
      f"compute_dtype={args.compute_dtype}, "
      f"{config.env_steps_per_iteration} env steps per iteration"
  )

  states, first, again = warm_up(loop, fresh, meta_params, n)
  compile_time = max(0.0, first - again)
  print(
      f"first call: {first:.2f} s; same call compiled: {again:.2f} s; "
      f"compile time: {compile_time:.2f} s"
  )
  elapsed = []
  for _ in range(args.timed_calls):
    states, metrics, seconds = timed_call(loop, states, meta_params, n)
    elapsed.append(seconds)
  median = timing.median(elapsed)
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
