"""Does xland-minigrid's observation embedding help on MiniGrid? (issue 27)

  python benchmarks/minigrid_embedding.py --out benchmarks/results/minigrid_embedding \\
      [--steps 100000] [--seeds 2] [--only NAME ...]

PPO (its registered loop and network) and actor-critic (entropy cost 0.01,
the environment suite's on-policy loop) train on ``--env`` (default
MiniGrid-Empty-8x8) with the environment suite's MiniGrid torso (a 16-channel
3x3 convolution in front of the rule's dense torso) and with
``network.obs_embedding="minigrid"`` (tile and colour id embeddings, then
xland-minigrid's PPO convolutions). Each run goes into ``--out/<name>``
(finished runs are not repeated); ``--out/embedding.csv`` and the printed
markdown table give the final mean return (last 100 episodes of each seed,
mean over seeds with a 95% bootstrap interval) and each seed's.
"""

from __future__ import annotations

from pathlib import Path
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import suite_settings as suite
from disco.comparison import results as results_lib
from disco.training import analysis

LAST_EPISODES = 100
AC_HYPER = dict(entropy_cost=0.01)
VARIANTS = (
    # (name, rule, loop, network, hyper_params)
    ("ppo_conv", "ppo", None, suite.MINIGRID_NET, {}),
    ("ppo_embedding", "ppo", None, suite.MINIGRID_EMBEDDING_NET, {}),
    ("ac_conv", "actor_critic", suite.ON_POLICY, suite.MINIGRID_NET, AC_HYPER),
    (
        "ac_embedding",
        "actor_critic",
        suite.ON_POLICY,
        suite.MINIGRID_EMBEDDING_NET,
        AC_HYPER,
    ),
)


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--out", default="/tmp/minigrid_embedding")
  parser.add_argument("--env", default="xminigrid/MiniGrid-Empty-8x8")
  parser.add_argument("--steps", type=int, default=100_000)
  parser.add_argument("--seeds", type=int, default=2)
  parser.add_argument("--only", nargs="+", default=None)
  args = parser.parse_args(argv)
  out = Path(args.out)
  rows = []
  for name, rule, loop, network, hyper in VARIANTS:
    if args.only and name not in args.only:
      continue
    folder = out / name
    config = suite.eval_config(
        rule,
        args.env,
        args.steps,
        args.seeds,
        folder,
        LAST_EPISODES,
        loop=loop,
        network=network,
        hyper_params=hyper,
    )
    suite.run(config, folder)
    result = results_lib.load_run(folder)
    scores = result.final_scores()
    ci = analysis.bootstrap_ci(scores)
    rows.append(
        dict(
            name=name,
            rule=rule,
            env=args.env,
            env_steps=int(result.metrics["env_steps"][0, -1]),
            network=network,
            hyper_params=hyper,
            final_return=f"{scores.mean():.3f}",
            ci="n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]",
            per_seed=" ".join(f"{x:.3f}" for x in scores),
        )
    )
    print(rows[-1], flush=True)
  if not rows:
    return
  cli.write_csv(out / "embedding.csv", rows)
  print(
      "\n"
      + cli.table_header(
          ("variant", "rule", "env steps", "final return (95% CI)", "per seed")
      )
  )
  for r in rows:
    print(
        f"| `{r['name']}` | {r['rule']} | {r['env_steps']} | "
        f"{r['final_return']} {r['ci']} | {r['per_seed']} |"
    )


if __name__ == "__main__":
  main()
