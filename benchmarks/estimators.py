"""Cost of one meta-step of each meta-gradient estimator, side by side.

Builds the meta-trainer's population for ``backprop``, ``pes`` and ``es`` on
Catch (default 5x5, 32 environments per agent, rollouts of 16 steps, 2 inner
steps: the published meta-training settings), compiles each, then times
``--steps`` meta-steps of every estimator *interleaved* (round-robin), so
that on a shared machine all estimators see the same load; figures are
also given as ratios to ``backprop`` measured in the same rounds.

  python benchmarks/estimators.py                  # published agent sizes
  python benchmarks/estimators.py --tiny --steps 5 # small networks

For each estimator it prints the compile time (first meta-step), seconds
per meta-step (median over rounds), environment steps per meta-step and per
second, and for ES member lifetimes per second. The last line is
``RESULT <json>``.
"""

from __future__ import annotations

from pathlib import Path
import sys
import tempfile

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing


def _config(args, estimator: str):
  from disco.meta import trainer as mt

  config = mt.default_config()
  agents = {"backprop": args.num_agents, "pes": args.particles, "es": 1}
  config.population = (
      dict(
          env="catch",
          env_settings=dict(rows=args.rows, columns=args.rows),
          num_agents=agents[estimator],
      ),
  )
  config.estimator = estimator
  config.batch_size = args.batch_size
  config.rollout_len = args.rollout_len
  config.inner_steps = args.inner_steps
  config.num_devices = 1
  if estimator == "pes":
    config.lifetime_meta_steps = args.pes_lifetime
  config.es.population_size = args.es_members
  config.es.lifetime_iterations = args.es_lifetime
  config.es.final_iterations = min(8, args.es_lifetime)
  config.output_dir = tempfile.mkdtemp(prefix=f"bench-{estimator}-")
  if args.tiny:
    config.agent.network.update(
        dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
    )
    config.value_fn.dense = (8, 8)
  return config


def _env_steps(plan, estimator: str, args) -> int:
  """Environment steps of one meta-step (validation rollouts included)."""
  if estimator == "es":
    return plan.population.env_steps_per_generation()
  per_agent = args.batch_size * args.rollout_len * args.inner_steps
  if estimator == "backprop":
    per_agent += args.batch_size * 2 * args.rollout_len  # validation
  return per_agent * plan.population.num_agents


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--estimators", default="backprop,pes,es")
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--rows", type=int, default=5)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--rollout_len", type=int, default=16)
  parser.add_argument("--inner_steps", type=int, default=2)
  parser.add_argument("--num_agents", type=int, default=2)
  parser.add_argument("--particles", type=int, default=2)
  parser.add_argument("--pes_lifetime", type=int, default=8)
  parser.add_argument("--es_members", type=int, default=8)
  parser.add_argument("--es_lifetime", type=int, default=16)
  parser.add_argument("--tiny", action="store_true")
  args = parser.parse_args(argv)

  from disco.meta import trainer as mt

  names = args.estimators.split(",")
  plans, steppers = {}, {}
  for name in names:
    plans[name] = plan = mt.build(_config(args, name))
    steppers[name] = timing.Stepper(
        plan.population.step, mt.initial_state(plan), logs=True
    )
  times = timing.interleave(
      steppers,
      args.steps,
      on_warm=lambda name, s: print(
          f"{name}: first meta-step (compile) {s[0]:.1f} s"
      ),
  )
  result = {}
  ref = times.median("backprop") if "backprop" in names else None
  for name in names:
    sec = times.median(name)
    steps = _env_steps(plans[name], name, args)
    row = dict(
        compile_s=times.first[name],
        s_per_meta_step=sec,
        env_steps_per_meta_step=steps,
        env_steps_per_s=steps / sec,
    )
    if ref:
      row["time_vs_backprop"] = sec / ref
    if name == "es":
      row["member_lifetimes_per_s"] = args.es_members / sec
    result[name] = row
    print(
        f"{name:9s} {sec:8.3f} s/meta-step"
        + (f" ({sec / ref:5.2f}x backprop)" if ref else "")
        + f", {steps} env steps/meta-step, {steps / sec:9.0f} env steps/s"
        + (
            f", {args.es_members / sec:.2f} member lifetimes/s"
            if name == "es"
            else ""
        )
    )
  cli.print_result(dict(args=vars(args), result=result))


if __name__ == "__main__":
  main()
