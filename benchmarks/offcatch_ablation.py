"""Why Disco103 and actor-critic learn nothing off Catch (issue 30).

  python benchmarks/offcatch_ablation.py --out benchmarks/results/offcatch \\
      [--only NAME ...] [--seeds 2] [--budget_scale 1.0]
  python benchmarks/offcatch_ablation.py --out benchmarks/results/offcatch \\
      --curves NAME ... [--published_dir DIR] [--curves_png PATH] [--onset 2]

Each *variant* tests one hypothesis: a rule on an environment trained
through the ``disco-eval`` steps with some settings changed from a
baseline (the environment-suite loop: 8 environments x 16 steps per
iteration, each rollout learnt from once). Every run goes into
``--out/<variant>``; finished runs (a ``summary.json``) are not repeated, so
the script resumes where it stopped. ``--out/ablation.csv`` gets one row per
variant: the final mean return (last ``LAST_EPISODES`` episodes of each seed,
mean over seeds, 95% bootstrap interval), each seed's, the learner steps,
and the policy entropy at the end (mean over the last tenth of the
iterations; a uniform policy's is ``log A``: 2.197 on the LPG grid worlds,
1.099 on Catch); ``--table_only`` rewrites it (and prints it as markdown)
without training. ``MODIFIERS`` variants wrap the environment (the time
limit as a termination, scaled rewards). ``--curves`` draws each seed's
learning curve of finished variants, beside the seeds of the published
code's runs (``published_offcatch.py``'s ``--out`` folder), and trains
nothing.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
import re
import sys

import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import suite_settings as suite
from disco import evaluation
from disco import types
from disco.comparison import results as results_lib
from disco.environments import base as env_base
from disco.environments import registry
from disco.training import analysis
from disco.update_rules import registry as rule_registry

LAST_EPISODES = 100
# The loops and networks the environment suite uses (one place for them).
ON_POLICY = suite.ON_POLICY
REPLAY = suite.REPLAY
PPO_NET = suite.PPO_NET
SMALL_NET = suite.SMALL_NET
MINIGRID_NET = suite.MINIGRID_NET
DENSE = "lpg/dense"
CATCH = "catch"
EMPTY = "xminigrid/MiniGrid-Empty-8x8"


class Modified(env_base.Environment):
  """An environment with its time limit turned into a termination (the
  published agent's view: every LAST is terminal) and/or its rewards
  scaled."""

  def __init__(self, env, time_limit_terminates=False, reward_scale=1.0):
    self._env = env
    self.batch_size = env.batch_size
    self.is_jittable = env.is_jittable
    self._terminate = time_limit_terminates
    self._scale = reward_scale

  def _change(self, ts):
    discount = ts.discount
    if self._terminate:
      discount = jnp.where(ts.step_type == types.LAST, 0.0, discount)
    return ts.replace(reward=ts.reward * self._scale, discount=discount)

  def reset(self, rng):
    state, ts = self._env.reset(rng)
    return state, self._change(ts)

  def step(self, state, actions):
    state, ts = self._env.step(state, actions)
    return state, self._change(ts)

  def observation_spec(self):
    return self._env.observation_spec()

  def action_spec(self):
    return self._env.action_spec()


MODIFIERS = ("time_limit_terminates", "reward_scale")


def modified_env_name(env: str, changes: dict) -> str:
  """Registers (once) and returns the name of ``env`` with ``changes``."""
  name = (
      "offcatch/"
      + env
      + "".join(f"/{k}={v}" for k, v in sorted(changes.items()))
  )
  if name not in registry.env_names():
    entry = registry.get_entry(env)

    def make(batch_size, **settings):
      return Modified(entry.make(batch_size, **settings), **changes)

    registry.register_env(name, make, dict(entry.settings))
  return name


def variant(hypothesis, name, rule, env, steps, **overrides):
  return dict(
      hypothesis=hypothesis,
      name=name,
      rule=rule,
      env=env,
      steps=steps,
      overrides=overrides,
  )


# Episode ends as this package treats them (the time limit a truncation,
# the "valid" loss mask) and as the published agent does (every episode end
# a termination, the "published" mask), and each change alone.
EPISODE_ENDS = (
    ("", {}),
    (
        "_published_ends",
        dict(time_limit_terminates=True, loss_mask="published"),
    ),
    ("_published_mask", dict(loss_mask="published")),
    ("_time_limit_terminates", dict(time_limit_terminates=True)),
)
# (hypothesis, name, rule, env, env steps per seed, config overrides).
VARIANTS = (
    # Baselines: the environment suite's settings at a shorter budget.
    variant("baseline", "d103_dense", "disco103", DENSE, 100_000),
    variant("baseline", "ac_dense", "actor_critic", DENSE, 100_000),
    variant("baseline", "ppo_dense", "ppo", DENSE, 100_000, loop="ppo"),
    # Disco103 on Catch 8x8 (where it is known to learn with the notebook's
    # loop) with the environment suite's on-policy loop, and with the
    # notebook's replay loop.
    variant("loop", "d103_catch_on_policy", "disco103", CATCH, 100_000),
    variant(
        "loop", "d103_catch_replay", "disco103", CATCH, 60_000, loop="replay"
    ),
    variant(
        "loop",
        "d103_catch_replay_batch8",
        "disco103",
        CATCH,
        60_000,
        loop=dict(REPLAY, batch_size=8, min_replay_size=8),
    ),
    # Learner steps, not the replay? The on-policy loop with 2 learner
    # steps per rollout (2 passes): 1 per 64 env steps, as the replay's 1
    # per 58.
    variant(
        "loop",
        "d103_catch_on_policy_2_epochs",
        "disco103",
        CATCH,
        60_000,
        loop=dict(ON_POLICY, update_epochs=2),
    ),
    variant(
        "loop",
        "d103_dense_on_policy_4_epochs",
        "disco103",
        DENSE,
        50_000,
        loop=dict(ON_POLICY, update_epochs=4),
    ),
    # The same, from a replay of only the last 8 trajectories (4
    # iterations): nearly fresh data, the same learner steps per env step.
    variant(
        "loop",
        "d103_catch_replay8_batch8",
        "disco103",
        CATCH,
        60_000,
        loop=dict(REPLAY, batch_size=8, min_replay_size=8, replay_capacity=8),
    ),
    variant(
        "loop",
        "d103_dense_replay_batch8",
        "disco103",
        DENSE,
        100_000,
        loop=dict(REPLAY, batch_size=8, min_replay_size=8),
    ),
    # Budget and episode ends: Disco103 with the replay (batches of 8) for
    # 300k steps (5172 learner steps), beside the published code on the same
    # environment and loop (published_offcatch.py --batch_size 8
    # --env_steps 300000); with our episode ends, the published agent's, and
    # each of its two changes alone (EPISODE_ENDS). Seeds in blocks of two
    # ("_seeds23": seeds 2 and 3).
    *(
        variant(
            "episode ends",
            f"d103_dense_replay_batch8_300k{suffix}{block}",
            "disco103",
            DENSE,
            300_000,
            loop=dict(REPLAY, batch_size=8, min_replay_size=8),
            **changes,
            **({"seed": first} if first else {}),
        )
        for suffix, changes in EPISODE_ENDS
        for first, block in ((0, ""), (2, "_seeds23"), (4, "_seeds45"))
    ),
    # Learning rate (Disco103's registered 1e-2 is the Catch notebook's;
    # the published agent's default is 3e-4).
    variant(
        "learning rate",
        "d103_dense_lr3e-4",
        "disco103",
        DENSE,
        100_000,
        learning_rate=3e-4,
    ),
    variant(
        "learning rate",
        "d103_dense_lr1e-3",
        "disco103",
        DENSE,
        100_000,
        learning_rate=1e-3,
    ),
    # Entropy cost of actor-critic (published: 0.2, for Catch).
    variant(
        "entropy cost",
        "ac_dense_ent0.01",
        "actor_critic",
        DENSE,
        100_000,
        hyper_params=dict(entropy_cost=0.01),
    ),
    # Network swap.
    variant(
        "network",
        "ac_dense_ent0.01_ppo_net",
        "actor_critic",
        DENSE,
        100_000,
        hyper_params=dict(entropy_cost=0.01),
        network=dict(PPO_NET, separate_torsos=True),
    ),
    variant(
        "network",
        "ppo_dense_small_net",
        "ppo",
        DENSE,
        100_000,
        loop="ppo",
        network=SMALL_NET,
    ),
    variant(
        "network",
        "d103_dense_ppo_net",
        "disco103",
        DENSE,
        100_000,
        network=PPO_NET,
    ),
    # Loop swap: PPO's loop (4 epochs x 4 minibatches of 4 x 128 rollouts:
    # 4x the learner steps per env step) for the other rules.
    variant(
        "loop",
        "ac_dense_ent0.01_ppo_loop",
        "actor_critic",
        DENSE,
        100_000,
        hyper_params=dict(entropy_cost=0.01),
        loop=rule_registry.PPO_LOOP,
    ),
    variant(
        "loop",
        "d103_dense_ppo_loop",
        "disco103",
        DENSE,
        100_000,
        loop=rule_registry.PPO_LOOP,
    ),
    # Optimiser: PPO's gradient clipping and Adam epsilon.
    variant(
        "optimiser",
        "ac_dense_ent0.01_ppo_opt",
        "actor_critic",
        DENSE,
        100_000,
        hyper_params=dict(entropy_cost=0.01),
        max_abs_update=0.0,
        max_grad_norm=0.5,
        adam_eps=1e-5,
    ),
    # Truncation: the time limit as a termination (the published agent's
    # view of every episode end).
    variant(
        "truncation",
        "d103_dense_time_limit_terminates",
        "disco103",
        DENSE,
        100_000,
        time_limit_terminates=True,
    ),
    # Loss mask.
    variant(
        "loss mask",
        "d103_dense_published_mask",
        "disco103",
        DENSE,
        100_000,
        loss_mask="published",
    ),
    # Reward scale: rewards x10.
    variant(
        "reward scale",
        "d103_dense_reward_x10",
        "disco103",
        DENSE,
        100_000,
        reward_scale=10.0,
    ),
    # Observations: random features instead of a one-hot of 1936 states.
    variant(
        "observation",
        "d103_dense_features",
        "disco103",
        DENSE,
        100_000,
        env_settings=dict(observation="random_features"),
    ),
    # MiniGrid Empty-8x8 with what the LPG grid world taught.
    variant("baseline", "d103_empty", "disco103", EMPTY, 100_000),
    variant("baseline", "ac_empty", "actor_critic", EMPTY, 100_000),
    variant(
        "entropy cost",
        "ac_empty_ent0.01",
        "actor_critic",
        EMPTY,
        100_000,
        hyper_params=dict(entropy_cost=0.01),
    ),
    variant(
        "loop",
        "d103_empty_replay_batch8",
        "disco103",
        EMPTY,
        100_000,
        loop=dict(REPLAY, batch_size=8, min_replay_size=8),
    ),
    # Loop: the published notebook's replay (15x the compute per step).
    variant(
        "loop",
        "d103_dense_replay",
        "disco103",
        DENSE,
        100_000,
        loop="replay",
    ),
)
VARIANT_NAMES = tuple(v["name"] for v in VARIANTS)
FIELDS = (
    "hypothesis",
    "variant",
    "rule",
    "env",
    "env_steps",
    "learner_steps",
    "seeds",
    "final_return",
    "ci_low",
    "ci_high",
    "per_seed",
    "final_entropy",
    "settings",
)


def _config(v: dict, seeds: int, budget_scale: float, folder: Path):
  overrides = dict(v["overrides"])
  loop = overrides.pop("loop", "on_policy")
  config = evaluation.default_config()
  config.update(
      dict(
          rule=v["rule"],
          env=v["env"],
          total_env_steps=int(v["steps"] * budget_scale),
          num_seeds=seeds,
          last_episodes=LAST_EPISODES,
          iterations_per_call=100,
          output_dir=str(folder),
          overwrite=True,
      )
  )
  if loop == "on_policy":
    config.update(ON_POLICY)
  elif loop == "replay":
    config.update(REPLAY)
  elif loop != "ppo":  # ppo: the rule's registered loop
    config.update(loop)
  env_settings = overrides.pop("env_settings", {})
  changes = {k: overrides.pop(k) for k in MODIFIERS if k in overrides}
  if changes:
    config.env = modified_env_name(v["env"], changes)
  config.env_settings = {
      **registry.get_entry(v["env"]).settings,
      **env_settings,
  }
  network = dict(overrides.pop("network", {}))
  if v["env"].startswith("xminigrid/"):
    network = {**MINIGRID_NET, **network}
  for key, value in network.items():
    config.network[key] = value
  with config.unlocked():
    config.hyper_params = overrides.pop("hyper_params", {})
  config.update(overrides)
  return config


def run(v: dict, seeds: int, budget_scale: float, out: Path) -> Path:
  """Trains the variant (unless done) and returns its folder."""
  folder = out / v["name"]
  if (folder / results_lib.SUMMARY).is_file():
    return folder
  return suite.run(_config(v, seeds, budget_scale, folder), folder)


def final_entropy(metrics: dict[str, np.ndarray]) -> float:
  entropy = metrics.get("learner/entropy")
  if entropy is None:
    return math.nan
  tail = entropy[:, -max(1, entropy.shape[1] // 10) :]
  return float(np.nanmean(tail))


def row(v: dict, folder: Path) -> dict:
  r = results_lib.load_run(folder)
  scores = r.final_scores()
  ci = analysis.bootstrap_ci(scores)
  return dict(
      hypothesis=v["hypothesis"],
      variant=v["name"],
      rule=v["rule"],
      env=v["env"],
      env_steps=int(np.asarray(r.metrics["env_steps"])[0, -1]),
      learner_steps=int(np.asarray(r.metrics["learner_steps"])[0, -1]),
      seeds=len(scores),
      final_return=f"{scores.mean():.3f}",
      ci_low="" if ci is None else f"{ci[0]:.3f}",
      ci_high="" if ci is None else f"{ci[1]:.3f}",
      per_seed=" ".join(f"{x:.3f}" for x in scores),
      final_entropy=f"{final_entropy(r.metrics):.3f}",
      settings=repr(v["overrides"]),
  )


def table_rows(out: Path) -> list[dict]:
  """Every finished variant's row, not only this call's: from its run
  folder, else the row ``ablation.csv`` already holds (the CSV is
  committed, the run folders are not), so that no earlier result is lost."""
  kept = {}
  if (out / "ablation.csv").is_file():
    with open(out / "ablation.csv", newline="") as f:
      kept = {r["variant"]: r for r in csv.DictReader(f)}
  rows = []
  for v in VARIANTS:
    if (out / v["name"] / results_lib.SUMMARY).is_file():
      rows.append(row(v, out / v["name"]))
    elif v["name"] in kept:
      rows.append(kept[v["name"]])
  return rows + [r for name, r in kept.items() if name not in VARIANT_NAMES]


def published_metrics(path: Path) -> dict[str, np.ndarray]:
  """The per-iteration ``episodes``, ``return_sum`` and ``env_steps``
  (``[1, N]``, as ``analysis`` reads a run's metrics) of a
  ``published_offcatch.py`` seed file, from its episodes' returns and the
  environment step at which each ended."""
  seed = json.loads(path.read_text())
  ends = np.asarray(seed["episode_end_steps"], np.int64)
  returns = np.asarray(seed["episode_returns"], np.float64)
  steps = np.unique(ends)
  index = np.searchsorted(steps, ends)
  return dict(
      episodes=np.bincount(index, minlength=steps.size)[None],
      return_sum=np.bincount(index, returns, minlength=steps.size)[None],
      env_steps=steps[None],
  )


def plot_curves(
    out: Path,
    names: list[str],
    published: Path | None,
    path: Path,
    onset: float,
) -> None:
  """Draws each seed's learning curve (mean return of its last 100 episodes
  against environment steps) of the variants ``names`` and of the published
  code's seeds (``published/seed<k>.json``) into ``path``, and prints a
  markdown row per setting (seed blocks such as ``_seeds23`` merged into
  their setting): each seed's final value, how many ended at or above
  ``onset`` and when each first reached it (over a full window of
  episodes), and the mean with its 95% bootstrap interval."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  # setting -> [(seed, metrics [1, N] of that seed)], in drawing order.
  settings: dict[str, list] = {}
  for name in names:
    finished = results_lib.load_run(out / name)
    for i, seed in enumerate(finished.seeds):
      metrics = {
          k: np.asarray(v)[i : i + 1] for k, v in finished.metrics.items()
      }
      key = re.sub(r"_seeds\d+$", "", name)
      settings.setdefault(key, []).append((seed, metrics))
  seed_files = sorted(published.glob("seed*.json")) if published else []
  for seed_file in [f for f in seed_files if ".partial" not in f.name]:
    seed = int(seed_file.stem.removeprefix("seed"))
    settings.setdefault("published code", []).append(
        (seed, published_metrics(seed_file))
    )
  fig, ax = plt.subplots(figsize=(8, 4.5))
  print(
      f"| setting | seeds | final per seed | ended >= {onset:g} | first "
      f"reached {onset:g} (env steps) | mean (95% CI) |\n|---|---|---|---|---|---|"
  )
  for i, (key, seeds) in enumerate(settings.items()):
    finals, reached_at = [], []
    for j, (_, metrics) in enumerate(seeds):
      curve = analysis.return_curve(metrics, LAST_EPISODES)[0]
      steps = np.asarray(metrics["env_steps"])[0]
      # Only full windows of LAST_EPISODES episodes count.
      full = np.cumsum(np.asarray(metrics["episodes"])[0]) >= LAST_EPISODES
      reached = np.flatnonzero((curve >= onset) & full)
      finals.append(curve[-1])
      reached_at.append(
          f"{steps[reached[0]] / 1e3:.0f}k" if reached.size else "-"
      )
      ax.plot(
          steps / 1e3,
          curve,
          color=f"C{i % 10}",
          lw=1,
          label=key if j == 0 else None,
      )
    finals = np.asarray(finals)
    ci = analysis.bootstrap_ci(finals)
    interval = "" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    print(
        f"| `{key}` | {' '.join(str(s) for s, _ in seeds)} | "
        f"{' '.join(f'{x:.2f}' for x in finals)} | "
        f"{int((finals >= onset).sum())} of {finals.size} | "
        f"{' '.join(reached_at)} | {finals.mean():.2f}{interval} |"
    )
  ax.set_xlabel("environment steps (thousands)")
  ax.set_ylabel(f"mean return, last {LAST_EPISODES} episodes")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--out", default="benchmarks/results/offcatch")
  parser.add_argument("--only", nargs="+", choices=VARIANT_NAMES)
  parser.add_argument("--seeds", type=int, default=2)
  parser.add_argument("--budget_scale", type=float, default=1.0)
  parser.add_argument(
      "--table_only",
      action="store_true",
      help="only write ablation.csv from the finished variants",
  )
  parser.add_argument(
      "--curves",
      nargs="+",
      default=[],
      choices=VARIANT_NAMES,
      metavar="VARIANT",
      help="finished variants whose seeds' curves go into --curves_png",
  )
  parser.add_argument(
      "--published_dir",
      default=None,
      help="a published_offcatch.py --out folder to draw beside them",
  )
  parser.add_argument("--curves_png", default=None)
  parser.add_argument(
      "--onset",
      type=float,
      default=2.0,
      help="with --curves: print when each seed's curve first reached this",
  )
  args = parser.parse_args(argv)
  out = Path(args.out)
  if args.curves:
    plot_curves(
        out,
        args.curves,
        Path(args.published_dir) if args.published_dir else None,
        Path(args.curves_png or out / "curves.png"),
        args.onset,
    )
    return
  out.mkdir(parents=True, exist_ok=True)
  chosen = [v for v in VARIANTS if not args.only or v["name"] in args.only]
  if args.table_only:
    chosen = []
  for v in chosen:
    folder = run(v, args.seeds, args.budget_scale, out)
    print(" | ".join(str(x) for x in row(v, folder).values()), flush=True)
  rows = table_rows(out)
  cli.write_csv(out / "ablation.csv", rows, FIELDS)
  print(
      "\n"
      + cli.table_header(
          (
              "hypothesis",
              "variant",
              "env",
              "env steps",
              "learner steps",
              "final return (95% CI)",
              "per seed",
              "entropy",
          )
      )
  )
  for r in rows:
    print(
        f"| {r['hypothesis']} | `{r['variant']}` | {r['env']} | "
        f"{r['env_steps']} | {r['learner_steps']} | {r['final_return']} "
        f"[{r['ci_low']}, {r['ci_high']}] | {r['per_seed']} | "
        f"{r['final_entropy']} |"
    )


if __name__ == "__main__":
  main()
