r"""Meta-training curves of LPG: ours against GROOVE's, same settings (issue 25).

  python benchmarks/groove_meta_train_compare.py run --root DIR [--groove PATH]
  python benchmarks/groove_meta_train_compare.py report DIR --out OUT

``run`` meta-trains LPG from random meta-parameters for ``--steps``
meta-steps, ``--seeds`` seeds, with our ``disco-meta-train``
(``configs/meta_train_lpg.py``) and, when ``--groove`` names a checkout of
github.com/EmptyJackson/groove, with GROOVE's ``lpg_meta_grad_train_step``
(patched copy, ``groove_compare.GROOVE_PATCHES``; GROOVE runs in a child
process of this script, ``groove-run``). Both sides use the same work,
scaled to a 2-core CPU: ``--agents`` agents on the LPG grid world
``--train`` (tabular observations), ``--envs`` environments each, rollouts
of 20, K=5, a GRU of ``--gru``, Adam at ``--meta_lr`` on the
meta-parameters with the gradient norm clipped at 0.5, linear agents and
value functions, agent lifetimes of ``--lifetime`` updates (agents restart
on a new level when theirs ends; GROOVE's lifetime table is set for this
run, its code is not changed).

Every ``--validate_every`` meta-steps (and at meta-step 0), fresh agents
of ``--validation_seeds`` seeds are trained by the current meta-parameters
for ``--validation_updates`` updates (``--envs`` environments, rollouts of
20) on the held-out grid world ``--held_out``, and their return is
recorded: ours through ``config.validation`` (the mean return of each
seed's last ``--envs`` episodes, about one per environment at the end of
training; the reference is the identity, so the score is the raw return),
GROOVE's through its own ``train_lpg_agent`` and ``eval_agent`` (one
episode in each of 64 environments after training).

Runs go to ``<root>/{ours,groove}-s<seed>``, each with ``metrics.csv``
(meta-step, the training agents' mean episode return, seconds) and
``validation.csv`` (disco's columns). Finished runs are skipped and both
sides resume from their last validation after a kill.

``report`` writes ``table.md``, ``curves.png`` and ``returns.csv``: per side and seed, the
training agents' return over the first 50 and the last 250 meta-steps and
the held-out return at every validation, and the meta-step time of each
side. The two sides measure the training return differently: GROOVE
evaluates each agent on fresh episodes after its update
(``lpg_agent_return``); ours averages the episodes that end in the training
rollouts (``<env>/return_sum / <env>/episodes``), which on ``dense``
(500-step episodes, 100 steps per meta-step) lag the policy by a few
meta-steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
from pathlib import Path
import sys
import tempfile

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import groove_compare
from benchmarks import meta_runs
from benchmarks import timing
from disco import files
from disco.meta import history as history_lib
from disco.meta import validation_record

SIDES = ("ours", "groove")
# Our grid-world names and GROOVE's modes for the same layouts.
GROOVE_MODES = {
    "dense": "dense",
    "sparse": "sparse",
    "long_horizon": "long",
    "longer_horizon": "longer",
    "long_dense": "long_dense",
}
ROLLOUT_LEN = 20
K = 5
GROOVE_EVAL_EPISODES = 64
RETURN_COLUMN = "episode_return"


# ---------------------------------------------------------------- ours ----


def our_flags(seed: int, args) -> list[str]:
  held_out = f"lpg/{args.held_out}"
  return [
      "--config=configs/meta_train_lpg.py",
      f"--config.population=({{'env': 'lpg/{args.train}', 'env_settings': "
      f"{{}}, 'num_agents': {args.agents}}},)",
      f"--config.batch_size={args.envs}",
      f"--config.rollout_len={ROLLOUT_LEN}",
      f"--config.inner_steps={K}",
      f"--config.rule_kwargs.net.hidden_size={args.gru}",
      f"--config.lifetime_updates=({args.lifetime},{args.lifetime})",
      f"--config.meta_learning_rate={args.meta_lr}",
      f"--config.num_meta_steps={args.steps}",
      f"--config.seed={100 + seed}",
      f"--config.init_seed={200 + seed}",
      f"--config.checkpoint_every={args.validate_every}",
      f"--config.validation.every={args.validate_every}",
      f"--config.validation.envs=({{'env': '{held_out}'}},)",
      # The identity normalisation: scores are raw returns.
      "--config.validation.references="
      f"('{held_out}:random=0,reference=1,source=raw return',)",
      f"--config.validation.num_seeds={args.validation_seeds}",
      # One (the last) episode per environment, as GROOVE's evaluation.
      f"--config.validation.last_episodes={args.envs}",
      # Rollouts of 21 actor steps hold 20 transitions, as in training.
      f"--config.validation.rollout_len={ROLLOUT_LEN + 1}",
      f"--config.validation.num_envs={args.envs}",
      f"--config.validation.batch_size={args.envs}",
      "--config.validation.replay_capacity=0",
      "--config.validation.min_replay_size=0",
      "--config.validation.total_env_steps="
      f"{args.validation_updates * args.envs * (ROLLOUT_LEN + 1)}",
      "--config.resume=True",
  ]


def our_training_returns(path: Path) -> tuple[np.ndarray, np.ndarray]:
  """Meta-steps and the training agents' mean episode return at each (NaN
  where no episode ended)."""
  history = meta_runs.read_history(path)
  env = [c for c in history.columns if c.endswith("/return_sum")][0][
      : -len("/return_sum")
  ]
  episodes = history.column(f"{env}/episodes")
  total = history.column(f"{env}/return_sum")
  with np.errstate(invalid="ignore", divide="ignore"):
    return history.steps, np.where(episodes > 0, total / episodes, np.nan)


# -------------------------------------------------------------- GROOVE ----


def groove_args(groove_lib, mode: str, args, num_agents: int):
  return groove_compare.groove_settings(
      groove_lib["parse_args"],
      mode,
      envs=args.envs,
      agents=num_agents,
      rollout_len=ROLLOUT_LEN,
      inner_steps=K,
      gru=args.gru,
      extra=[f"--lpg_learning_rate={args.meta_lr}", f"--seed={args.seed}"],
  )


def groove_run(args) -> None:
  """One GROOVE meta-training run (a child process: GROOVE's imports)."""
  _check_modes(args)
  import importlib

  import flax.serialization
  import jax

  out = Path(args.out)
  with tempfile.TemporaryDirectory() as tmp:
    groove = groove_compare.patched_groove(args.groove, Path(tmp) / "groove")
    sys.path.insert(0, str(groove))
    lib = dict(
        parse_args=importlib.import_module("experiments.parse_args").parse_args,
        meta=importlib.import_module("meta.meta"),
        sampler=importlib.import_module("environments.level_sampler"),
        agents=importlib.import_module("agents.agents"),
        lpg_agent=importlib.import_module("agents.lpg_agent"),
    )
    train_mode = GROOVE_MODES[args.train]
    groove_compare.set_groove_lifetime(train_mode, args.lifetime)
    gargs = groove_args(lib, train_mode, args, args.agents)
    sampler = lib["sampler"].LevelSampler(gargs)
    step = groove_compare.groove_jitted_step(
        lib["meta"], gargs, sampler, resample=True
    )

    rng = jax.random.PRNGKey(args.seed)
    rng, lpg_rng, agent_rng = jax.random.split(rng, 3)
    train_state = lib["meta"].create_lpg_train_state(lpg_rng, gargs)
    _, agents, critics = sampler.initial_sample(
        agent_rng, None, args.agents, True
    )

    held_args = groove_args(
        lib, GROOVE_MODES[args.held_out], args, args.validation_seeds
    )
    held = lib["sampler"].LevelSampler(held_args)
    chunk = next(
        c for c in (50, 25, 10, 5, 1) if args.validation_updates % c == 0
    )

    @jax.jit
    def fresh_agents(key):
      return held.initial_sample(key, None, args.validation_seeds, False)[1]

    @jax.jit
    def train_fresh(params, agents, keys):
      ts = train_state.replace(params=params)

      def one(agent, key):
        return lib["lpg_agent"].train_lpg_agent(
            key,
            ts,
            agent,
            held.rollout_manager,
            chunk,
            gargs.lpg_agent_target_coeff,
        )[0]

      return jax.vmap(one)(agents, keys)

    @jax.jit
    def evaluate(agents, keys):
      return jax.vmap(
          lambda agent, key: lib["agents"].eval_agent(
              key,
              held.rollout_manager,
              agent.level.env_params,
              agent.actor_state,
              GROOVE_EVAL_EPISODES,
          )
      )(agents, keys)

    def validate(params, meta_step: int) -> list[dict]:
      key = jax.random.PRNGKey(1000 + meta_step)
      key, agent_key = jax.random.split(key)
      fresh = fresh_agents(agent_key)
      for _ in range(args.validation_updates // chunk):
        key, sub = jax.random.split(key)
        fresh = train_fresh(
            params, fresh, jax.random.split(sub, args.validation_seeds)
        )
      returns = np.asarray(
          evaluate(fresh, jax.random.split(key, args.validation_seeds))
      )
      return [
          dict(
              meta_step=meta_step,
              env=f"lpg/{args.held_out}",
              seed=1000 + s,
              **{"return": float(r), "normalized_score": float(r)},
              aggregate=float(np.mean(returns)),
          )
          for s, r in enumerate(returns)
      ]

    carry = (rng, train_state, agents, critics)
    checkpoint = out / "carry.msgpack"
    history = meta_runs.read_history(out)
    rows = validation_record.read_rows(out / validation_record.CSV_FILE)
    start = 0
    if checkpoint.is_file():
      carry = flax.serialization.from_bytes(carry, checkpoint.read_bytes())
      start = int(checkpoint.with_suffix(".step").read_text())
      history = history_lib.MetricsHistory(
          r for r in history.rows if r["meta_step"] <= start
      )
      rows = [r for r in rows if r["meta_step"] <= start]

    def save(meta_step: int) -> None:
      history.write_csv(out / "metrics.csv")
      with files.atomic_write(out / validation_record.CSV_FILE, "w") as f:
        writer = csv.DictWriter(f, fieldnames=validation_record.COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
      checkpoint.write_bytes(flax.serialization.to_bytes(carry))
      checkpoint.with_suffix(".step").write_text(str(meta_step))

    if start == 0 and not rows:
      rows += validate(carry[1].params, 0)
      save(0)
    for meta_step in range(start + 1, args.steps + 1):
      (carry, metrics), seconds = timing.timed(step, carry)
      history.append(
          dict(
              meta_step=meta_step,
              **{RETURN_COLUMN: float(metrics["lpg_agent_return"])},
              lpg_loss=float(metrics["lpg_loss"]),
              seconds=seconds,
          )
      )
      if meta_step % args.validate_every == 0 or meta_step == args.steps:
        rows += validate(carry[1].params, meta_step)
        save(meta_step)
        print(f"groove step {meta_step}: {rows[-1]['aggregate']:.3f}")


def run_groove(seed: int, out: Path, args) -> None:
  command = [
      sys.executable,
      __file__,
      "groove-run",
      f"--groove={args.groove}",
      f"--out={out}",
      f"--seed={seed}",
      *(f"--{k}={getattr(args, k)}" for k in SHARED),
  ]
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  meta_runs.run_logged(command, out, env)


# (name, type, default) of the settings both sides share.
SHARED_DEFAULTS = dict(
    steps=(int, 500),
    agents=(int, 4),
    envs=(int, 32),
    gru=(int, 64),
    lifetime=(int, 250),
    meta_lr=(float, 1e-3),
    train=(str, "dense"),
    held_out=(str, "long_horizon"),
    validate_every=(int, 100),
    validation_seeds=(int, 2),
    validation_updates=(int, 250),
)
SHARED = tuple(SHARED_DEFAULTS)


def run(args) -> None:
  _check_modes(args)
  sides = ("ours", "groove") if args.groove else ("ours",)
  if args.groove and not (args.groove / "models" / "lpg.py").is_file():
    cli.usage_error(f"--groove={args.groove} is not a GROOVE checkout.")

  def start(side: str, seed: int, out: Path) -> None:
    if side == "ours":
      meta_runs.meta_train(our_flags(seed, args), out)
    else:
      run_groove(seed, out, args)

  meta_runs.run_each(
      Path(args.root),
      meta_runs.seed_major(sides, args.seeds),
      lambda _, out: meta_runs.finished_steps(out) >= args.steps,
      start,
  )


# -------------------------------------------------------------- report ----


def training_returns(path: Path, side: str) -> tuple[np.ndarray, np.ndarray]:
  if side == "ours":
    return our_training_returns(path)
  history = meta_runs.read_history(path)
  return history.steps, history.column(RETURN_COLUMN)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
  """Trailing mean over ``window`` meta-steps, ignoring NaNs."""
  out = np.full(len(values), np.nan)
  for i in range(len(values)):
    chunk = values[max(0, i + 1 - window) : i + 1]
    if np.isfinite(chunk).any():
      out[i] = np.nanmean(chunk)
  return out


def report(args) -> None:
  from matplotlib import pyplot as plt

  root = Path(args.root)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  fig, (ax_train, ax_held) = plt.subplots(1, 2, figsize=(11, 4))
  table = [
      "| side | seed | training return, meta-steps 1-50 | last 250 | "
      "held-out return at each validation (meta-step: mean of seeds) | "
      "s per meta-step (median) |",
      "|---|---|---|---|---|---|",
  ]
  summary, points = {}, []
  for side, colour in zip(SIDES, ("C0", "C1"), strict=True):
    for path in meta_runs.run_dirs(root, side):
      steps, returns = training_returns(path, side)
      if not len(steps):
        continue
      seed = path.name.rsplit("-s", 1)[1]
      first, last = np.nanmean(returns[:50]), np.nanmean(returns[-250:])
      held_mean = meta_runs.validation_means(path)
      seconds = _step_seconds(path, side)
      table.append(
          f"| {side} | {seed} | {first:.2f} | {last:.2f} | "
          + ", ".join(f"{s}: {v:.2f}" for s, v in held_mean.items())
          + f" | {seconds:.3f} |"
      )
      summary.setdefault(side, []).append((first, last, held_mean))
      points += [
          (side, seed, "training", int(t), float(v))
          for t, v in zip(steps, returns, strict=True)
      ]
      points += [(side, seed, "held_out", t, v) for t, v in held_mean.items()]
      label = side if seed == "0" else None
      ax_train.plot(steps, smooth(returns, 25), color=colour, label=label)
      ax_held.plot(
          list(held_mean),
          list(held_mean.values()),
          "o-",
          color=colour,
          label=label,
      )
  if not summary:
    cli.usage_error(f"no runs under {root}: run `run` first")
  means = [
      "",
      "| side | seeds | training return, last 250 | held-out return at the "
      "end | held-out return, mean of the validations after meta-step 0 |",
      "|---|---|---|---|---|",
  ]
  for side, runs in summary.items():
    ends = [h[max(h)] for _, _, h in runs]
    later = [np.mean([v for s, v in h.items() if s > 0]) for _, _, h in runs]
    means.append(
        f"| {side} | {len(runs)} | "
        f"{np.mean([last for _, last, _ in runs]):.2f} | "
        f"{np.mean(ends):.2f} | {np.mean(later):.2f} "
        f"(seeds: {', '.join(f'{x:.2f}' for x in later)}) |"
    )
  ax_train.set_xlabel("meta-step")
  ax_train.set_ylabel("training agents' episode return (25-step mean)")
  ax_held.set_xlabel("meta-step")
  ax_held.set_ylabel("fresh agents' return on the held-out grid world")
  for ax in (ax_train, ax_held):
    ax.legend()
  fig.tight_layout()
  fig.savefig(out / "curves.png", dpi=100)
  with open(out / "returns.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(("side", "seed", "curve", "meta_step", "return"))
    writer.writerows(points)
  cli.write_table(out, "\n".join(table + means) + "\n")


def _step_seconds(path: Path, side: str) -> float:
  """Seconds per meta-step after the compiling first one: GROOVE's median,
  ours as ``disco-meta-train`` reports it (its last session)."""
  if side == "groove":
    return timing.median(meta_runs.read_history(path).column("seconds")[1:])
  summary = path / "summary.json"  # written when a run ends
  if not summary.is_file():
    return math.nan
  return float(json.loads(summary.read_text())["seconds_per_meta_step"])


def _check_modes(args) -> None:
  for key in ("train", "held_out"):
    if getattr(args, key) not in GROOVE_MODES:
      cli.usage_error(
          f"--{key}={getattr(args, key)}: use one of {', '.join(GROOVE_MODES)}"
      )


def _shared_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--groove", type=Path, default=None)
  for key, (kind, default) in SHARED_DEFAULTS.items():
    p.add_argument(f"--{key}", type=kind, default=default)


def _run_flags(p: argparse.ArgumentParser) -> None:
  _shared_flags(p)
  p.add_argument("--root", required=True)
  p.add_argument("--seeds", type=int, default=3)


def _groove_run_flags(p: argparse.ArgumentParser) -> None:
  _shared_flags(p)
  p.add_argument("--out", required=True)
  p.add_argument("--seed", type=int, required=True)


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      {
          "run": cli.Command(run, _run_flags),
          "groove-run": cli.Command(groove_run, _groove_run_flags),
          "report": cli.Command(report, cli.add_report_flags),
      },
      argv=argv,
  )


if __name__ == "__main__":
  main()
