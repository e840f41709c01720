r"""The first discovery: meta-train rules on small worlds, test them on others (issue 27).

  python benchmarks/discovery.py all --root /work/runs/discovery \
      --out benchmarks/results/discovery

``all`` runs the three steps below in turn (each is a command of its own
too: ``run``, ``compare``, ``report``, all with ``--root``); every step
skips what is finished, so the command resumes after a kill.

``run`` meta-trains rules from random meta-parameters, one run per variant
and seed in ``<root>/<variant>-s<seed>`` (``--variants``, ``--seeds``):

* ``lpg``: the LPG meta-network (GRU of ``--gru``), truncated
  meta-gradients through K=5 agent updates (``configs/meta_train_lpg.py``);
* ``lpg_es``: the same meta-network with evolution strategies (OpenAI-ES,
  ``--es_members`` members in antithetic pairs, each training fresh agents
  for ``--es_iterations`` iterations of the evaluation loop);
* ``disco``: the Disco meta-network (``configs/meta_train.py``) through K=2
  agent updates.

The training population is LPG-paper style: one agent on each of the five
LPG grid worlds (``lpg/dense`` ... ``long_dense``), the delayed chain and
Catch 5x5, ``--envs`` environments each, agents with ``--agent_lr`` and a
(64, 64) torso, lifetimes of 10-250 agent updates (backprop variants).
``--validations`` times in a run (and at 0) each run validates its
rule on the held-out CartPole-v1, Breakout-MinAtar and MiniGrid-Empty-8x8
(``--validation_seeds`` fresh agents each, ``--validation_steps`` env
steps, the environment suite's on-policy loop of 8 environments x 16
steps), writes ``validation.csv`` and keeps ``best_meta_params.npz``.
Finished runs are skipped and unfinished ones resume from their last
checkpoint, so the command can be killed and started again.

``compare`` takes, per variant, the best validated rule over its seeds and
runs ``disco-compare`` on the held-out environments (``--compare_seeds``
reported seeds from 0, ``--compare_steps`` env steps each, the same
network and loop for every rule but PPO, which keeps its own loop): the
discovered rules, actor-critic tuned per environment (learning rate x
entropy cost on seeds kept apart), PPO and Disco103, into
``<root>/compare`` (finished runs are not repeated; should a variant's best
rule change between two calls, ``compare`` stops and names the runs to
delete). ``--shards`` disco-compare processes share the runs.

``report`` writes ``validation.png`` (every run's validation score),
``validation.csv``, ``table.md`` (per run: the score at the start, at the
end and at its best; per variant: the rule taken to ``compare``) and copies
the comparison's ``report.md`` and figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_runs

VARIANTS = ("lpg", "lpg_es", "disco")
LPG_WORLDS = ("dense", "sparse", "long_horizon", "longer_horizon", "long_dense")
HELD_OUT = (
    "gymnax/CartPole-v1",
    "gymnax/Breakout-MinAtar",
    "xminigrid/MiniGrid-Empty-8x8",
)
# The environment suite's on-policy loop (benchmarks/suite_settings.py):
# validation and the comparison train every rule but PPO with it.
LOOP = dict(num_envs=8, rollout_len=16, batch_size=8)
TORSO = (64, 64)
TUNE_GRID = "learning_rate=(3e-4,1e-3),entropy_cost=(0.01,0.05)"


def population() -> str:
  groups = [dict(env=f"lpg/{w}", env_settings={}) for w in LPG_WORLDS]
  groups.append(dict(env="delayed_chain", env_settings={}))
  groups.append(dict(env="catch", env_settings=dict(rows=5, columns=5)))
  return repr(tuple(dict(g, num_agents=1) for g in groups))


def run_flags(variant: str, seed: int, args) -> list[str]:
  held_out = repr(tuple(dict(env=e) for e in HELD_OUT))
  every = max(1, total_steps(variant, args) // args.validations)
  common = [
      f"--config.population={population()}",
      f"--config.batch_size={args.envs}",
      f"--config.agent.network.dense={TORSO}",
      f"--config.agent.learning_rate={args.agent_lr}",
      "--config.key_scheme=per_agent",
      f"--config.seed={100 + seed}",
      f"--config.init_seed={200 + seed}",
      f"--config.checkpoint_every={every}",
      f"--config.validation.every={every}",
      f"--config.validation.envs={held_out}",
      f"--config.validation.num_seeds={args.validation_seeds}",
      f"--config.validation.total_env_steps={args.validation_steps}",
      *(f"--config.validation.{k}={v}" for k, v in LOOP.items()),
      "--config.validation.replay_capacity=0",
      "--config.validation.min_replay_size=0",
      "--config.resume=True",
  ]
  if variant.startswith("lpg"):
    flags = [
        "--config=configs/meta_train_lpg.py",
        f"--config.rule_kwargs.net.hidden_size={args.gru}",
        *common,
    ]
    if variant == "lpg_es":
      return flags + [
          "--config.estimator=es",
          "--config.lifetime_updates=(0,0)",
          f"--config.es.population_size={args.es_members}",
          f"--config.es.lifetime_iterations={args.es_iterations}",
          f"--config.es.sigma={args.es_sigma}",
          f"--config.meta_learning_rate={args.es_lr}",
          f"--config.num_meta_steps={args.es_steps}",
      ]
    return flags + [f"--config.num_meta_steps={args.steps}"]
  if variant == "disco":
    return [
        "--config.rule=disco",
        *common,
        "--config.agent.network.model_lstm_size=128",
        "--config.agent.network.model_head_hiddens=(128,)",
        "--config.agent.loss_mask=valid",
        "--config.lifetime_updates=(10,250)",
        f"--config.num_meta_steps={args.disco_steps}",
    ]
  raise ValueError(variant)


def total_steps(variant: str, args) -> int:
  return {
      "lpg": args.steps,
      "lpg_es": args.es_steps,
      "disco": args.disco_steps,
  }[variant]


def run(args) -> None:
  variants = args.variants.split(",")
  unknown = set(variants) - set(VARIANTS)
  if unknown:
    cli.usage_error(f"unknown variants {sorted(unknown)}; known: {VARIANTS}")
  meta_runs.run_each(
      Path(args.root),
      meta_runs.seed_major(variants, args.seeds),
      lambda v, out: meta_runs.finished_steps(out) >= total_steps(v, args),
      lambda v, seed, out: meta_runs.meta_train(run_flags(v, seed, args), out),
      only=args.only.split(",") if args.only else None,
  )


def compare(args) -> None:
  root = Path(args.root)
  variants = () if args.baselines_only else VARIANTS
  chosen = meta_runs.pick_rules(
      root, {f"discovered_{v}": [v] for v in variants}
  )
  if not chosen and not args.baselines_only:
    cli.usage_error(f"no validated run under {root}: run `run` first")
  rules = [str(path) for path in chosen.values()]
  overrides = [f"{path}:learning_rate={args.agent_lr}" for path in rules]
  rules += ["actor_critic", "ppo", "disco103"]
  loop = [f"--config.{k}={v}" for k, v in LOOP.items()]
  command = [
      sys.executable,
      "-m",
      "disco.launch.compare",
      f"--config.rules={tuple(rules)!r}",
      f"--config.envs={HELD_OUT!r}",
      f"--config.num_seeds={args.compare_seeds}",
      f"--config.total_env_steps={args.compare_steps}",
      *loop,
      "--config.replay_capacity=0",
      "--config.min_replay_size=0",
      "--config.last_episodes=200",
      f"--config.network.dense={TORSO}",
      "--config.tune.rules=('actor_critic',)",
      f"--config.tune.grid={TUNE_GRID}",
      f"--config.tune.num_seeds={args.tune_seeds}",
      f"--config.tune.total_env_steps={args.compare_steps // 2}",
      "--config.tune.keep_untuned=True",
      f"--config.output_dir={root / 'compare'}",
  ]
  # PPO keeps its registered loop (4 x 128, 4 epochs x 4 minibatches).
  overrides.append(
      "ppo:num_envs=4,rollout_len=128,batch_size=4,update_epochs=4,num_minibatches=4"
  )
  command.append(f"--config.rule_overrides={tuple(overrides)!r}")
  print(" ".join(command[2:]), flush=True)
  meta_runs.run_compare(command, args.shards)


def report(args) -> None:
  root = Path(args.root)
  meta_runs.write_validation_report(
      root,
      Path(args.out),
      {v: meta_runs.run_dirs(root, v) for v in VARIANTS},
      title="CartPole, Breakout-MinAtar, MiniGrid-Empty-8x8, held out",
      xlabel="meta-step (ES: generation)",
  )


def add_run_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--seeds", type=int, default=3)
  # Runs of this process only, e.g. "lpg-s2,disco-s2" (several processes
  # can then share the runs).
  p.add_argument("--only", default="")
  p.add_argument("--steps", type=int, default=300)
  p.add_argument("--disco_steps", type=int, default=80)
  p.add_argument("--es_steps", type=int, default=12)
  p.add_argument("--es_members", type=int, default=8)
  p.add_argument("--es_iterations", type=int, default=32)
  p.add_argument("--es_sigma", type=float, default=0.01)
  p.add_argument("--es_lr", type=float, default=1e-2)
  p.add_argument("--envs", type=int, default=32)
  p.add_argument("--gru", type=int, default=64)
  p.add_argument("--validations", type=int, default=4)
  p.add_argument("--validation_seeds", type=int, default=2)
  p.add_argument("--validation_steps", type=int, default=30_000)


def add_compare_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--compare_seeds", type=int, default=5)
  p.add_argument("--compare_steps", type=int, default=50_000)
  p.add_argument("--tune_seeds", type=int, default=2)
  p.add_argument("--baselines_only", action="store_true")
  # disco-compare processes sharing the runs (config.shard).
  p.add_argument("--shards", type=int, default=2)


def _shared_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--root", required=True)
  p.add_argument("--agent_lr", type=float, default=1e-3)


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, add_run_args),
          compare=cli.Command(compare, add_compare_args),
          report=cli.Command(
              report, lambda p: p.add_argument("--out", required=True)
          ),
      ),
      shared=_shared_flags,
      all_steps=("run", "compare", "report"),
      argv=argv,
  )


if __name__ == "__main__":
  main()
