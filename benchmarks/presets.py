"""Presets against the registered settings: each case trains with the rule's
preset for the environment and with ``preset=none``, interleaved.

  python -m benchmarks.presets --out benchmarks/results/presets
  python -m benchmarks.presets --out OUT --cases ppo:gymnax/Pendulum-v1:500000

Every case (``RULE:ENV:STEPS``) trains ``--seeds`` vmapped seeds through the
``disco-eval`` steps twice, once with no flags beyond rule and environment
(its preset applies) and once with ``--config.preset=none``, into
``OUT/<rule>/<env>/<preset|registered>``. A finished run is kept, so a
stopped script continues where it stopped. ``OUT/presets.csv`` gets one row
per run: the preset applied, the final return of each seed (the mean of its
last ``--last_episodes`` episodes), their mean and the steady env steps/s
(compilation excluded; compare rates only within one run of this script on
an otherwise idle machine); ``OUT/table.md`` the same as a table.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import cli
from benchmarks import suite_settings as suite
from disco import evaluation

# (rule, environment, env steps per seed): the targets first.
CASES = (
    ("ppo", "gymnax/Pendulum-v1", 500_000),
    ("ppo", "brax/inverted_pendulum", 200_000),
    ("ppo", "lpg/dense", 75_000),
    ("actor_critic", "lpg/dense", 75_000),
    ("ppo", "xminigrid/MiniGrid-Empty-8x8", 100_000),
)
ARMS = ("preset", "registered")
COLUMNS = (
    "rule",
    "env",
    "arm",
    "preset",
    "env_steps",
    "seeds",
    "final_return_mean",
    "final_return_per_seed",
    "env_steps_per_s",
    "wall_time_s",
)


def parse_case(text: str) -> tuple[str, str, int]:
  rule, env, steps = text.rsplit(":", 2) if text.count(":") >= 2 else ("",) * 3
  if not rule or not env or not steps.isdigit():
    cli.usage_error(f"--cases {text!r}: write RULE:ENV:STEPS")
  return rule, env, int(steps)


def run_arm(rule, env, steps, arm, args) -> dict:
  folder = args.out / suite.slug(rule) / suite.slug(env) / arm
  config = evaluation.make_config(
      rule=rule,
      env=env,
      preset="auto" if arm == "preset" else "none",
      total_env_steps=steps,
      num_seeds=args.seeds,
      last_episodes=args.last_episodes,
      output_dir=str(folder),
      overwrite=True,
  )
  suite.run(config, folder)
  summary = json.loads((folder / "summary.json").read_text())
  saved = json.loads((folder / "config.json").read_text())
  return dict(
      rule=rule,
      env=env,
      arm=arm,
      preset=(saved.get("preset") or {}).get("name", ""),
      env_steps=summary["env_steps"],
      seeds=summary["num_seeds"],
      final_return_mean=round(summary["final_return_mean"], 3),
      final_return_per_seed=" ".join(
          f"{x:.3f}" for x in summary["final_return_per_seed"]
      ),
      env_steps_per_s=round(summary["env_steps_per_s"] or 0.0, 1),
      wall_time_s=round(summary["wall_time_s"], 1),
  )


def main(argv=None) -> list[dict]:
  parser = cli.parser(__doc__)
  parser.add_argument("--out", type=Path, required=True)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--last_episodes", type=int, default=20)
  parser.add_argument(
      "--cases", nargs="+", help="RULE:ENV:STEPS (default: the CASES list)"
  )
  parser.add_argument(
      "--arms", nargs="+", default=list(ARMS), choices=ARMS, help="which runs"
  )
  args = parser.parse_args(argv)
  cases = [parse_case(c) for c in args.cases] if args.cases else CASES
  rows = []
  for rule, env, steps in cases:
    for arm in args.arms:
      row = run_arm(rule, env, steps, arm, args)
      print(", ".join(f"{k}={row[k]}" for k in COLUMNS), flush=True)
      rows.append(row)
  cli.write_csv(args.out / "presets.csv", rows, COLUMNS)
  cli.write_table(
      args.out,
      "\n".join(
          [
              cli.table_header(COLUMNS),
              *(cli.table_row([r[k] for k in COLUMNS]) for r in rows),
          ]
      ),
  )
  return rows


if __name__ == "__main__":
  main()
