"""Writes ``colabs/distill.ipynb`` (run: ``python colabs/make_distill_notebook.py``).

Edit this script, not the ``.ipynb``, and re-run it. Its first code cell is
tagged ``parameters``: tests replace it to run the notebook at tiny sizes.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import notebook_cells

NOTEBOOK = Path(__file__).resolve().parent / "distill.ipynb"

INTRO = """\
# Distilling Disco103 into a smaller rule

A discovered rule is a meta-network; how much of it does a smaller one hold?
This notebook trains agents with **Disco103** (the teacher), keeps learner
batches of theirs, fits a **student** meta-network to the teacher's targets
(the policy target `pi` and the prediction targets `y` and `z`, compared as
the agent's own losses compare them: by their KL divergence), measures how
well the two agree on environments the student never saw, and trains agents
with the student beside agents trained by the teacher.

The student keeps the teacher's inputs, losses and agent; its meta-network
is smaller: an LSTM of `student_hidden_size` units (Disco103: 256) and no
per-lifetime LSTM, reading its progress through its lifetime as two inputs
instead. With `student_agent = 'flat'` the student's agents drop Disco103's
action-conditional model (no `z` or `aux_pi`; their per-action values `q`
come from a linear head); the student then reads the teacher's inputs
without `z` and learns the `pi` and `y` targets.

The same from the command line: `disco-distill` (see `configs/distill.py`);
its student file then trains agents with
`disco-eval --config.rule=OUTPUT_DIR/student.npz`."""

PARAMETERS = """\
# Settings (this cell is tagged `parameters`: tools may replace it).
teacher = 'disco103'  # or the path of a Disco rule file
student_hidden_size = 32
student_agent = 'teacher'  # or 'flat': agents without the action model
envs = ('catch',)  # the agents whose batches the student is fitted to
held_out_envs = ('catch:rows=8,columns=8',)  # agreement only
num_seeds = 2  # agents per environment
total_env_steps = 40_000  # each agent's lifetime
samples_per_seed = 8  # learner batches kept per agent
loop = {}  # the gathering runs' loop (num_envs, rollout_len, ...)
fit_steps = 2000
log_every = 100
output_dir = 'runs/distill-notebook'  # a finished run is read back
# Agents trained by teacher and student on a held-out Catch:
eval_rows, eval_columns = 8, 8
eval_env_steps = 40_000
eval_seeds = 2
eval_loop = {}  # e.g. num_envs, rollout_len, batch_size, ..."""

IMPORTS = """\
import csv
import json
from pathlib import Path

import jax
from matplotlib import pyplot as plt

from disco import distillation
from disco import evaluation
from disco.training import analysis

print('JAX devices:', jax.devices())"""

DISTILL_MD = """\
## Gather, fit, measure, export

`distillation.distill` does it all into `output_dir`: the dataset
(`dataset/`, one file per environment, reused if the run stops and starts
again), the fit (`fit.csv`), the agreement (`agreement.csv`) and the student
as a rule file (`student.npz`). A folder that holds a finished run is read
back instead of trained again."""

DISTILL = """\
out = Path(output_dir)
if (out / 'summary.json').exists():
  summary = json.loads((out / 'summary.json').read_text())
  print(f'Read the finished run in {out}')
else:
  config = distillation.make_config(
      teacher=teacher, envs=envs, held_out_envs=held_out_envs,
      student=dict(hidden_size=student_hidden_size),
      student_agent=student_agent,
      dataset=dict(num_seeds=num_seeds, total_env_steps=total_env_steps,
                   samples_per_seed=samples_per_seed, **loop),
      fit=dict(steps=fit_steps, log_every=log_every),
      output_dir=output_dir)
  summary = distillation.distill(config)
print(f"meta-parameters: teacher {summary['teacher_meta_params']:,}, "
      f"student {summary['student_meta_params']:,}")"""

FIT_MD = """\
## The fit and the agreement

The KL from the teacher's targets to the student's per head (those the
student's agent learns), during the fit; then, per environment, the student's KL and the share of transitions
where both policy targets rank the same action first (`pi_top1`), beside an
untrained student's."""

FIT = """\
rows = list(csv.DictReader((out / 'fit.csv').open()))
steps = [int(r['step']) for r in rows]
heads = [k for k in rows[0] if k.endswith('_kl')]
for key in heads:
  plt.plot(steps, [float(r[key]) for r in rows], label=key)
plt.yscale('log')
plt.xlabel('fitting step')
plt.legend()
plt.show()
for r in csv.DictReader((out / 'agreement.csv').open()):
  print(f"{r['split']:>8} {r['env']:<24} {r['who']:<9} "
        f"top-1 {float(r['pi_top1']):.3f}  "
        + '  '.join(f"{k.replace('_kl', ' KL')} {float(r[k]):.4f}"
                    for k in heads))"""

EVAL_MD = """\
## Agents trained by the student

The student file is a rule like any other: `disco-eval` and `disco-compare`
take its path. Here agents learn a held-out Catch with each rule."""

EVAL = """\
def train(rule):
  config = evaluation.make_config(
      rule=rule, env_settings=dict(rows=eval_rows, columns=eval_columns),
      total_env_steps=eval_env_steps, num_seeds=eval_seeds, **eval_loop)
  return evaluation.run(evaluation.build(config), log=lambda _: None,
                        progress=False).metrics


results = {'teacher': train(teacher),
           'student': train(str(out / distillation.STUDENT_FILE))}
analysis.plot_learning_curves(results)
plt.show()
for label, metrics in results.items():
  s = analysis.summarize(metrics, 100)
  print(f"{label}: mean return over the last episodes "
        f"{s['final_return_mean']:.3f}")"""


def build() -> nbformat.NotebookNode:
  return notebook_cells.notebook(
      INTRO,
      PARAMETERS,
      [
          ("", IMPORTS),
          (DISTILL_MD, DISTILL),
          (FIT_MD, FIT),
          (EVAL_MD, EVAL),
      ],
  )


def main() -> None:
  notebook_cells.write(build(), NOTEBOOK)


if __name__ == "__main__":
  main()
