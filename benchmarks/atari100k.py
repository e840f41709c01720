r"""Atari-100k: Disco103, PPO and actor-critic on Atari games at 100k agent
steps (400k frames), with published Atari-100k rows beside them.

  python -m benchmarks.atari100k run --out benchmarks/results/atari100k
  python -m benchmarks.atari100k report --out benchmarks/results/atari100k
  python -m benchmarks.atari100k throughput --out benchmarks/results/atari100k
  python -m benchmarks.atari100k conv --out benchmarks/results/atari100k

``run`` trains one seed of one rule on one game at a time (``disco-eval``'s
Python API, each rule with its ``atari`` preset: the Nature-DQN torso,
rewards clipped to [-1, 1] for the learner), seed-major so that a partial
run covers every game and rule evenly. Each finished run appends a row to
``runs.csv`` (the final score is the mean game score of the last
``--last_episodes`` episodes); started again, ``run`` skips the rows there,
so the CSV is all a run needs to resume (the run folders under ``runs/``
are scratch).

``report`` writes ``scores.csv`` (per game and rule: mean score over seeds,
its seeds, human-normalised), ``table.md`` (with the published rows of
``PUBLISHED``) and ``atari100k.png``, and the human-normalised IQM of each
rule with a 95% stratified-bootstrap interval over the games and seeds run.

``throughput`` measures env steps per second of ``envpool`` stepping its
pool with random actions, the same pool through ``disco``'s adapter with
random actions, and the host loop with the agent acting (Disco103's actor
step, which also moves each timestep to the device; no learning),
interleaved, ``--rounds`` times each.

``conv`` times the Nature torso's weight gradient computed by
``hk.Conv2D`` and by ``PatchConv2D``, outside a loop and inside a
``lax.scan``.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
import sys
import time

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

from benchmarks import cli

GAMES = ("Breakout", "Pong", "Boxing", "Freeway", "MsPacman", "Seaquest")
RULES = ("disco103", "ppo", "actor_critic")
STEPS = 100_000
RUN_FIELDS = (
    "rule",
    "game",
    "seed",
    "score",
    "episodes",
    "env_steps",
    "wall_s",
    "env_steps_per_s",
    "backend",
)
# Published Atari-100k scores (mean over their runs), from Cetin et al. 2022
# (A-LIX, ICML), Table 5, which collects them from the papers named.
PUBLISHED_SOURCE = "Cetin et al. 2022 (A-LIX, ICML), Table 5"
PUBLISHED = {
    "SimPLe (Kaiser et al. 2020)": dict(
        Breakout=16.4,
        Pong=12.8,
        Boxing=9.1,
        Freeway=20.3,
        MsPacman=1480.0,
        Seaquest=683.3,
    ),
    "DER (van Hasselt et al. 2019)": dict(
        Breakout=1.9,
        Pong=-19.3,
        Boxing=0.2,
        Freeway=27.9,
        MsPacman=1204.1,
        Seaquest=354.1,
    ),
    "DrQ (Kostrikov et al. 2021)": dict(
        Breakout=16.1,
        Pong=-8.5,
        Boxing=6.0,
        Freeway=9.8,
        MsPacman=960.5,
        Seaquest=301.2,
    ),
    "SPR (Schwarzer et al. 2021)": dict(
        Breakout=17.1,
        Pong=-5.9,
        Boxing=35.8,
        Freeway=24.4,
        MsPacman=1313.2,
        Seaquest=583.1,
    ),
}


def _run_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--games", nargs="+", default=list(GAMES))
  p.add_argument("--rules", nargs="+", default=list(RULES))
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--steps", type=int, default=STEPS)
  p.add_argument("--last_episodes", type=int, default=10)


def _shared(p: argparse.ArgumentParser) -> None:
  p.add_argument("--out", type=Path, required=True)


def _done(path: Path) -> set[tuple[str, str, int]]:
  if not path.exists():
    return set()
  with open(path, newline="") as f:
    return {(r["rule"], r["game"], int(r["seed"])) for r in csv.DictReader(f)}


def run(args: argparse.Namespace) -> None:
  from disco import evaluation  # pylint: disable=g-import-not-at-top
  from disco.environments import atari  # pylint: disable=g-import-not-at-top

  unknown = sorted(set(args.games) - set(atari.GAMES))
  if unknown:
    cli.usage_error(f"unknown games {unknown}: use names of {atari.GAMES}")
  args.out.mkdir(parents=True, exist_ok=True)
  runs_csv = args.out / "runs.csv"
  done = _done(runs_csv)
  backend = atari.available_backends()[0]
  for seed in range(args.seeds):
    for game in args.games:
      for rule in args.rules:
        if (rule, game, seed) in done:
          continue
        folder = args.out / "runs" / rule / game / f"seed{seed}"
        print(f"--- {rule} on {game}, seed {seed}", flush=True)
        start = time.perf_counter()
        summary = evaluation.evaluate(
            evaluation.make_config(
                rule=rule,
                env=f"atari/{game}",
                num_seeds=1,
                seed=seed,
                total_env_steps=args.steps,
                last_episodes=args.last_episodes,
                output_dir=str(folder),
                overwrite=True,
            )
        )
        wall = time.perf_counter() - start
        row = dict(
            rule=rule,
            game=game,
            seed=seed,
            score=summary["final_return_mean"],
            episodes=int(np.sum(summary["episodes"])),
            env_steps=summary["env_steps"],
            wall_s=round(wall, 1),
            env_steps_per_s=round(summary["env_steps"] / wall, 1),
            backend=backend,
        )
        new = not runs_csv.exists()
        with open(runs_csv, "a", newline="") as f:
          writer = csv.DictWriter(f, fieldnames=RUN_FIELDS)
          if new:
            writer.writeheader()
          writer.writerow(row)
        print(json.dumps(row), flush=True)


def _read_runs(path: Path) -> list[dict]:
  if not path.exists():
    cli.usage_error(f"{path} does not exist: run 'run' first")
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def report(args: argparse.Namespace) -> None:
  from disco.environments import reference_scores  # pylint: disable=g-import-not-at-top
  from disco.scoring import aggregates  # pylint: disable=g-import-not-at-top

  rows = _read_runs(args.out / "runs.csv")
  rules = list(dict.fromkeys(r["rule"] for r in rows))
  games = [g for g in GAMES if any(r["game"] == g for r in rows)]
  games += sorted({r["game"] for r in rows} - set(games))

  def normalized(game: str, score: float) -> float:
    low, span = reference_scores.anchors(f"atari/{game}")
    return (score - low) / span

  per = {}  # scores in seed order
  for rule in rules:
    for game in games:
      runs = sorted(
          (int(r["seed"]), float(r["score"]))
          for r in rows
          if r["rule"] == rule and r["game"] == game and r["score"]
      )  # a run that ended no episode has no score
      per[rule, game] = [score for _, score in runs]
  score_rows = []
  for game in games:
    for rule in rules:
      scores = per[rule, game]
      if not scores:
        continue
      score_rows.append(
          dict(
              game=game,
              rule=rule,
              seeds=len(scores),
              mean_score=round(float(np.mean(scores)), 2),
              per_seed=" ".join(f"{s:.1f}" for s in scores),
              human_normalized=round(normalized(game, np.mean(scores)), 4),
          )
      )
  if not score_rows:
    cli.usage_error("no finished run has a score yet (none ended an episode)")
  cli.write_csv(args.out / "scores.csv", score_rows)

  # Aggregates over the games every rule ran, each rule's first seeds there
  # (as many as the fewest any rule has on any of them).
  complete = [g for g in games if all(per[r, g] for r in rules)]
  seeds = min((len(per[r, g]) for r in rules for g in complete), default=0)
  aggregate_text = (
      f"No aggregate yet: the games every rule ran have {seeds} seed(s) each "
      "(intervals need 2).\n\n"
  )
  if complete and seeds >= 2:
    matrix = {
        rule: np.array(
            [
                [normalized(g, per[rule, g][s]) for g in complete]
                for s in range(seeds)
            ]
        )
        for rule in rules
    }
    results = aggregates.aggregate_metrics(matrix, reps=2000, seed=0)
    lines = [
        f"Human-normalised scores over {len(complete)} games x {seeds} seeds "
        "(95% stratified-bootstrap intervals):",
        "",
        cli.table_header(["rule", "IQM", "median", "mean"]),
    ]
    for rule, res in results.items():
      lines.append(
          cli.table_row([rule, str(res.iqm), str(res.median), str(res.mean)])
      )
    if "disco103" in rules and len(rules) > 1:
      pairs = [("disco103", r) for r in rules if r != "disco103"]
      improvement = aggregates.probability_of_improvement(
          matrix, pairs=pairs, reps=2000, seed=0
      )
      lines += [
          "",
          "P(a Disco103 run scores above one of the other rule's), averaged "
          "over the games: "
          + "; ".join(
              f"against {y} {p.probability}"
              for (_, y), p in improvement.items()
          )
          + ".",
      ]
    aggregate_text = "\n".join(lines) + "\n\n"

  published = list(PUBLISHED)
  header = ["game", "random", "human"] + rules + published
  lines = [cli.table_header(header)]
  for game in games:
    low, span = reference_scores.anchors(f"atari/{game}")
    cells = [game, f"{low:g}", f"{low + span:g}"]
    for rule in rules:
      scores = per[rule, game]
      cells.append(f"{np.mean(scores):.1f} ({len(scores)})" if scores else "-")
    cells += [f"{PUBLISHED[p].get(game, float('nan')):g}" for p in published]
    lines.append(cli.table_row(cells))
  wall = {
      rule: np.mean(
          [float(r["env_steps_per_s"]) for r in rows if r["rule"] == rule]
      )
      for rule in rules
  }
  text = (
      aggregate_text
      + "Mean game score over seeds (seeds in brackets); published rows from "
      + PUBLISHED_SOURCE
      + ":\n\n"
      + "\n".join(lines)
      + "\n\nTraining env steps per second on this machine (whole runs, "
      + "compilation included): "
      + ", ".join(f"{r} {w:.0f}" for r, w in wall.items())
      + "\n"
  )
  cli.write_table(args.out, text)
  _plot(args.out / "atari100k.png", games, rules, per, normalized)


def _plot(path, games, rules, per, normalized) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(8, 3.6))
  width = 0.8 / (len(rules) + len(PUBLISHED))
  x = np.arange(len(games))
  bars = [(r, [per[r, g] for g in games]) for r in rules]
  bars += [
      (p, [[PUBLISHED[p][g]] if g in PUBLISHED[p] else [] for g in games])
      for p in PUBLISHED
  ]
  for i, (name, values) in enumerate(bars):
    heights = [
        normalized(g, np.mean(v)) if v else np.nan
        for g, v in zip(games, values, strict=True)
    ]
    hatch = None if name in rules else "//"
    ax.bar(x + i * width, heights, width, label=name, hatch=hatch)
  ax.axhline(0, color="black", linewidth=0.8)
  ax.set_xticks(x + width * (len(bars) - 1) / 2, games)
  ax.set_ylabel("human-normalised score")
  ax.set_title("Atari-100k (100k agent steps)")
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _throughput_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--game", default="Breakout")
  p.add_argument("--num_envs", type=int, default=8)
  p.add_argument("--steps", type=int, default=1000)
  p.add_argument("--rounds", type=int, default=3)


def throughput(args: argparse.Namespace) -> None:
  import jax  # pylint: disable=g-import-not-at-top

  from disco import evaluation  # pylint: disable=g-import-not-at-top
  from disco.environments import atari  # pylint: disable=g-import-not-at-top
  from disco.environments import registry  # pylint: disable=g-import-not-at-top

  if "envpool" not in atari.available_backends():
    cli.usage_error("throughput compares against envpool: pip install envpool")
  b = args.num_envs
  raw = atari.envpool_pool(args.game, b)  # the reference: envpool bare
  env = registry.make_env(f"atari/{args.game}", b, backend="envpool")
  plan = evaluation.build(
      evaluation.make_config(
          rule="disco103",
          env=f"atari/{args.game}",
          num_envs=b,
          total_env_steps=b * 29,
          output_dir=str(args.out / "throughput_run"),
          overwrite=True,
      ),
      log=lambda _: None,
  )
  loop = plan.loop
  rng = np.random.default_rng(0)

  # Each arm's games start once, before the rounds: a round times stepping
  # only (starting a pool of games is a cost per lifetime, not per step).
  raw.reset()
  handle, _ = env.reset(jax.random.PRNGKey(0))

  def envpool_random():
    for _ in range(args.steps):
      raw.step(rng.integers(0, 18, b).astype(np.int32))

  def adapter_random():
    for _ in range(args.steps):
      env.step(handle, rng.integers(0, 18, b))

  state = jax.tree.map(lambda x: x[0], loop.init_seeds([0]))
  rollouts = max(1, args.steps // loop.config.rollout_len)

  def adapter_acting():
    nonlocal state
    for _ in range(rollouts):
      actor, rollout = loop._host_unroll(state, jax.random.PRNGKey(1))  # pylint: disable=protected-access
      jax.block_until_ready(rollout)
      state = state.replace(actor=actor)

  arms = dict(
      envpool_random=(envpool_random, args.steps),
      adapter_random=(adapter_random, args.steps),
      adapter_acting=(adapter_acting, rollouts * loop.config.rollout_len),
  )
  adapter_acting()  # compiles the actor step
  rates = {k: [] for k in arms}
  for i in range(args.rounds):  # the order reversed every other round
    order = list(arms.items())
    for name, (fn, steps) in order[:: 1 if i % 2 == 0 else -1]:
      start = time.perf_counter()
      fn()
      rates[name].append(steps * b / (time.perf_counter() - start))
  rows = [
      dict(
          arm=name,
          env_steps_per_s=round(float(np.median(r)), 1),
          rounds=" ".join(f"{x:.0f}" for x in r),
          ratio_to_envpool=round(
              float(np.median(r)) / float(np.median(rates["envpool_random"])), 3
          ),
      )
      for name, r in rates.items()
  ]
  args.out.mkdir(parents=True, exist_ok=True)
  cli.write_csv(args.out / "throughput.csv", rows)
  lines = [cli.table_header(list(rows[0]))] + [
      cli.table_row(list(r.values())) for r in rows
  ]
  cli.write_table(
      args.out,
      f"{args.game}, {b} environments, {args.steps} steps per round, "
      f"medians of {args.rounds} interleaved rounds:\n\n"
      + "\n".join(lines)
      + "\n",
      "throughput.md",
  )


def _conv_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--frames", type=int, default=129)
  p.add_argument("--steps", type=int, default=4)
  p.add_argument("--rounds", type=int, default=3)


def conv(args: argparse.Namespace) -> None:
  """The Nature torso's weight gradient, ``hk.Conv2D`` against
  ``PatchConv2D``, once outside a loop and ``--steps`` times in a
  ``lax.scan`` (as sample reuse runs it), interleaved."""
  import haiku as hk  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top

  from disco.networks import encoders  # pylint: disable=g-import-not-at-top

  frames = np.random.default_rng(0).integers(
      0, 255, (args.steps, args.frames, 84, 84, 4), dtype=np.uint8
  )

  def haiku_conv(x):
    h = x.astype(np.float32) / 255.0
    for i, (c, k, s) in enumerate(encoders.NATURE_CNN_LAYERS):
      h = jax.nn.relu(
          hk.Conv2D(c, k, s, padding="VALID", name=f"nature_conv_{i}")(h)
      )
    return h.sum()

  def patch_conv(x):
    return encoders.nature_encoder(x).sum()

  programs = {}
  for name, f in (("hk.Conv2D", haiku_conv), ("PatchConv2D", patch_conv)):
    net = hk.without_apply_rng(hk.transform(f))
    params = net.init(jax.random.PRNGKey(0), frames[0])
    grad = jax.grad(net.apply)

    def scanned(p, xs, grad=grad):
      step = lambda p, x: (
          jax.tree.map(lambda a, g: a - 1e-3 * g, p, grad(p, x)),
          None,
      )
      return jax.lax.scan(step, p, xs)[0]

    programs[f"{name}, one step"] = (jax.jit(grad), params, frames[0], 1)
    programs[f"{name}, {args.steps} steps in a scan"] = (
        jax.jit(scanned),
        params,
        frames,
        args.steps,
    )
  times = {k: [] for k in programs}
  for fn, params, x, _ in programs.values():
    jax.block_until_ready(fn(params, x))  # compile
  for _ in range(args.rounds):
    for name, (fn, params, x, steps) in programs.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(params, x))
      times[name].append((time.perf_counter() - start) / steps)
  rows = [
      dict(what=k, seconds_per_step=round(float(np.median(v)), 3))
      for k, v in times.items()
  ]
  args.out.mkdir(parents=True, exist_ok=True)
  cli.write_csv(args.out / "conv_gradient.csv", rows)
  lines = [cli.table_header(list(rows[0]))] + [
      cli.table_row(list(r.values())) for r in rows
  ]
  cli.write_table(
      args.out,
      f"Weight gradient of the Nature torso on {args.frames} frames, medians "
      f"of {args.rounds} interleaved rounds:\n\n" + "\n".join(lines) + "\n",
      "conv_gradient.md",
  )


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, _run_flags, "train the runs not in runs.csv"),
          report=cli.Command(report, help="tables and figure from runs.csv"),
          throughput=cli.Command(
              throughput, _throughput_flags, "host loop against envpool"
          ),
          conv=cli.Command(
              conv, _conv_flags, "convolution weight gradients in loops"
          ),
      ),
      shared=_shared,
      argv=argv,
  )


if __name__ == "__main__":
  main()
