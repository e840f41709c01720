"""Environment steps to learn Catch with each rule and each loss mask.

  python benchmarks/baselines_catch.py          # 4 hand-designed rules, both masks
  python benchmarks/baselines_catch.py --rules mpo spo --loss_masks valid

Every rule trains with its registered settings (``update_rules.registry``;
``disco103`` with the published weights), with the agent's loss mask set to
each of ``--loss_masks`` (``valid``: every transition with a valid target;
``published``: not those that start at an episode's last step, as the
published DiscoRL agent), in ``disco.training.loop.EvalLoop`` on jittable
Catch, several seeds at once. The loop runs in calls of ``--chunk``
iterations; after each call a seed counts as solved once the mean return of
its last ``--last_episodes`` episodes reaches ``--threshold``. The script
prints, per rule, mask and seed, the environment steps at which that
happened (checked at call boundaries, so a call's worth of steps is the
resolution) and the final score, and the median over seeds.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from disco import agent as agent_lib
from disco.environments import catch
from disco.training import analysis
from disco.training import loop
from disco.update_rules import agent_settings
from disco.update_rules import resolve

RULES = ("actor_critic", "policy_gradient", "mpo", "spo")
LOSS_MASKS = agent_settings.LOSS_MASKS

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


def run_rule(rule: str, loss_mask: str, args) -> dict:
  """Steps to the threshold per seed (None: not reached) and final scores."""
  resolved = resolve.resolve_rule(
      rule, args.weights if rule == "disco103" else None
  )
  settings = resolved.settings.replace(loss_mask=loss_mask)
  config = LOOPS[args.loop]
  env = catch.Catch(config.num_envs, rows=args.rows, columns=args.columns)
  agent = agent_lib.make_agent(settings, env.num_actions, rule=resolved.rule)
  eval_loop = loop.EvalLoop(agent, env, config)
  states = eval_loop.init_seeds(args.seeds)
  solved_at = [None] * len(args.seeds)
  history, steps = [], 0
  while steps < args.max_env_steps:
    states, metrics = eval_loop.run(states, resolved.meta_params, args.chunk)
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
  return dict(solved_at=solved_at, final=scores, steps=steps)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rules", nargs="+", default=list(RULES))
  parser.add_argument(
      "--loss_masks", nargs="+", default=list(LOSS_MASKS), choices=LOSS_MASKS
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
  parser.add_argument(
      "--weights", default=None, help="Disco103 file (default: found)"
  )
  args = parser.parse_args(argv)

  config = LOOPS[args.loop]
  print(
      f"Catch {args.rows}x{args.columns}, loop {args.loop} ({config}), "
      f"seeds {args.seeds}, threshold {args.threshold} over the last "
      f"{args.last_episodes} episodes, {jax.devices()[0].platform}"
  )
  print(
      f"{'rule':<16}{'loss mask':<11}{'env steps to threshold per seed':<36}"
      f"{'median':>9}  final score per seed"
  )
  for rule in args.rules:
    for loss_mask in args.loss_masks:
      r = run_rule(rule, loss_mask, args)
      solved = [s if s is not None else np.inf for s in r["solved_at"]]
      text = " ".join(
          str(s) if s is not None else f">{r['steps']}" for s in r["solved_at"]
      )
      median = np.median(solved)
      median = f">{r['steps']}" if np.isinf(median) else f"{median:.0f}"
      final = " ".join(f"{x:.2f}" for x in r["final"])
      print(
          f"{rule:<16}{loss_mask:<11}{text:<36}{median:>9}  {final}",
          flush=True,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
