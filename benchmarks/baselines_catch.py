"""Steps and wall time to learn Catch 5x5 with hand-designed and discovered rules.

  python benchmarks/baselines_catch.py                       # all four rules
  python benchmarks/baselines_catch.py --rules mpo spo --seeds 0 1 2

Every rule trains with its registered settings (``update_rules.registry``; Disco103
with the published weights) in ``disco.training.loop.EvalLoop`` on jittable
Catch 5x5, several seeds at once. The loop runs in calls of ``--chunk``
iterations; after each call a seed counts as solved once the mean return of
its last ``--last_episodes`` episodes reaches ``--threshold``. The script
prints, per rule and seed, the environment steps at which that happened
(checked at call boundaries, so a call's worth of steps is the resolution),
the final score, and the wall time (the first call includes compilation).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

from disco import agent as agent_lib
from disco.environments import catch
from disco.launch import common
from disco.training import analysis
from disco.training import loop

RULES = ("actor_critic", "mpo", "spo", "disco103")

# Loop presets: the published evaluation notebook's (2 streams x 29 steps, a
# replay of 1024 trajectories, batches of 64) and an on-policy one (every
# rollout of 8 streams x 8 steps is learnt from once).
LOOPS = {
    "replay": loop.LoopConfig(
        num_envs=2,
        rollout_len=29,
        batch_size=64,
        replay_capacity=1024,
        min_replay_size=64,
    ),
    "onpolicy": loop.LoopConfig(
        num_envs=8, rollout_len=8, batch_size=8, replay_capacity=0
    ),
}


def run_rule(rule: str, args) -> dict:
  resolved = common.resolve_rule(rule)
  meta_params = resolved.meta_params
  config = LOOPS[args.loop]
  env = catch.Catch(config.num_envs, rows=args.rows, columns=args.columns)
  agent = agent_lib.make_agent(
      resolved.settings, env.num_actions, rule=resolved.rule
  )
  eval_loop = loop.EvalLoop(agent, env, config)
  states = eval_loop.init_seeds(args.seeds)
  num_seeds = len(args.seeds)
  solved_at = [None] * num_seeds
  history = []
  start = time.time()
  first_call = None
  steps = 0
  while steps < args.max_env_steps:
    states, metrics = eval_loop.run(states, meta_params, args.chunk)
    jax.block_until_ready(states)
    if first_call is None:
      first_call = time.time() - start
    history.append(metrics)
    steps = int(metrics["env_steps"][0, -1])
    scores = analysis.final_scores(
        analysis.concat_metrics(history), args.last_episodes
    )
    for i, score in enumerate(scores):
      if solved_at[i] is None and score >= args.threshold:
        solved_at[i] = steps
    if all(s is not None for s in solved_at):
      break
  wall = time.time() - start
  return dict(
      rule=rule,
      solved_at=solved_at,
      final=scores,
      steps=steps,
      wall=wall,
      first_call=first_call,
  )


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      "--rules", nargs="+", default=list(RULES), choices=list(RULES)
  )
  parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
  parser.add_argument("--loop", default="onpolicy", choices=list(LOOPS))
  parser.add_argument("--rows", type=int, default=5)
  parser.add_argument("--columns", type=int, default=5)
  parser.add_argument("--threshold", type=float, default=0.8)
  parser.add_argument("--last_episodes", type=int, default=200)
  parser.add_argument(
      "--chunk", type=int, default=250, help="iterations per compiled call"
  )
  parser.add_argument("--max_env_steps", type=int, default=1_500_000)
  args = parser.parse_args(argv)

  config = LOOPS[args.loop]
  print(
      f"Catch {args.rows}x{args.columns}, loop {args.loop} ({config}), "
      f"seeds {args.seeds}, threshold {args.threshold} over the last "
      f"{args.last_episodes} episodes, {jax.devices()[0].platform}"
  )
  print(
      f"{'rule':<14}{'steps to threshold per seed':<36}{'final score':<24}"
      f"{'steps':>9}{'wall s':>9}{'1st call s':>12}"
  )
  for rule in args.rules:
    r = run_rule(rule, args)
    solved = " ".join(
        str(s) if s is not None else f">{r['steps']}" for s in r["solved_at"]
    )
    final = " ".join(f"{x:.2f}" for x in r["final"])
    print(
        f"{rule:<14}{solved:<36}{final:<24}{r['steps']:>9}"
        f"{r['wall']:>9.1f}{r['first_call']:>12.1f}",
        flush=True,
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
