"""Disco103 and actor-critic on the environment suites, with references.

  python benchmarks/env_suite.py --out /tmp/env_suite [--envs NAME ...]
  python benchmarks/env_suite.py --out /tmp/env_suite2 \
      --loop disco103=replay_batch8 \
      --hyper_params actor_critic.entropy_cost=0.01
  python benchmarks/env_suite.py --out /tmp/env_suite3 --tuned \
      --rules actor_critic --envs xminigrid/MiniGrid-Empty-8x8

For every environment of ``suite_settings.SUITE`` (its budget of environment
steps per seed, and for image-like observations a convolutional torso), each
rule of ``--rules`` trains ``--seeds`` seeds through the ``disco-eval`` steps
on an on-policy loop (8 environments x 16 steps per iteration, every rollout
learnt from once; the published Disco103 notebook's replay loop costs about
15x more compute per environment step, too much for a 2-core machine at
these budgets; ``--loop RULE=LOOP`` gives a rule another loop of
``suite_settings.LOOPS``, and ``--hyper_params RULE.KEY=VALUE`` changes a
rule's hyper-parameter: see issue 30's section of BENCHMARKS.md for why
Disco103 needs a replay and actor-critic a smaller entropy cost off Catch).
Each run goes into ``--out/<rule>/<env>``; finished runs are not repeated.
With ``--tuned`` the hand-designed rules of ``--rules``
(``suite_settings.TUNE_RULES``) are also tuned per environment: every point
of ``suite_settings.TUNE_GRID`` (learning rate x entropy cost) trains
``TUNE_SEEDS`` seeds from ``TUNE_SEED`` (apart from the reported seeds 0,
1, ...) for ``--tune_budget_scale`` of the budget into
``--out/tuning/<rule>/<env>/<point>``; the best point (mean final return)
trains the reported seeds into ``--out/<rule>-tuned/<env>``, a row beside
the published-setting one, and ``--out/tuning.csv`` gets every point's
score. The script prints a markdown table: per environment and rule,
the final mean return (last 200 episodes, mean over seeds) with its 95%
bootstrap interval, next to a uniform random policy's return (measured here
over ``--random_steps`` steps per stream) and, where one is published, a
reference return with its algorithm, budget and source
(``disco.environments.reference_scores``); and writes ``curves_<env>.png``
(mean over seeds with a 95% band) into ``--out``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from pathlib import Path
import sys

import jax
import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import suite_settings as suite
from disco.comparison import results as results_lib
from disco.environments import reference_scores
from disco.environments import registry
from disco.training import analysis

LAST_EPISODES = 200


def random_return(
    env_name: str, settings: dict, steps: int, batch: int = 64
) -> float:
  """Mean episode return of uniform random actions over ``steps`` steps of
  ``batch`` streams (episodes finished in that time)."""
  env = registry.make_env(env_name, batch, **settings)

  def step(carry, rng):
    state, ret, total, count = carry
    actions = jax.random.randint(rng, (batch,), 0, env.num_actions)
    state, ts = env.step(state, actions)
    ret = ret + ts.reward
    last = ts.step_type == 2
    return (
        state,
        jnp.where(last, 0.0, ret),
        total + jnp.sum(jnp.where(last, ret, 0.0)),
        count + jnp.sum(last),
    ), None

  state, _ = env.reset(jax.random.PRNGKey(0))
  zeros = jnp.zeros([batch])
  (_, _, total, count), _ = jax.jit(
      lambda s: jax.lax.scan(
          step,
          (s, zeros, 0.0, 0),
          jax.random.split(jax.random.PRNGKey(1), steps),
      )
  )(state)
  return float(total / jnp.maximum(count, 1))


def run(
    rule: str,
    env: str,
    settings: dict,
    budget: int,
    conv: tuple,
    seeds: int,
    out: Path,
    folder: Path | None = None,
    **options,
) -> Path:
  """Trains (unless done) and returns the run folder (default:
  ``out/<rule>/<env>``); ``options`` are ``run_config``'s (``loop``,
  ``hyper_params``, ``seed``, ``learning_rate``)."""
  folder = folder or out / suite.slug(rule) / suite.slug(env)
  config = run_config(
      rule, env, settings, budget, conv, seeds, folder, **options
  )
  return suite.run(config, folder)


def run_config(
    rule: str,
    env: str,
    settings: dict,
    budget: int,
    conv: tuple,
    seeds: int,
    folder: Path,
    loop: dict | None = None,
    hyper_params: dict | None = None,
    seed: int = 0,
    learning_rate: float | None = None,
):
  """The ``disco-eval`` config of one run of ``run``. The agents' torso is
  always the suite's: ``conv`` channels, or ``()`` (flat observations into
  the dense torso), whatever torso the rule's own agent settings name (a
  rule file exported with a convolutional torso runs flat where the suite's
  observations are flat)."""
  return suite.eval_config(
      rule,
      env,
      budget,
      seeds,
      folder,
      LAST_EPISODES,
      loop=suite.ON_POLICY if loop is None else loop,
      network=dict(conv_channels=tuple(conv)),
      hyper_params=hyper_params,
      env_settings=settings,
      seed=seed,
      learning_rate=learning_rate,
  )


def tune(
    rule: str,
    env: str,
    settings: dict,
    budget: int,
    conv: tuple,
    out: Path,
    loop: dict | None,
    hyper_params: dict | None,
    rows: list[dict],
) -> dict:
  """Trains every point of ``suite.TUNE_GRID`` on the tuning seeds
  (``suite.TUNE_SEED`` on, disjoint from the reported ones) into
  ``out/tuning/<rule>/<env>/<point>``, appends each point's row to ``rows``
  and returns the best point: the highest mean final return over the tuning
  seeds (the same choice as the best mean normalised return, which is an
  increasing affine function of it; environments without a reference
  return can be tuned too)."""
  keys = list(suite.TUNE_GRID)
  best, best_score = None, -math.inf
  for values in itertools.product(*(suite.TUNE_GRID[k] for k in keys)):
    point = dict(zip(keys, values, strict=True))
    name = "_".join(f"{k}={v:g}" for k, v in point.items())
    hyper = dict(hyper_params or {})
    hyper.update({k: v for k, v in point.items() if k != "learning_rate"})
    folder = run(
        rule,
        env,
        settings,
        budget,
        conv,
        suite.TUNE_SEEDS,
        out,
        loop=loop,
        hyper_params=hyper,
        folder=out
        / "tuning"
        / suite.slug(rule)
        / suite.slug(env)
        / suite.slug(name),
        seed=suite.TUNE_SEED,
        learning_rate=point.get("learning_rate"),
    )
    scores = results_lib.load_run(folder).final_scores()
    score = float(np.nanmean(scores)) if np.isfinite(scores).any() else None
    rows.append(
        dict(
            rule=rule,
            env=env,
            **point,
            mean_return=score,
            per_seed=" ".join(f"{x:.3f}" for x in scores),
            seeds=f"{suite.TUNE_SEED}-{suite.TUNE_SEED + suite.TUNE_SEEDS - 1}",
            env_steps=budget,
        )
    )
    if score is not None and score > best_score:
      best, best_score = point, score
  points = rows[-math.prod(len(v) for v in suite.TUNE_GRID.values()) :]
  if best is None:  # every point diverged: the first
    best = {k: points[0][k] for k in keys}
  for row in points:
    row["chosen"] = int({k: row[k] for k in keys} == best)
  return best


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--out", default="/tmp/env_suite")
  parser.add_argument("--envs", nargs="+", default=[e[0] for e in suite.SUITE])
  parser.add_argument(
      "--rules", nargs="+", default=["disco103", "actor_critic"]
  )
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument(
      "--budget_scale",
      type=float,
      default=1.0,
      help="multiplies every budget (e.g. 0.1 for a try)",
  )
  parser.add_argument("--random_steps", type=int, default=5000)
  parser.add_argument(
      "--tuned",
      action="store_true",
      help=(
          "also tune the hand-designed rules of --rules (suite_settings."
          "TUNE_RULES) per environment on the tuning seeds and report them, "
          "as '<rule>-tuned', beside their published-setting rows"
      ),
  )
  parser.add_argument(
      "--tune_budget_scale",
      type=float,
      default=0.5,
      help="each grid point's budget, as a fraction of the reported one",
  )
  parser.add_argument(
      "--loop",
      nargs="+",
      default=[],
      metavar="RULE=LOOP",
      help=(
          f"a rule's loop, one of {', '.join(suite.LOOPS)} (default: on_policy; "
          "own: the rule's registered loop)"
      ),
  )
  parser.add_argument(
      "--hyper_params",
      nargs="+",
      default=[],
      metavar="RULE.KEY=VALUE",
      help="a rule's hyper-parameter, e.g. actor_critic.entropy_cost=0.01",
  )
  args = parser.parse_args(argv)
  loops, hyper_params = {}, {}
  for item in args.loop:
    rule, _, name = item.partition("=")
    if name not in suite.LOOPS:
      parser.error(
          f"--loop {item}: use RULE=LOOP, LOOP one of {list(suite.LOOPS)}"
      )
    loops[rule] = suite.LOOPS[name]
  for item in args.hyper_params:
    key, _, value = item.partition("=")
    rule, _, name = key.partition(".")
    try:
      hyper_params.setdefault(rule, {})[name] = float(value)
    except ValueError:
      parser.error(f"--hyper_params {item}: use RULE.KEY=NUMBER")
  out = Path(args.out)
  entries = {e[0]: e for e in suite.SUITE}
  rows, sources, tuning_rows, choices = [], {}, [], {}
  for env in args.envs:
    _, settings, budget, conv = entries[env]
    budget = int(budget * args.budget_scale)
    # A rule's reported seeds on env (trained unless done).
    train = functools.partial(
        run,
        env=env,
        settings=settings,
        budget=budget,
        conv=conv,
        seeds=args.seeds,
        out=out,
    )
    runs = {
        rule: results_lib.load_run(
            train(
                rule, loop=loops.get(rule), hyper_params=hyper_params.get(rule)
            )
        )
        for rule in args.rules
    }
    for rule in args.rules if args.tuned else ():
      if rule not in suite.TUNE_RULES:
        continue
      point = tune(
          rule,
          env,
          settings,
          int(budget * args.tune_budget_scale),
          conv,
          out,
          loops.get(rule),
          hyper_params.get(rule),
          tuning_rows,
      )
      choices[(rule, env)] = point
      hyper = dict(hyper_params.get(rule) or {})
      hyper.update({k: v for k, v in point.items() if k != "learning_rate"})
      runs[f"{rule}-tuned"] = results_lib.load_run(
          train(
              rule,
              loop=loops.get(rule),
              hyper_params=hyper,
              folder=out / suite.slug(f"{rule}-tuned") / suite.slug(env),
              learning_rate=point.get("learning_rate"),
          )
      )
    analysis.plot_learning_curves(
        {rule: r.metrics for rule, r in runs.items()},
        path=out / f"curves_{suite.slug(env)}.png",
        min_episodes=results_lib.CURVE_EPISODES,
        title=f"{env} ({args.seeds} seeds)",
    )
    random = random_return(env, settings, args.random_steps)
    key = reference_scores.env_key(env, settings)
    try:
      ref = reference_scores.get_entry(key)
      budget_text = (
          f"{ref.budget_env_steps:,} steps"
          if ref.budget_env_steps
          else "any budget"
      )
      reference = (
          f"{ref.reference_return:g} ({ref.reference_algorithm}, "
          f"{budget_text})"
      )
      sources[env] = ref.source
    except reference_scores.MissingReferenceError:

      reference = "none published"
    for rule, r in runs.items():
      point = choices.get((rule.removesuffix("-tuned"), env))
      if rule.endswith("-tuned") and point:
        rule = f"{rule} ({', '.join(f'{k}={v:g}' for k, v in point.items())})"
      scores = r.final_scores()
      ci = analysis.bootstrap_ci(scores)
      ci_text = "n/a" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"
      rows.append(
          f"| {env} | {budget} | {rule} | {scores.mean():.2f} "
          f"{ci_text} | {', '.join(f'{x:.2f}' for x in scores)} "
          f"| {random:.2f} | {reference} |"
      )
    print(rows[-1], flush=True)
  print(
      "\n"
      + cli.table_header(
          (
              "environment",
              "env steps per seed",
              "rule",
              "final return (95% CI)",
              "per seed",
              "uniform random",
              "reference",
          )
      )
  )
  print("\n".join(rows))
  print("\nSources of the references:")
  for env, source in sources.items():
    print(f"- {env}: {source}")
  (out / "table.md").write_text("\n".join(rows) + "\n")
  if tuning_rows:
    cli.write_csv(out / "tuning.csv", tuning_rows)
    print(f"\nTuning: every grid point's score in {out / 'tuning.csv'}")

  (out / "settings.json").write_text(
      json.dumps(
          dict(
              loop=suite.ON_POLICY,
              loops=loops,
              hyper_params=hyper_params,
              tuned=args.tuned,
              tune_grid=suite.TUNE_GRID if args.tuned else None,
              tune_seeds=suite.TUNE_SEEDS,
              tune_seed=suite.TUNE_SEED,
              tune_budget_scale=args.tune_budget_scale,
              last_episodes=LAST_EPISODES,
              suite=suite.SUITE,
              seeds=args.seeds,
              budget_scale=args.budget_scale,
          ),
          indent=1,
      )
  )


if __name__ == "__main__":
  main()
