"""Learning check: Disco103 on jittable Catch with the published evaluation
notebook's settings (2 envs x 29 steps, replay 1024, batch 64, lr 1e-2,
network (512, 512) + LSTM 128).

Prints, per seed, the mean return over the last 500 episodes every
``--report_every`` environment steps, the first environment step at which it
reached ``--threshold``, and the final value. Last line:
``final_mean_return=<float>`` (mean over seeds).

  python benchmarks/disco103_catch.py --env_steps 60000 --seeds 3
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

from disco import agent as agent_lib
from disco import weights
from disco.environments import registry
from disco.training import analysis
from disco.training import loop
from disco.update_rules import agent_settings
from disco.update_rules import registry as rule_registry


def windowed_returns(metrics, num_episodes: int) -> np.ndarray:
  """``[S, N]`` mean return over the last ``num_episodes`` episodes after each
  iteration; NaN until that many episodes have finished."""
  curve = analysis.return_curve(metrics, num_episodes)
  enough = np.cumsum(np.asarray(metrics["episodes"]), axis=1) >= num_episodes
  return np.where(enough, curve, np.nan)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--env_steps", type=int, default=60_000)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--rows", type=int, default=8)
  parser.add_argument("--columns", type=int, default=8)
  parser.add_argument("--episodes", type=int, default=500)
  parser.add_argument("--threshold", type=float, default=0.9)
  parser.add_argument("--report_every", type=int, default=5_000)
  parser.add_argument("--iterations_per_call", type=int, default=100)
  parser.add_argument(
      "--loss_mask",
      default="published",
      choices=agent_settings.LOSS_MASKS,
      help="transitions the agent's losses average over",
  )
  args = parser.parse_args()

  cfg = loop.LoopConfig()  # the published notebook's settings
  settings = rule_registry.default_settings("disco103").replace(
      loss_mask=args.loss_mask
  )
  env = registry.make_env(
      "catch", cfg.num_envs, rows=args.rows, columns=args.columns
  )
  agent = agent_lib.make_agent(settings, env.num_actions)
  eval_loop = loop.EvalLoop(agent, env, cfg)
  meta_params = weights.load_disco103()
  states = eval_loop.init_seeds(list(range(args.seeds)))

  per_call = args.iterations_per_call
  calls = -(-args.env_steps // (cfg.env_steps_per_iteration * per_call))
  history = []
  for _ in range(calls):
    states, metrics = eval_loop.run(states, meta_params, per_call)
    history.append(metrics)
  metrics = analysis.concat_metrics(history)
  curve = windowed_returns(metrics, args.episodes)
  env_steps = metrics["env_steps"][0]

  print(
      f"Disco103 on Catch {args.rows}x{args.columns}, loss mask "
      f"{args.loss_mask}, {args.seeds} seeds, {int(env_steps[-1])} env "
      f"steps, devices: {jax.devices()}"
  )
  print("env_steps  " + "  ".join(f"seed{s}" for s in range(args.seeds)))
  for target in range(
      args.report_every, int(env_steps[-1]) + 1, args.report_every
  ):
    i = int(np.searchsorted(env_steps, target))
    print(
        f"{int(env_steps[i]):9d}  "
        + "  ".join(f"{curve[s, i]:+.3f}" for s in range(args.seeds))
    )
  for s in range(args.seeds):
    hit = np.nonzero(curve[s] >= args.threshold)[0]
    first = int(env_steps[hit[0]]) if hit.size else None
    print(
        f"seed {s}: first reached {args.threshold} (last {args.episodes} "
        f"episodes) at env step {first}; final {curve[s, -1]:+.3f}"
    )
  print(f"final_mean_return={np.nanmean(curve[:, -1]):.4f}")


if __name__ == "__main__":
  main()
