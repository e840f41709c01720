r"""Fine-tuning Disco103 off Catch, judged on held-out environments (issue 48).

  python benchmarks/finetune.py all --root /work/runs/finetune \
      --out benchmarks/results/finetune

``all`` runs ``run``, ``compare`` and ``report`` in turn (each a command of
its own too, all with ``--root``); each skips what is finished, so the
command resumes after a kill.

``run`` continues meta-training from Disco103's published meta-parameters
(``--config.init_meta_params=disco103``), one run per meta-learning rate
(``--meta_lrs``) and seed in ``<root>/finetune_lr<rate>-s<seed>``
(``--seeds``, ``--steps`` meta-steps; Adam), on a
population without Catch: one agent on each of the five LPG grid worlds and
one on the delayed chain, ``--envs`` environments each, (64, 64) torsos with
an action model of 128 units, the agents' learning rate Disco103's own
(``--agent_lr``), lifetimes of 10-250 agent updates, and each agent's
updates learning from a replay (``--replay_capacity`` trajectories,
batches of ``--replay_batch``). ``--validations`` times in a run (and at 0)
the rule is validated on the held-out environments below (``--validation_seeds``
fresh agents each, ``--validation_steps`` env steps, Disco103's replay loop
with learner batches of 8 trajectories), into ``validation.csv`` and
``best_meta_params.npz``.

``compare`` takes the rule fine-tuning ends with: the final
meta-parameters of the run whose last validation scores highest
(``rules/finetuned.npz``; a run's best validated parameters may be those of
meta-step 0, Disco103's own), and runs ``disco-compare`` on the held-out
environments: it, Disco103 (both on the replay loop and Disco103's agent
settings), actor-critic tuned per environment (learning rate x entropy cost
on seeds kept apart; the environment suite's on-policy loop) and PPO (its
own loop), all with the same network, ``--compare_seeds`` seeds of
``--compare_steps`` env steps.

``report`` writes ``validation.png``, ``validation.csv`` and ``table.md`` and
copies the comparison's report and figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import discovery
from benchmarks import meta_runs
from benchmarks import suite_settings as suite

RULE = "finetuned"
POPULATION = (
    *(f"lpg/{w}" for w in discovery.LPG_WORLDS),
    "delayed_chain",
)
HELD_OUT = (
    dict(env="gymnax/CartPole-v1"),
    dict(env="gymnax/Breakout-MinAtar"),
    dict(env="catch", env_settings=dict(rows=8, columns=8)),
)
# Disco103's replay loop with learner batches of 8 trajectories (the
# environment suite's "replay_batch8": Disco103 learns Catch with it at about
# the on-policy loop's compute per learner step).
DISCO_LOOP = suite.LOOPS["replay_batch8"]
# PPO's registered loop (purejaxrl's: 4 x 128, 4 epochs x 4 minibatches).
PPO_LOOP = dict(
    num_envs=4,
    rollout_len=128,
    batch_size=4,
    replay_capacity=0,
    min_replay_size=0,
    update_epochs=4,
    num_minibatches=4,
)
NETWORK = dict(dense=(64, 64), model_lstm_size=128, model_head_hiddens=(128,))


def _loop_spec(loop: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in loop.items())


def run_name(meta_lr: float) -> str:
  return f"finetune_lr{meta_lr:g}"


def _meta_lrs(args) -> list[float]:
  return [float(x) for x in args.meta_lrs.split(",")]


def run_flags(meta_lr: float, seed: int, args) -> list[str]:
  population = tuple(dict(env=e, num_agents=1) for e in POPULATION)
  every = max(1, args.steps // args.validations)
  network = [f"--config.agent.network.{k}={v}" for k, v in NETWORK.items()]
  return [
      "--config.rule=disco",
      "--config.init_meta_params=disco103",
      f"--config.population={population!r}",
      f"--config.batch_size={args.envs}",
      *network,
      f"--config.agent.learning_rate={args.agent_lr}",
      "--config.agent.loss_mask=valid",
      "--config.lifetime_updates=(10,250)",
      f"--config.replay_capacity={args.replay_capacity}",
      f"--config.replay_batch_size={args.replay_batch}",
      "--config.key_scheme=per_agent",
      f"--config.meta_learning_rate={meta_lr}",
      f"--config.seed={100 + seed}",
      f"--config.num_meta_steps={args.steps}",
      f"--config.checkpoint_every={every}",
      f"--config.validation.every={every}",
      f"--config.validation.envs={HELD_OUT!r}",
      f"--config.validation.num_seeds={args.validation_seeds}",
      f"--config.validation.total_env_steps={args.validation_steps}",
      *(f"--config.validation.{k}={v}" for k, v in DISCO_LOOP.items()),
      "--config.resume=True",
  ]


def run(args) -> None:
  by_name = {run_name(lr): lr for lr in _meta_lrs(args)}
  meta_runs.run_each(
      Path(args.root),
      meta_runs.seed_major(list(by_name), args.seeds),
      lambda unused_name, out: meta_runs.finished_steps(out) >= args.steps,
      lambda name, seed, out: meta_runs.meta_train(
          run_flags(by_name[name], seed, args), out
      ),
  )


def compare(args) -> None:
  root = Path(args.root)
  rules = ("disco103", "actor_critic", "ppo")
  if not args.baselines_only:
    names = [run_name(lr) for lr in _meta_lrs(args)]
    chosen = meta_runs.pick_rules(
        root,
        {RULE: names},
        file="meta_params.npz",
        score=meta_runs.last_score,
    )
    if RULE not in chosen:
      cli.usage_error(f"no validated run under {root}: run `run` first")
    rules = (str(chosen[RULE]), *rules)
  envs = tuple(
      e["env"]
      if "env_settings" not in e
      else f"{e['env']}:"
      + ",".join(f"{k}={v}" for k, v in e["env_settings"].items())
      for e in HELD_OUT
  )
  overrides = (
      f"actor_critic:{_loop_spec(suite.ON_POLICY)}",
      "ppo:" + _loop_spec(PPO_LOOP),
  )
  command = [
      sys.executable,
      "-m",
      "disco.launch.compare",
      f"--config.rules={rules!r}",
      f"--config.envs={envs!r}",
      f"--config.num_seeds={args.compare_seeds}",
      f"--config.total_env_steps={args.compare_steps}",
      *(f"--config.{k}={v}" for k, v in DISCO_LOOP.items()),
      "--config.last_episodes=200",
      *(f"--config.network.{k}={v}" for k, v in NETWORK.items()),
      "--config.tune.rules=('actor_critic',)",
      "--config.tune.grid="
      + ",".join(f"{k}={v}" for k, v in suite.TUNE_GRID.items()),
      f"--config.tune.num_seeds={suite.TUNE_SEEDS}",
      f"--config.tune.total_env_steps={args.compare_steps // 2}",
      "--config.tune.keep_untuned=False",
      f"--config.rule_overrides={overrides!r}",
      f"--config.output_dir={root / 'compare'}",
  ]
  print(" ".join(command[2:]), flush=True)
  meta_runs.run_compare(command, args.shards)


def report(args) -> None:
  root = Path(args.root)
  meta_runs.write_validation_report(
      root,
      Path(args.out),
      {
          f"meta-learning rate {lr:g}": meta_runs.run_dirs(root, run_name(lr))
          for lr in _meta_lrs(args)
      },
      title="Fine-tuning Disco103: CartPole, Breakout-MinAtar, Catch 8x8",
      xlabel="meta-step (0: Disco103)",
  )


def add_run_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--seeds", type=int, default=1)
  p.add_argument("--steps", type=int, default=240)
  p.add_argument("--envs", type=int, default=32)
  p.add_argument("--agent_lr", type=float, default=1e-2)
  p.add_argument("--replay_capacity", type=int, default=64)
  p.add_argument("--replay_batch", type=int, default=8)
  p.add_argument("--validations", type=int, default=4)
  p.add_argument("--validation_seeds", type=int, default=2)
  p.add_argument("--validation_steps", type=int, default=20_000)


def _shared_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--root", required=True)
  p.add_argument("--meta_lrs", default="5e-4,3e-5")


def add_compare_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--compare_seeds", type=int, default=5)
  p.add_argument("--compare_steps", type=int, default=40_000)
  # The baselines alone (while the fine-tuning runs; their runs are kept).
  p.add_argument("--baselines_only", action="store_true")
  # disco-compare processes sharing the runs (config.shard).
  p.add_argument("--shards", type=int, default=2)


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
