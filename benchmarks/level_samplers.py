"""Overhead of the level samplers per meta-step, interleaved in one run.

Builds the meta-trainer's population on random LPG grid-world levels
(``lpg/random``) once per sampler kind (``none``: the environment's own
random level at each reset, the reference; ``uniform``, ``plr``,
``groove``), compiles each, then times ``--steps`` meta-steps of every kind
round-robin, so that on a shared machine all kinds see the same load. The
overhead of a kind is its median time per meta-step over the reference's,
minus 1. GROOVE's includes training its reference agents (one per agent,
the same number of updates), which is the price of its score, not of the
sampler.

  python benchmarks/level_samplers.py --steps 10
  python benchmarks/level_samplers.py --tiny --steps 10  # small networks

The last line is ``RESULT <json>``.
"""

from __future__ import annotations

from pathlib import Path
import sys
import tempfile

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing


def _config(args, kind: str):
  from disco.meta import trainer as mt

  config = mt.default_config()
  config.population = (
      dict(
          env="lpg/random",
          env_settings=dict(mode=args.mode),
          num_agents=args.num_agents,
      ),
  )
  config.batch_size = args.batch_size
  config.rollout_len = args.rollout_len
  config.inner_steps = args.inner_steps
  config.lifetime_meta_steps = args.lifetime
  config.num_devices = 1
  config.level_sampler.kind = kind
  config.level_sampler.buffer_size = args.buffer_size
  config.level_sampler.min_fill = 0.0
  config.output_dir = tempfile.mkdtemp(prefix=f"bench-levels-{kind}-")
  if args.tiny:
    config.agent.network.update(
        dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
    )
    config.value_fn.dense = (8, 8)
  return config


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--kinds", default="none,uniform,plr,groove")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--mode", default="small")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--rollout_len", type=int, default=16)
  parser.add_argument("--inner_steps", type=int, default=2)
  parser.add_argument("--num_agents", type=int, default=2)
  parser.add_argument("--lifetime", type=int, default=4)
  parser.add_argument("--buffer_size", type=int, default=4000)
  parser.add_argument("--tiny", action="store_true")
  args = parser.parse_args(argv)

  from disco.meta import trainer as mt

  kinds = args.kinds.split(",")
  steppers = {}
  for kind in kinds:
    plan = mt.build(_config(args, kind))
    steppers[kind] = timing.Stepper(
        plan.population.step, mt.initial_state(plan), logs=True
    )
  times = timing.interleave(
      steppers,
      args.steps,
      on_warm=lambda kind, s: print(
          f"{kind}: first meta-step (compile) {s[0]:.1f} s"
      ),
  )
  result = {}
  for kind in kinds:
    sec, ratio = times.median(kind), times.ratio(kind, kinds[0])
    result[kind] = dict(
        compile_s=times.first[kind],
        s_per_meta_step=sec,
        time_vs_reference=ratio,
        overhead=ratio - 1,
    )
    print(
        f"{kind:8s} {sec:8.3f} s/meta-step ({ratio:5.3f}x "
        f"{kinds[0]}; overhead {100 * (ratio - 1):+.1f}%)"
    )
  cli.print_result(dict(args=vars(args), result=result))


if __name__ == "__main__":
  main()
