r"""Disco103 distilled into smaller meta-networks: agreement, returns, speed (issue 48).

  python benchmarks/distillation.py all --root /work/runs/distill \
      --students h64,h32,flat_h64_t256 --out benchmarks/results/distillation

``all`` runs the steps below in turn; each is a command of its own too
(``distill``, ``compare``, ``suite``, ``speed``, ``report``, all with
``--root``), and each skips what is finished, so the command resumes after a
kill.

``distill`` runs ``disco-distill`` once per student of ``--students``
(``h<H>``: Disco103's agent, a per-trajectory LSTM of ``H`` units;
``flat_h<H>``: the same with a flat agent, ``student_agent='flat'``;
``..._t<W>``: agents with a torso of two ``W``-unit layers; every student
has no per-lifetime LSTM and reads its lifetime instead) into
``<root>/<student>``, all sharing one dataset in ``<root>/dataset``:
Disco103's agents on ``TRAIN`` and, held out, ``HELD_OUT`` (``--seeds``
agents each, ``--steps`` env steps, 8 batches kept per agent),
``--fit_steps`` fitting steps; students named ``..._minatar`` share
``<root>/dataset_minatar`` instead: Disco103's agents trained as ``suite``
trains them (the convolutional torso, the suite's loop) on
``MINATAR_TRAIN`` and, held out, ``MINATAR_HELD_OUT``. The students' files
go to ``<root>/rules/student_<student>.npz``.

``compare`` runs ``disco-compare`` of Disco103, the students of
``--compare_students`` and the controls of ``--controls`` (Disco103 with
agents of a ``W``-unit torso, ``disco103_t<W>``) on ``COMPARE`` (``--compare_seeds`` seeds,
``--compare_steps`` env steps, every rule in Disco103's loop) into
``<root>/<compare_out>`` (``compare`` by default). ``report`` reads every
folder of ``--compare_out`` (comma-separated) and sets each student's return
against the Disco103 of its own comparison.

``speed`` times learner steps of every rule (the controls too) on Catch 8x8 with the published
evaluation loop, interleaved (``--rounds`` rounds of one compiled call of
``--iterations`` iterations each), alone on the machine, into
``<root>/speed.json``.

``suite_speed`` (not part of ``all``) times learner steps of the rules
``suite`` trains (Disco103, the controls, the students of
``--suite_students``) on ``--speed_env`` (one of the suite's environments)
as ``suite`` trains them, interleaved the same way, alone on the machine,
into ``<root>/suite_speed_<env>.json``.

``meta_speed`` (not part of ``all``) times meta-steps at the published
meta-training settings (``configs/meta_train.py``) with Disco103's
meta-network and each student's, interleaved (``--rounds``), alone on the
machine, into ``<root>/meta_speed.json``.

``suite`` trains Disco103, the controls and the students of
``--suite_students`` on ``SUITE_ENVS`` (``--suite_envs``) as the
environment suite does (``env_suite.py``: its budgets times
``--suite_budget_scale``, its torsos: convolutional on the MinAtar games,
flat elsewhere, whatever a rule file's own; ``--suite_seeds``
seeds from 0, every rule in the replay loop with learner batches of 8,
``suite_settings.LOOPS['replay_batch8']``, ``env_suite.run``) into
``<root>/suite/<rule>/<env>``; finished runs are kept. It then writes to
``--out`` ``suite.md`` (per environment and rule: how many times fewer
meta-parameters than Disco103, final return with its interval and per
seed, the return normalised between a uniform random policy (0) and
Disco103 (1) with its interval, none where Disco103 is not above random,
P(rule > Disco103), learner steps/s where ``suite_speed`` timed the
environment), ``suite_curves_<env>.png`` and, for the timed environments,
``suite_tradeoff.png`` (speed against normalised return). A student's
file comes from ``<root>/rules``, else from ``KEPT_RULES`` (the files kept
in the repository).

``suite_agreement`` (not part of ``all``) measures the students of
``--suite_students`` against Disco103 on the inputs of agents trained as
``suite`` trains them: Disco103's agents (its network with the suite's
convolutional torso, the suite's loop) on each of ``--suite_envs``,
``--seeds`` agents of ``--steps`` env steps (seeds from 1000, apart from
the suite's), 8 learner batches kept per agent, into
``<root>/suite_dataset/<env>`` (kept, reused); then each student's (and an
untrained student's) top-1 policy agreement and KL per head there, into
``--out``/``suite_agreement.csv``.

``report`` writes to ``--out``: ``agreement.csv`` (every student, split and
environment), ``fit_<student>.csv``, ``table.md`` (parameters, agreement, final
returns with their interval, the return relative to Disco103's, learner
steps/s against Disco103's), ``tradeoff.png`` (meta-parameters against
learner steps/s, each rule labelled with its agreement and return) and the
comparison's report and figures.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
import re
import shutil
import subprocess
import sys

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_runs
from benchmarks import suite_settings
from benchmarks import timing

TRAIN = ("catch", "lpg/dense")
HELD_OUT = ("catch:rows=8,columns=8",)
COMPARE = ("catch:rows=8,columns=8",)
TEACHER = "disco103"
# Students' rule files kept in the repository (``suite`` uses them where
# ``<root>/rules`` has none, so that it needs no ``distill`` first).
KEPT_RULES = Path(__file__).resolve().parent / "results/distillation/rules"
# The suite's environments where Disco103 learns with a replay
# (docs/results/learning.md), and the loop it learns them with.
SUITE_ENVS = (
    "gymnax/Breakout-MinAtar",
    "gymnax/SpaceInvaders-MinAtar",
    "lpg/dense",
)
SUITE_LOOP = "replay_batch8"
# Students named ``..._minatar`` are fitted on Disco103's agents on these
# games instead, as the suite trains them (its torso and loop).
MINATAR_SUFFIX = "_minatar"
MINATAR_TRAIN = ("gymnax/Breakout-MinAtar", "gymnax/SpaceInvaders-MinAtar")
MINATAR_HELD_OUT = ("gymnax/Asterix-MinAtar",)


def _student_file(root: Path, student: str) -> Path:
  return root / "rules" / f"student_{student}.npz"


def _students(names: str) -> dict[str, list[str]]:
  """Student names -> their ``disco-distill`` flags: ``[flat_]h<H>[_t<W>]``,
  a per-trajectory LSTM of ``H`` units, with ``flat_`` a flat agent, with
  ``_t<W>`` a torso of two dense layers of ``W`` units."""
  students = {}
  for name in filter(None, names.split(",")):
    found = re.fullmatch(
        rf"(flat_)?h(\d+)(?:_t(\d+))?(?:{MINATAR_SUFFIX})?", name.strip()
    )
    if not found:
      cli.usage_error(
          f"student {name!r}: give h<units>, flat_h<units> or either with "
          f"_t<torso units>, then optionally {MINATAR_SUFFIX}"
      )
    flat, hidden, torso = found.groups()
    flags = [
        f"--config.student.hidden_size={hidden}",
        f"--config.student_agent={'flat' if flat else 'teacher'}",
    ]
    if torso:
      flags.append(f"--config.student_torso=({torso}, {torso})")
    students[name.strip()] = flags
  return students


def _data_flags(root: Path, name: str) -> list[str]:
  """The teacher and data of a student: Disco103 on ``TRAIN`` (held out
  ``HELD_OUT``) with its published loop, into ``<root>/dataset``; for a
  ``..._minatar`` student, Disco103 with the suite's convolutional torso on
  ``MINATAR_TRAIN`` (held out ``MINATAR_HELD_OUT``) with the suite's loop,
  into ``<root>/dataset_minatar``."""
  if not name.endswith(MINATAR_SUFFIX):
    return [
        f"--config.teacher={TEACHER}",
        f"--config.envs={TRAIN!r}",
        f"--config.held_out_envs={HELD_OUT!r}",
        f"--config.dataset.folder={root / 'dataset'}",
    ]
  (conv,) = {
      tuple(suite_settings.suite_entry(env)[3])
      for env in (*MINATAR_TRAIN, *MINATAR_HELD_OUT)
  }
  teacher = _teacher_variant(
      root, f"{TEACHER}_conv{'_'.join(map(str, conv))}", conv_channels=conv
  )
  loop = suite_settings.LOOPS[SUITE_LOOP]
  return [
      f"--config.teacher={teacher}",
      f"--config.envs={MINATAR_TRAIN!r}",
      f"--config.held_out_envs={MINATAR_HELD_OUT!r}",
      f"--config.dataset.folder={root / 'dataset_minatar'}",
      *(f"--config.dataset.{k}={v}" for k, v in loop.items()),
  ]


def distill(args) -> None:
  root = Path(args.root)
  for name, flags in _students(args.students).items():
    out = root / name
    if not (out / "summary.json").is_file():
      command = [
          sys.executable,
          "-m",
          "disco.launch.distill",
          *flags,
          *_data_flags(root, name),
          f"--config.dataset.num_seeds={args.seeds}",
          f"--config.dataset.total_env_steps={args.steps}",
          f"--config.fit.steps={args.fit_steps}",
          f"--config.output_dir={out}",
      ]
      print(" ".join(command[2:]), flush=True)
      subprocess.run(command, check=True)
    target = _student_file(root, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "student.npz", target)


def _control_file(root: Path, torso: int) -> Path:
  """Disco103 with agents of a smaller torso (two ``torso``-unit layers):
  the control that tells a flat student's speed and returns from those of
  its torso alone."""
  return _teacher_variant(root, _control_name(torso), dense=(torso, torso))


def _with_network(teacher, **network):
  """``teacher`` (a resolved rule) with a copy of its agent settings whose
  network settings are ``network`` over its own."""
  settings = teacher.settings.replace(
      network=dict(teacher.settings.network, **network)
  )
  return dataclasses.replace(teacher, settings=settings)


def _teacher_variant(root: Path, name: str, **network) -> Path:
  """Disco103's meta-parameters in a rule file whose agents' network
  settings are ``network`` over Disco103's. Written once, into
  ``<root>/rules/<name>.npz``."""
  from disco.distillation import outputs  # pylint: disable=g-import-not-at-top
  from disco.meta import rule_files  # pylint: disable=g-import-not-at-top
  from disco.update_rules import resolve  # pylint: disable=g-import-not-at-top

  path = root / "rules" / f"{name}.npz"
  if not path.is_file():
    teacher = _with_network(resolve.resolve_rule(TEACHER), **network)
    path.parent.mkdir(parents=True, exist_ok=True)
    rule_files.export_meta_params(
        path,
        teacher.meta_params,
        teacher.settings,
        meta_step=0,
        with_network=True,
        licence=outputs.DISCO103_TERMS,
    )
  return path


def _controls(args) -> list[int]:
  return [int(t) for t in args.controls.split(",") if t]


def _control_name(torso: int) -> str:
  """A control's name: its file's stem, its label in speed and reports."""
  return f"{TEACHER}_t{torso}"


def _held_out_agreement(run: Path) -> dict[str, str]:
  """The student's agreement row on the held-out environment."""
  return next(
      r
      for r in _read_csv(run / "agreement.csv")
      if r["split"] == "held_out" and r["who"] == "student"
  )


def compare(args) -> None:
  root = Path(args.root)
  files = [_student_file(root, s) for s in _students(args.compare_students)]
  missing = [str(f) for f in files if not f.is_file()]
  if missing:
    cli.usage_error(f"missing rule files {missing}: run `distill` first")
  files += [_control_file(root, t) for t in _controls(args)]
  command = [
      sys.executable,
      "-m",
      "disco.launch.compare",
      f"--config.rules={(TEACHER, *map(str, files))!r}",
      f"--config.envs={COMPARE!r}",
      f"--config.num_seeds={args.compare_seeds}",
      f"--config.total_env_steps={args.compare_steps}",
      "--config.last_episodes=500",
      f"--config.output_dir={_compared(args)[0]}",
  ]
  print(" ".join(command[2:]), flush=True)
  meta_runs.run_compare(command, 1)


def _compared(args) -> list[Path]:
  """The comparison folders, the one ``compare`` writes first."""
  return [Path(args.root) / f for f in args.compare_out.split(",")]


def speed(args) -> None:
  """Learner steps/s of every rule on Catch 8x8 with the published loop,
  interleaved, in this process."""
  from disco import evaluation  # pylint: disable=g-import-not-at-top

  root = Path(args.root)
  rules = {TEACHER: TEACHER}
  rules.update(
      {s: str(_student_file(root, s)) for s in _students(args.students)}
  )
  rules.update(
      {_control_name(t): str(_control_file(root, t)) for t in _controls(args)}
  )
  configs = {
      name: evaluation.make_config(
          rule=rule,
          env_settings=dict(rows=8, columns=8),
          iterations_per_call=args.iterations,
          total_env_steps=10**6,
          output_dir=str(root / "speed-scratch"),
          overwrite=True,
      )
      for name, rule in rules.items()
  }
  _time_learner_steps(configs, args, root / "speed.json")


def suite_speed(args) -> None:
  """Learner steps/s of the rules ``suite`` trains on ``--speed_env`` as
  ``suite`` trains them (its torso and loop), interleaved, in this
  process."""
  from benchmarks import env_suite  # pylint: disable=g-import-not-at-top

  root = Path(args.root)
  env, settings, _, conv = suite_settings.suite_entry(args.speed_env)
  configs = {}
  for label, rule in _suite_rules(args).items():
    config = env_suite.run_config(
        rule,
        env,
        settings,
        10**6,
        conv,
        1,
        root / "speed-scratch",
        loop=suite_settings.LOOPS[SUITE_LOOP],
    )
    config.iterations_per_call = args.iterations
    configs[label] = config
  slug = suite_settings.slug(env)
  _time_learner_steps(configs, args, root / f"suite_speed_{slug}.json")


def _time_learner_steps(configs: dict, args, path: Path) -> None:
  """Times ``--rounds`` interleaved calls of ``--iterations`` iterations of
  each config's loop (after one call that fills its replay, so that every
  timed iteration learns) and writes each rule's learner steps/s and its
  speed against Disco103's to ``path``."""
  from disco import evaluation  # pylint: disable=g-import-not-at-top

  candidates, steps = {}, {}
  for name, config in configs.items():
    plan = evaluation.build(config, log=lambda _: None)
    states = plan.loop.init_seeds(plan.seeds)
    states, _ = plan.loop.run(states, plan.rule.meta_params, args.iterations)
    steps[name] = (
        args.iterations * plan.loop_config.updates_per_learning_iteration
    )
    candidates[name] = timing.Stepper(
        lambda s, plan=plan: plan.loop.run(
            s, plan.rule.meta_params, args.iterations
        )[0],
        states,
    )
  times = timing.interleave(candidates, args.rounds, warmup=1)
  figures = {
      name: dict(
          learner_steps_per_s=steps[name] / times.median(name),
          ratio_to_teacher=times.median(TEACHER) / times.median(name),
          seconds=times.rounds[name],
      )
      for name in candidates
  }
  path.write_text(json.dumps(figures, indent=1))
  for name, f in figures.items():
    print(
        f"{name}: {f['learner_steps_per_s']:.2f} learner steps/s, "
        f"{f['ratio_to_teacher']:.3f}x Disco103's"
    )


def meta_speed(args) -> None:
  """Seconds per meta-step at the published meta-training settings with
  Disco103's meta-network and each student's (and a student's agent: flat,
  or of its own torso), interleaved, in this process."""
  from disco import weights  # pylint: disable=g-import-not-at-top
  from disco.meta import trainer  # pylint: disable=g-import-not-at-top

  root = Path(args.root)
  rules = {TEACHER: (None, None)}
  for s in _students(args.students):
    metadata = weights.NpzFile(_student_file(root, s)).metadata()
    network = (metadata.get("settings") or {}).get("network") or {}
    rules[s] = (metadata["rule_kwargs"], network.get("dense"))
  candidates = {}
  for name, (kwargs, torso) in rules.items():
    config = trainer.default_config()
    config.output_dir = str(root / "meta-speed-scratch" / name)
    if kwargs is not None:
      config.rule_kwargs = kwargs
    if torso is not None:
      config.agent.network.dense = tuple(torso)
    plan = trainer.build(config)
    candidates[name] = timing.Stepper(
        plan.population.step, trainer.initial_state(plan), logs=True
    )
  times = timing.interleave(candidates, args.rounds, warmup=1)
  figures = {
      name: dict(
          seconds_per_meta_step=times.median(name),
          ratio_to_teacher=times.median(TEACHER) / times.median(name),
          seconds=times.rounds[name],
      )
      for name in candidates
  }
  (root / "meta_speed.json").write_text(json.dumps(figures, indent=1))
  for name, f in figures.items():
    print(
        f"{name}: {f['seconds_per_meta_step']:.3f} s per meta-step, "
        f"{f['ratio_to_teacher']:.3f}x Disco103's speed"
    )


def _suite_student_files(args) -> dict[str, str]:
  """Student -> its rule file, for the students of ``--suite_students``:
  from ``<root>/rules``, else from ``KEPT_RULES``."""
  root = Path(args.root)
  files = {}
  for s in _students(args.suite_students):
    path = _student_file(root, s)
    if not path.is_file():
      path = KEPT_RULES / path.name
    if not path.is_file():
      cli.usage_error(
          f"no rule file for student {s} in {root / 'rules'} or {KEPT_RULES}:"
          " run `distill` first"
      )
    files[s] = str(path)
  return files


def _suite_rules(args) -> dict[str, str]:
  """Label -> rule (name or file) of every rule ``suite`` trains."""
  root = Path(args.root)
  rules = {TEACHER: TEACHER}
  rules.update(
      {_control_name(t): str(_control_file(root, t)) for t in _controls(args)}
  )
  rules.update(_suite_student_files(args))
  return rules


def _suite_envs(args) -> list[tuple[str, dict, int, tuple]]:
  """The suite's entries of ``--suite_envs``, every one checked before any
  runs."""
  return [suite_settings.suite_entry(e) for e in args.suite_envs.split(",")]


def _suite_folder(root: Path, label: str, env: str) -> Path:
  return root / "suite" / label / suite_settings.slug(env)


def suite(args) -> None:
  from benchmarks import env_suite  # pylint: disable=g-import-not-at-top

  root = Path(args.root)
  rules = _suite_rules(args)
  for env, settings, budget, conv in _suite_envs(args):
    for label, rule in rules.items():
      folder = _suite_folder(root, label, env)
      print(f"suite: {label} on {env} -> {folder}", flush=True)
      env_suite.run(
          rule,
          env,
          settings,
          int(budget * args.suite_budget_scale),
          conv,
          args.suite_seeds,
          root / "suite",
          loop=suite_settings.LOOPS[SUITE_LOOP],
          folder=folder,
      )
  _suite_report(args, Path(args.out))


def suite_agreement(args) -> None:
  """The students' agreement with Disco103 on the inputs of the suite's
  agents (module docstring)."""
  import jax  # pylint: disable=g-import-not-at-top

  from disco.distillation import dataset as dataset_lib  # pylint: disable=g-import-not-at-top
  from disco.distillation import fitting  # pylint: disable=g-import-not-at-top
  from disco.distillation import settings as distill_settings  # pylint: disable=g-import-not-at-top
  from disco.update_rules import resolve  # pylint: disable=g-import-not-at-top

  root, out = Path(args.root), Path(args.out)
  students = {
      s: resolve.resolve_rule(f) for s, f in _suite_student_files(args).items()
  }
  teacher = resolve.resolve_rule(TEACHER)
  base = distill_settings.DistillSettings.from_config(
      distill_settings.make_config(teacher=TEACHER)
  )
  rows = []
  for env, env_settings, _, conv in _suite_envs(args):
    gather = dataclasses.replace(
        base,
        envs=(),
        held_out_envs=((env, env_settings),),
        dataset=dataclasses.replace(
            base.dataset,
            num_seeds=args.seeds,
            total_env_steps=args.steps,
            loop=suite_settings.LOOPS[SUITE_LOOP],
        ),
    )
    (shard,) = dataset_lib.gather(
        gather,
        _with_network(teacher, conv_channels=tuple(conv)),
        root / "suite_dataset" / suite_settings.slug(env),
    )
    for label, student in students.items():
      pair = fitting.Pair(shard, teacher.meta_params, student.rule)
      untrained = student.rule.init_meta_params(jax.random.PRNGKey(0))
      measured = fitting.agreement(
          pair, dict(student=student.meta_params, untrained=untrained)
      )
      for who, figures in measured.items():
        rows.append(
            dict(
                env=env,
                student=label,
                who=who,
                samples=shard.num_samples,
                **figures,
            )
        )
        print(
            f"{env} {label} ({who}): top-1 {figures['pi_top1']:.3f}, "
            f"pi KL {figures['pi_kl']:.4f}, y KL {figures['y_kl']:.4f}",
            flush=True,
        )
  out.mkdir(parents=True, exist_ok=True)
  columns = list(dict.fromkeys(k for row in rows for k in row))
  cli.write_csv(out / "suite_agreement.csv", rows, columns)


def normalised_interval(
    scores: np.ndarray,
    teacher: np.ndarray,
    floor: float,
    reps: int = 4000,
    seed: int = 0,
) -> tuple[float, float, float] | None:
  """``(mean(scores) - floor) / (mean(teacher) - floor)`` and its 95%
  percentile-bootstrap interval, both rules' seeds resampled independently;
  ``None`` where Disco103 is not above random (the lower end of its mean's
  interval at or below ``floor``), where the ratio means nothing.

  Args:
    scores: ``[S]`` a rule's final returns.
    teacher: ``[S']`` Disco103's final returns.
    floor: the return normalised to 0 (a uniform random policy's).
  """
  rng = np.random.default_rng(seed)
  scores, teacher = np.asarray(scores), np.asarray(teacher)
  a = rng.choice(scores, (reps, scores.size)).mean(1)
  b = rng.choice(teacher, (reps, teacher.size)).mean(1)
  if np.percentile(b, 2.5) <= floor:
    return None
  ratios = (a - floor) / (b - floor)
  point = (scores.mean() - floor) / (teacher.mean() - floor)
  low, high = np.percentile(ratios, [2.5, 97.5])
  return float(point), float(low), float(high)


def _normalised_cell(interval: tuple[float, float, float] | None) -> str:
  if interval is None:
    return "- (Disco103 not above random)"
  return "{:.2f} [{:.2f}, {:.2f}]".format(*interval)


def _suite_report(args, out: Path) -> None:
  """``suite.md``, the curves of every environment with runs and, where
  ``suite_speed`` timed an environment, ``suite_tradeoff.png``, into
  ``out``."""
  from benchmarks import env_suite  # pylint: disable=g-import-not-at-top
  from disco.comparison import results  # pylint: disable=g-import-not-at-top
  from disco.scoring import aggregates  # pylint: disable=g-import-not-at-top
  from disco.training import analysis  # pylint: disable=g-import-not-at-top

  root = Path(args.root)
  rules = _suite_rules(args)
  sizes = {label: _meta_param_count(rule) for label, rule in rules.items()}
  rows, tradeoff = [], {}
  for env, settings, budget, _ in _suite_envs(args):
    runs = {
        label: results.load_run(_suite_folder(root, label, env))
        for label in rules
        if (_suite_folder(root, label, env) / results.SUMMARY).is_file()
    }
    if TEACHER not in runs:
      continue
    speed_file = root / f"suite_speed_{suite_settings.slug(env)}.json"
    speeds = json.loads(speed_file.read_text()) if speed_file.is_file() else {}
    floor = env_suite.random_return(env, settings, 5000)
    teacher = runs[TEACHER].final_scores()
    for label, run in runs.items():
      scores = run.final_scores()
      ci = analysis.bootstrap_ci(scores) or (np.nan, np.nan)
      improvement = aggregates.probability_of_improvement(
          {label: scores[:, None], TEACHER: teacher[:, None]},
          pairs=[(label, TEACHER)],
      )[(label, TEACHER)].probability
      normalised = normalised_interval(scores, teacher, floor)
      if label in speeds and normalised:
        tradeoff.setdefault(env, []).append(
            (label, speeds[label]["ratio_to_teacher"], normalised)
        )
      rows.append(
          cli.table_row(
              [
                  env,
                  f"{int(budget * args.suite_budget_scale):,}",
                  label,
                  f"{sizes[TEACHER] / sizes[label]:.1f}x",
                  f"{scores.mean():.2f} [{ci[0]:.2f}, {ci[1]:.2f}]",
                  ", ".join(f"{x:.2f}" for x in scores),
                  _normalised_cell(normalised),
                  "-" if label == TEACHER else str(improvement),
                  f"{floor:.2f}",
                  _speed(speeds, label) if speeds else "not timed",
              ]
          )
      )
    analysis.plot_learning_curves(
        {label: run.metrics for label, run in runs.items()},
        path=out / f"suite_curves_{suite_settings.slug(env)}.png",
        min_episodes=results.CURVE_EPISODES,
        title=f"{env} ({args.suite_seeds} seeds)",
    )
  if rows:
    header = cli.table_header(
        [
            "environment",
            "env steps per seed",
            "rule",
            "fewer meta-parameters than Disco103",
            "final return (95% CI)",
            "per seed",
            "of Disco103's (random 0, Disco103 1)",
            "P(rule > Disco103)",
            "uniform random",
            "learner steps/s (vs Disco103)",
        ]
    )
    (out / "suite.md").write_text("\n".join([header, *rows]) + "\n")
  if tradeoff:
    _plot_suite_tradeoff(tradeoff, sizes, out / "suite_tradeoff.png")


def _plot_suite_tradeoff(
    tradeoff: dict[str, list[tuple[str, float, tuple[float, float, float]]]],
    sizes: dict[str, int],
    path: Path,
) -> None:
  """Per environment, each rule's learner steps/s against Disco103's (x)
  and its normalised return with its interval (y), labelled with how many
  times fewer meta-parameters it has; the targets' lines (1.5x speed, 90%
  and 95% of the return) dashed."""
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(
      1, len(tradeoff), figsize=(5 * len(tradeoff), 4), squeeze=False
  )
  for ax, (env, points) in zip(axes[0], tradeoff.items(), strict=True):
    for label, ratio, (point, low, high) in points:
      ax.errorbar(
          ratio, point, yerr=[[point - low], [high - point]], fmt="o", capsize=3
      )
      fewer = sizes[TEACHER] / sizes[label]
      ax.annotate(
          f"{label} ({fewer:.0f}x fewer)" if fewer > 1.5 else label,
          (ratio, point),
          textcoords="offset points",
          xytext=(5, 5),
          fontsize=8,
      )
    for level in (0.9, 0.95):
      ax.axhline(level, color="grey", lw=0.5, ls="--")
    ax.axvline(1.5, color="grey", lw=0.5, ls="--")
    ax.margins(x=0.35)
    ax.set_title(env)
    ax.set_xlabel("learner steps/s, relative to Disco103")
    ax.set_ylabel("normalised return (random 0, Disco103 1)")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _meta_param_count(rule: str) -> int:
  """The number of meta-parameters of ``rule`` (a name or a file)."""
  import jax  # pylint: disable=g-import-not-at-top

  from disco.update_rules import resolve  # pylint: disable=g-import-not-at-top

  params = resolve.resolve_rule(rule).meta_params
  return sum(x.size for x in jax.tree.leaves(params))


def _read_csv(path: Path) -> list[dict[str, str]]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def report(args) -> None:
  root, out = Path(args.root), Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  teacher_size = _meta_param_count(TEACHER)
  rows, table = [], []
  speed_figures = {}
  if (root / "speed.json").is_file():
    speed_figures = json.loads((root / "speed.json").read_text())
  comparisons = [_final_returns(folder) for folder in _compared(args)]
  # A student's return, and Disco103's in the same comparison.
  finals = {}
  for found in reversed(comparisons):
    finals.update({k: (v, found.get(TEACHER)) for k, v in found.items()})
  for name in _students(args.students):
    run = root / name
    summary = json.loads((run / "summary.json").read_text())
    for row in _read_csv(run / "agreement.csv"):
      rows.append(dict(student=name, **row))
    shutil.copyfile(run / "fit.csv", out / f"fit_{name}.csv")
    held = _held_out_agreement(run)
    final, its_teacher = finals.get(
        _student_file(root, name).stem, (None, None)
    )
    table.append(
        cli.table_row(
            [
                name,
                f"{summary['student_meta_params']:,}",
                f"{summary['teacher_meta_params'] / summary['student_meta_params']:.1f}x",
                f"{float(held['pi_top1']):.3f}",
                f"{float(held['pi_kl']):.4f}",
                _fmt_final(final),
                _relative(final, its_teacher),
                _speed(speed_figures, name),
            ]
        )
    )
  if rows:
    cli.write_csv(out / "agreement.csv", rows)
  header = cli.table_header(
      [
          "student",
          "meta-parameters",
          "fewer than Disco103",
          "held-out top-1",
          "held-out pi KL",
          "final return (95% CI)",
          "of Disco103's",
          "learner steps/s vs Disco103",
      ]
  )
  # Disco103's row, once per comparison (each has its own seeds).
  teacher_rows = [
      cli.table_row(
          [
              "Disco103"
              + (f" ({folder.name})" if len(comparisons) > 1 else ""),
              f"{teacher_size:,}",
              "1x",
              "1",
              "0",
              _fmt_final(found.get(TEACHER)),
              "1",
              _speed(speed_figures, TEACHER),
          ]
      )
      for folder, found in zip(_compared(args), comparisons, strict=True)
  ]
  controls = []
  for torso in _controls(args):
    name = _control_name(torso)
    final, its_teacher = finals.get(name, (None, None))
    controls.append(
        cli.table_row(
            [
                f"Disco103, torso ({torso}, {torso})",
                f"{teacher_size:,}",
                "1x",
                "1",
                "0",
                _fmt_final(final),
                _relative(final, its_teacher),
                _speed(speed_figures, name),
            ]
        )
    )
  cli.write_table(
      out, "\n".join([header, *teacher_rows, *controls, *table]) + "\n"
  )
  _plot_tradeoff(
      root,
      args,
      speed_figures,
      {k: v[0] for k, v in finals.items()},
      teacher_size,
      out / "tradeoff.png",
  )
  for folder in _compared(args):
    if folder.is_dir():
      meta_runs.copy_comparison(folder, out, f"{folder.name}_")


def _plot_tradeoff(
    root, args, speed_figures, finals, teacher_size, path
) -> None:
  """Meta-parameters against learner steps/s (relative to Disco103's),
  each point labelled with its held-out top-1 agreement and final return."""
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  points = [(TEACHER, teacher_size, TEACHER, "top-1 1")]
  points += [
      (_control_name(t), teacher_size, _control_name(t), "top-1 1")
      for t in _controls(args)
  ]
  for name in _students(args.students):
    summary = json.loads((root / name / "summary.json").read_text())
    held = _held_out_agreement(root / name)
    points.append(
        (
            name,
            summary["student_meta_params"],
            _student_file(root, name).stem,
            f"top-1 {float(held['pi_top1']):.3f}",
        )
    )
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, size, label, agreement in points:
    if name not in speed_figures:
      continue
    ratio = speed_figures[name]["ratio_to_teacher"]
    final = finals.get(label)
    text = f"{name}\n{agreement}" + (
        f"\nreturn {final[0]:.2f}" if final else ""
    )
    ax.scatter(size, ratio)
    ax.annotate(text, (size, ratio), textcoords="offset points", xytext=(5, 5))
  ax.set_xscale("log")
  ax.set_xlabel("meta-parameters")
  ax.set_ylabel("learner steps/s, relative to Disco103")
  ax.axhline(1.5, color="grey", lw=0.5, ls="--")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _final_returns(compared: Path) -> dict[str, tuple[float, float, float]]:
  """Rule label -> (mean final return, CI low, CI high) from the
  comparison's summaries."""
  finals = {}
  for summary in compared.glob("runs/*/*/summary.json"):
    data = json.loads(summary.read_text())
    ci = data.get("final_return_ci") or (float("nan"), float("nan"))
    finals[summary.parent.parent.name] = (
        data["final_return_mean"],
        ci[0],
        ci[1],
    )
  return finals


def _fmt_final(final) -> str:
  if final is None:
    return "not run"
  return f"{final[0]:.3f} [{final[1]:.3f}, {final[2]:.3f}]"


def _relative(final, teacher) -> str:
  if final is None or teacher is None:
    return "not run"
  return f"{final[0] / teacher[0]:.3f}"


def _speed(figures, name: str) -> str:
  if name not in figures:
    return "not run"
  f = figures[name]
  return f"{f['learner_steps_per_s']:.2f} ({f['ratio_to_teacher']:.3f}x)"


def _shared(p) -> None:
  p.add_argument("--root", required=True)
  # Disco103 with agents of these torso widths (comma-separated; '' none):
  # compared and timed beside the students.
  p.add_argument("--controls", default="256")
  # Comparison folders under --root (comma-separated; compare writes the
  # first, report reads them all).
  p.add_argument("--compare_out", default="compare")
  p.add_argument("--students", default="h64,h32,flat_h64_t256")
  # Where ``report`` and ``suite`` write their tables and figures.
  p.add_argument("--out", default="benchmarks/results/distillation")
  # ``suite``: its students, environments, seeds and budgets.
  p.add_argument("--suite_students", default="flat_h64_t256")
  p.add_argument("--suite_envs", default=",".join(SUITE_ENVS))
  p.add_argument("--suite_seeds", type=int, default=3)
  p.add_argument("--suite_budget_scale", type=float, default=0.5)


def _dataset_flags(p) -> None:
  p.add_argument("--seeds", type=int, default=2)
  p.add_argument("--steps", type=int, default=40_000)


def _distill_flags(p) -> None:
  _dataset_flags(p)
  p.add_argument("--fit_steps", type=int, default=2000)


def _compare_flags(p) -> None:
  p.add_argument("--compare_students", default="h32,flat_h64_t256")
  p.add_argument("--compare_seeds", type=int, default=3)
  p.add_argument("--compare_steps", type=int, default=40_000)


def _speed_flags(p) -> None:
  p.add_argument("--iterations", type=int, default=50)
  p.add_argument("--rounds", type=int, default=3)


def _suite_speed_flags(p) -> None:
  _speed_flags(p)
  p.add_argument("--speed_env", default=SUITE_ENVS[0])


def main() -> None:
  cli.run_commands(
      __doc__,
      {
          "distill": cli.Command(distill, _distill_flags),
          "compare": cli.Command(compare, _compare_flags),
          "suite": cli.Command(suite),
          "suite_agreement": cli.Command(suite_agreement, _dataset_flags),
          "speed": cli.Command(speed, _speed_flags),
          "suite_speed": cli.Command(suite_speed, _suite_speed_flags),
          "meta_speed": cli.Command(
              meta_speed,
              lambda p: p.add_argument("--rounds", type=int, default=5),
          ),
          "report": cli.Command(report),
      },
      shared=_shared,
      all_steps=("distill", "compare", "suite", "speed", "report"),
  )


if __name__ == "__main__":
  main()
