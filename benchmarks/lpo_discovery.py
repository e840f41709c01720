r"""Discovery from a strong algorithm: LPO's drift meta-learned from PPO (issue 47).

  python benchmarks/lpo_discovery.py all --root /work/runs/lpo \
      --out benchmarks/results/lpo_discovery

``all`` runs the steps below in turn; each is a command of its own too
(``run``, ``distill``, ``compare``, ``report``, all with ``--root``), and
each skips what is finished, so the command resumes after a kill.

``run`` meta-trains LPO (``configs/meta_train_lpo.py``: OpenAI-ES over the
drift, which starts at PPO's) on CartPole-v1 and Breakout-MinAtar, one run
per variant (``--variants``, ``VARIANTS``: ``lpo``, the paper's drift
network, and ``lpo_linear``, a drift linear in 12 features) and seed in
``<root>/<variant>-s<seed>`` (``--seeds``): ``--members`` members a
generation, each training one fresh
PPO-style agent per environment for ``--lifetime`` iterations of 4
environments x 128 steps, ``--generations`` generations. Every
``--validate_every`` generations (and at 0) fresh agents trained by the
current drift on the held-out SpaceInvaders-MinAtar (``--validation_seeds``
seeds, ``--validation_steps`` env steps) score it, and the best goes to
``best_meta_params.npz``.

``distill`` takes the best validated ``lpo`` rule over the seeds (the
teacher; the best ``lpo_linear`` rule goes beside it) and
fits two students to its drift over a grid of ``(r, A)``
(``disco.distillation.drift_fit``): a network of ``--student_hidden``
units and a closed form (``hidden_size=0``: linear in the 8 features inside
the ReLU, fitted by least squares), written as rule files beside the
teacher in ``<root>/rules`` with their agreement in ``distill.json``.

``compare`` runs ``disco-compare`` on environments used neither in
meta-training nor in validation (Asterix-MinAtar, Freeway-MinAtar,
Acrobot-v1; ``--compare_seeds`` seeds, ``--compare_steps`` env steps each,
PPO's loop for every rule): the discovered rules, the students, DPO, PPO
at its registered defaults and PPO tuned per environment over
``TUNE_GRID`` on seeds kept apart (``--tune_seeds``), into
``<root>/compare``.

``report`` writes to ``--out``: ``validation.csv`` and ``validation.png``
(every run's held-out score by generation), ``fitness.png`` (the members'
mean fitness), ``drifts.png`` (PPO, DPO, the learned drift and its students
over ``(r, A)``), ``table.md`` and the comparison's report and figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import shutil
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_runs
from disco import weights as weights_lib

TRAIN = ("gymnax/CartPole-v1", "gymnax/Breakout-MinAtar")
VALIDATION = ("gymnax/SpaceInvaders-MinAtar",)
HELD_OUT = (
    "gymnax/Asterix-MinAtar",
    "gymnax/Freeway-MinAtar",
    "gymnax/Acrobot-v1",
)
# The agents' learning rate in meta-training (configs/meta_train_lpo.py):
# LPO, its students and DPO are compared at it; PPO at its default and tuned.
AGENT_LR = 1e-3
TUNE_GRID = "learning_rate=(2.5e-4,1e-3,3e-3),entropy_cost=(0.0,0.01)"


# Variants: extra flags over configs/meta_train_lpo.py. ``lpo``: the paper's
# drift network (8 features, 128 tanh units, 1,152 meta-parameters);
# ``lpo_linear``: a drift linear in the 12 ``signed`` features (12
# meta-parameters, a small space ES searches quickly), with larger steps.
VARIANTS = {
    "lpo": [],
    "lpo_linear": [
        "--config.rule_kwargs.features=signed",
        "--config.rule_kwargs.hidden_size=0",
        "--config.es.sigma=0.3",
        "--config.meta_learning_rate=0.1",
    ],
}


def run_flags(variant: str, seed: int, args) -> list[str]:
  every = args.validate_every
  return [
      "--config=configs/meta_train_lpo.py",
      *VARIANTS[variant],
      f"--config.seed={100 + seed}",
      f"--config.init_seed={200 + seed}",
      f"--config.num_meta_steps={args.generations}",
      f"--config.es.population_size={args.members}",
      f"--config.es.lifetime_iterations={args.lifetime}",
      f"--config.es.final_iterations={max(1, args.lifetime // 8)}",
      f"--config.checkpoint_every={every}",
      f"--config.validation.every={every}",
      f"--config.validation.envs={tuple(dict(env=e) for e in VALIDATION)!r}",
      f"--config.validation.num_seeds={args.validation_seeds}",
      f"--config.validation.total_env_steps={args.validation_steps}",
      "--config.resume=True",
  ]


def _variants(args) -> list[str]:
  names = args.variants.split(",")
  unknown = sorted(set(names) - set(VARIANTS))
  if unknown:
    cli.usage_error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
  return names


def run(args) -> None:
  meta_runs.run_each(
      Path(args.root),
      [(v, seed) for v in _variants(args) for seed in range(args.seeds)],
      lambda _, out: meta_runs.finished_steps(out) >= args.generations,
      lambda v, seed, out: meta_runs.meta_train(run_flags(v, seed, args), out),
  )


def best_rule(root: Path, variant: str) -> tuple[Path, float, int]:
  """A variant's best validated meta-parameters over its seeds: (file,
  score, generation)."""
  best = meta_runs.best_validated(root, [variant])
  if best is None:
    cli.usage_error(f"no validated {variant} run under {root}: run `run` first")
  path, score = best
  scores = meta_runs.validation_scores(path.parent)
  return path, score, max(scores, key=scores.get)


def _choose(root: Path, variant: str, target: Path) -> dict:
  """Copies the variant's best validated rule to ``target``; refuses when a
  comparison exists for another pick (its finished runs would stand for the
  new rule)."""
  source, score, step = best_rule(root, variant)
  chosen = dict(source=str(source), validation_score=score, generation=step)
  record = target.with_suffix(".json")
  if record.is_file() and json.loads(record.read_text()) != chosen:
    runs = root / "compare" / "runs"
    if runs.is_dir():
      cli.usage_error(
          f"the best {variant} rule changed since the last comparison "
          f"({json.loads(record.read_text())['source']} -> {source}): delete "
          f"{runs} and {record}, then run distill and compare again"
      )
  shutil.copyfile(source, target)
  record.write_text(json.dumps(chosen, indent=2) + "\n")
  return chosen


def distill(args) -> None:
  import jax

  from disco.distillation import drift_fit
  from disco.update_rules import mirror_learning

  root = Path(args.root)
  rules = root / "rules"
  rules.mkdir(parents=True, exist_ok=True)
  if meta_runs.run_dirs(root, "lpo_linear"):
    _choose(root, "lpo_linear", rules / "lpo_linear_discovered.npz")
  teacher_file = rules / "lpo_discovered.npz"
  report = dict(teacher=_choose(root, "lpo", teacher_file))
  metadata = weights_lib.load_metadata(teacher_file)
  teacher = mirror_learning.LPO(**metadata.get("rule_kwargs", {}))
  like = jax.eval_shape(teacher.init_meta_params, jax.random.PRNGKey(0))
  teacher_params = weights_lib.load_meta_params(teacher_file, like)
  for name, hidden in (
      (f"lpo_student_h{args.student_hidden}", args.student_hidden),
      ("lpo_closed_form", 0),
  ):
    kwargs = dict(metadata.get("rule_kwargs", {}), hidden_size=hidden)
    student = mirror_learning.LPO(**kwargs)
    params, agreement = drift_fit.distill(teacher, teacher_params, student)
    weights_lib.save_meta_params(
        rules / f"{name}.npz",
        jax.device_get(params),
        metadata=dict(
            rule="lpo",
            rule_kwargs=kwargs,
            distilled_from=report["teacher"]["source"],
        ),
    )
    report[name] = dict(
        hidden_size=hidden,
        parameters=int(sum(x.size for x in jax.tree.leaves(params))),
        **vars(agreement),
    )
    print(f"{name}: {report[name]}", flush=True)
  (rules / "distill.json").write_text(json.dumps(report, indent=2) + "\n")


def rule_files(root: Path, student_hidden: int) -> list[Path]:
  """The discovered rules the comparison takes (the linear variant's where
  it ran)."""
  names = [
      "lpo_discovered",
      f"lpo_student_h{student_hidden}",
      "lpo_closed_form",
      "lpo_linear_discovered",
  ]
  files = [root / "rules" / f"{n}.npz" for n in names]
  return [f for f in files if f.is_file() or "linear" not in f.name]


def compare(args) -> None:
  root = Path(args.root)
  files = [] if args.baselines_only else rule_files(root, args.student_hidden)
  missing = [str(f) for f in files if not f.is_file()]
  if missing:
    cli.usage_error(f"missing rule files {missing}: run `distill` first")
  names = [*map(str, files), "dpo", "ppo"]
  overrides = [f"{f}:learning_rate={AGENT_LR}" for f in files]
  overrides.append(f"dpo:learning_rate={AGENT_LR}")
  command = [
      sys.executable,
      "-m",
      "disco.launch.compare",
      f"--config.rules={tuple(names)!r}",
      f"--config.envs={HELD_OUT!r}",
      f"--config.num_seeds={args.compare_seeds}",
      f"--config.total_env_steps={args.compare_steps}",
      "--config.last_episodes=100",
      "--config.tune.rules=('ppo',)",
      f"--config.tune.grid={TUNE_GRID}",
      f"--config.tune.num_seeds={args.tune_seeds}",
      f"--config.tune.total_env_steps={args.compare_steps}",
      "--config.tune.keep_untuned=True",
      f"--config.rule_overrides={tuple(overrides)!r}",
      f"--config.output_dir={root / 'compare'}",
  ]
  print(" ".join(command[2:]), flush=True)
  meta_runs.run_compare(command, args.shards)


def _drift_figure(root: Path, out: Path, student_hidden: int) -> None:
  import jax

  from disco.distillation import drift_fit
  from disco.update_rules import mirror_learning

  drifts = drift_fit.standard_drifts()
  for path in rule_files(root, student_hidden):
    if not path.is_file():
      continue
    rule = mirror_learning.LPO(
        **weights_lib.load_metadata(path).get("rule_kwargs", {})
    )
    like = jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))
    params = weights_lib.load_meta_params(path, like)
    drifts[path.stem.replace("lpo_", "LPO ").replace("_", " ")] = (
        lambda x, a, rule=rule, params=params: rule.drift_from_params(
            params, x, a
        )
    )
  drift_fit.plot_drifts(drifts, out / "drifts.png")


def report(args) -> None:
  from matplotlib import pyplot as plt

  root, out = Path(args.root), Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  lines = [
      "| run | generations | held-out score at 0 | at the end | best (generation) |",
      "|---|---|---|---|---|",
  ]
  rows = []
  fig, (ax_v, ax_f) = plt.subplots(1, 2, figsize=(11, 4))
  paths = [
      (v, p, i == 0)
      for v in VARIANTS
      for i, p in enumerate(meta_runs.run_dirs(root, v))
  ]
  for variant, path, first in paths:
    color = f"C{list(VARIANTS).index(variant)}"
    scores = meta_runs.validation_scores(path)
    history = meta_runs.read_history(path)
    if "fitness" in history.columns:
      ax_f.plot(
          history.steps, history.column("fitness"), color=color, alpha=0.7
      )
    if not scores:
      continue
    rows += meta_runs.validation_rows(path)
    steps = sorted(scores)
    lines.append(meta_runs.validation_table_row(path, scores))
    ax_v.plot(
        steps,
        [scores[s] for s in steps],
        "o-",
        color=color,
        alpha=0.7,
        label=variant if first else None,
    )
  if not rows:
    cli.usage_error(f"no validation.csv under {root}: run `run` first")
  cli.write_csv(out / "validation.csv", rows)
  ax_v.set_xlabel("generation")
  ax_v.set_ylabel("held-out score (0: random, 1: reference)")
  ax_v.set_title("SpaceInvaders-MinAtar (validation)")
  ax_v.legend()
  ax_f.set_xlabel("generation")
  ax_f.set_ylabel("members' mean fitness")
  ax_f.set_title("CartPole-v1 + Breakout-MinAtar (training)")
  fig.tight_layout()
  fig.savefig(out / "validation.png", dpi=100)
  plt.close(fig)
  distilled = root / "rules" / "distill.json"
  if distilled.is_file():
    info = json.loads(distilled.read_text())
    t = info.pop("teacher")
    lines += [
        "",
        f"Teacher: {t['source']} (generation {t['generation']}, held-out "
        f"score {t['validation_score']:.3f}).",
        "",
        "| student | parameters | drift RMSE | max abs | R^2 of the drift "
        "| R^2 of the network | teacher RMS |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in info.items():
      lines.append(
          f"| {name} | {s['parameters']} | {s['rmse']:.4f} | "
          f"{s['max_abs']:.4f} | {s['r2']:.4f} | {s['net_r2']:.4f} | "
          f"{s['teacher_scale']:.4f} |"
      )
    shutil.copyfile(distilled, out / "distill.json")
  _drift_figure(root, out, args.student_hidden)
  compared = root / "compare"
  meta_runs.copy_comparison(compared, out)
  cli.write_table(out, "\n".join(lines) + "\n")


def _run_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--variants", default="lpo")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--generations", type=int, default=30)
  p.add_argument("--members", type=int, default=16)
  p.add_argument("--lifetime", type=int, default=64)
  p.add_argument("--validate_every", type=int, default=10)
  p.add_argument("--validation_seeds", type=int, default=2)
  p.add_argument("--validation_steps", type=int, default=50_000)


def _compare_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--compare_seeds", type=int, default=5)
  p.add_argument("--compare_steps", type=int, default=100_000)
  p.add_argument("--tune_seeds", type=int, default=2)
  p.add_argument("--shards", type=int, default=2)
  # DPO and PPO (tuned) only, while the rules still train: a later
  # comparison reuses their finished runs.
  p.add_argument("--baselines_only", action="store_true")


def _shared_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--root", required=True)
  p.add_argument("--student_hidden", type=int, default=16)


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, _run_flags),
          distill=cli.Command(distill),
          compare=cli.Command(compare, _compare_flags),
          report=cli.Command(
              report,
              lambda p: p.add_argument(
                  "--out", default="benchmarks/results/lpo_discovery"
              ),
          ),
      ),
      shared=_shared_flags,
      all_steps=("run", "distill", "compare", "report"),
      argv=argv,
  )


if __name__ == "__main__":
  main()
