"""Runs the published DiscoRL meta-training notebook, for comparisons.

The published code is NOT part of this package. Given the folder of a copy of
it (``--published``: the ``disco_rl`` package and ``colabs/meta_train.ipynb``),
this script executes the notebook's own code cells in one namespace (the
package is imported from that folder only), with the notebook's settings
replaced where asked (each replaced line must match exactly once, so an
edited notebook fails loudly instead of running other settings). Two shims
make it run on JAX 0.10 without GPUs or downloads: ``jax.device_put_replicated``
(removed from JAX) is provided, and the Disco103 weights come from a local file
instead of ``wget``.

Two commands:

* ``run``: the notebook's meta-training loop for ``--steps`` meta-steps; one
  CSV row per meta-step (reward per actor step, positive/negative reward
  counts, meta-loss, norms), a resumable checkpoint every
  ``--checkpoint_every`` meta-steps, and at the end the meta-parameters in
  this package's ``.npz`` format (``disco-eval --config.rule=...``)::

    python benchmarks/published_meta_train.py --published ../published run \
        --steps 800 --seed 0 --output_dir /tmp/pub-s0

* ``fixture``: ``--steps`` consecutive meta-steps, recorded as a multi-step
  parity fixture (kind ``disco_meta_train_steps``, checked by
  ``python -m disco.parity``; the format is described in
  ``disco.parity.meta_steps.check_meta_train_steps``)::

    python benchmarks/published_meta_train.py --published ../published \
        fixture --steps 4 --small --output tests/data/meta_train_steps.npz

``--seed k`` uses key ``1 + k`` for the random meta-parameters and key
``4 + k`` for the agents and the loop (the notebook's keys are 1 and 4), the
same pairs as ``disco-meta-train --config.init_seed=1+k --config.seed=4+k``.
"""

from __future__ import annotations

import csv
from pathlib import Path
import pickle
import sys
from typing import Any

import jax
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import published_notebook as nb
from benchmarks import timing
from disco import weights as weights_lib
from disco.parity import fixtures
from disco.parity import meta_steps

NOTEBOOK = "colabs/meta_train.ipynb"
FILENAME = "<meta_train.ipynb>"
CSV_COLUMNS = (
    "meta_step",
    "rewards",
    "pos_rewards",
    "neg_rewards",
    "meta_loss",
    "meta_grad_norm",
    "meta_up_norm",
    "seconds",
)
CHECKPOINT = "checkpoint.pkl"
# Small settings at which the published code still runs (fixtures).
SMALL = dict(
    dense=(16,),
    lstm_size=8,
    head_mlp_hiddens=(8,),
    value_dense=(8, 8),
    batch_size=4,
    rollout_len=4,
    inner_steps=2,
    num_agents=2,
)
FULL = dict(
    dense=(512, 512),
    lstm_size=256,
    head_mlp_hiddens=(256,),
    value_dense=(256, 256),
    batch_size=32,
    rollout_len=16,
    inner_steps=2,
    num_agents=2,
)


def notebook_namespace(
    published: Path,
    settings: dict[str, Any],
    seed: int,
    num_steps: int,
    init: str,
    weights: Path,
) -> tuple[dict[str, Any], str, str]:
  """Executes the notebook's cells up to its config cell.

  Returns the namespace and the sources of the config and loop cells, with
  the notebook's settings replaced by ``settings`` (``FULL`` keeps them), the
  keys by ``1 + seed`` and ``4 + seed``, and the initial meta-parameters by
  Disco103 when ``init == 'disco103'``.
  """
  ns = nb.namespace(published, "published_meta_train_notebook")
  cells = nb.code_cells(published, NOTEBOOK)
  s = settings

  agent_cell = nb.cell(cells, "Configure a simple MLP agent.")
  agent_cell = nb.replace(agent_cell, "dense=(512, 512)", f"dense={s['dense']}")
  agent_cell = nb.replace(
      agent_cell,
      "head_mlp_hiddens=(256,)",
      f"head_mlp_hiddens={s['head_mlp_hiddens']}",
  )
  agent_cell = nb.replace(
      agent_cell, "lstm_size=256", f"lstm_size={s['lstm_size']}"
  )
  agent_cell = nb.replace(
      agent_cell, "jax.random.PRNGKey(1)", f"jax.random.PRNGKey({1 + seed})"
  )
  config_cell = nb.cell(cells, "Meta training config")
  for old, new in (
      ("num_steps = 800", f"num_steps = {num_steps}"),
      ("num_agents = 2", f"num_agents = {s['num_agents']}"),
      ("rollout_len = 16", f"rollout_len = {s['rollout_len']}"),
      ("num_inner_steps = 2", f"num_inner_steps = {s['inner_steps']}"),
      (
          "batch_size_per_device = 32",
          f"batch_size_per_device = {s['batch_size']}",
      ),
      ("jax.random.PRNGKey(4)", f"jax.random.PRNGKey({4 + seed})"),
      ("dense=(256, 256)", f"dense={s['value_dense']}"),
  ):
    config_cell = nb.replace(config_cell, old, new)
  if init == "disco103":
    config_cell = nb.replace(
        config_cell,
        "update_rule_params = random_update_rule_params  #",
        "update_rule_params = disco_103_params  #",
    )
  elif init != "random":
    raise nb.NotebookError(
        f"init must be 'random' or 'disco103', got {init!r}."
    )
  nb.run_cells(
      ns,
      *nb.setup_cells(cells, weights),
      agent_cell,
      nb.cell(cells, "Helper functions for interacting"),
      nb.cell(cells, "Meta training agent"),
      nb.cell(cells, "Calculate meta gradients"),
      nb.cell(cells, "Meta update step"),
      filename=FILENAME,
  )
  return ns, config_cell, nb.cell(cells, "Run meta-training")


def _unreplicate(tree):
  """Strips the notebook's leading device axis (one device)."""
  return jax.tree.map(lambda x: np.asarray(x)[0], jax.device_get(tree))


class Notebook:
  """The notebook's namespace, its meta-update observed step by step.

  ``on_step(meta_step, inputs, outputs, per_agent)`` is called after every
  meta-update with its keyword arguments and outputs (device axis kept) and,
  with ``capture_agents``, each agent's ``(meta_grads, metrics, meta_log)``
  (the notebook keeps only the last agent's logs).
  """

  def __init__(self, ns, config_cell, loop_cell, on_step, capture_agents=False):
    self.ns = ns
    self._loop_cell = loop_cell
    if capture_agents:
      self._capture_agents()
    nb.run_cells(ns, config_cell, filename=FILENAME)
    self.initial_rng = np.asarray(ns["rng"])
    update = ns["jitted_meta_update"]

    def observed(**kwargs):
      out = update(**kwargs)
      per_agent = None
      if capture_agents:
        out, per_agent = out[:5], out[5]
      on_step(int(ns["meta_step"]), kwargs, out, per_agent)
      return out

    ns["jitted_meta_update"] = observed

  def _capture_agents(self):
    """Makes ``meta_update`` also return every agent's meta-gradient and
    logs (traced values of the same program)."""
    ns, captured = self.ns, []
    calculate, meta_update = ns["calculate_meta_gradient"], ns["meta_update"]

    def calculate_and_keep(*args, **kwargs):
      grads, (state, metrics, meta_log) = calculate(*args, **kwargs)
      metrics = {k: v for k, v in metrics.items() if k != "meta_out"}
      captured.append((grads, metrics, meta_log))
      return grads, (state, metrics, meta_log)

    def meta_update_and_agents(
        update_rule_params, meta_opt_state, agents_states, rng, axis_name="i"
    ):
      captured.clear()
      out = meta_update(
          update_rule_params, meta_opt_state, agents_states, rng, axis_name
      )
      return (*out, list(captured))

    ns["calculate_meta_gradient"] = calculate_and_keep
    ns["meta_update"] = meta_update_and_agents

  def restore(self, path: Path) -> int:
    """Continues from a ``save``d state; returns the meta-steps done."""
    with open(path, "rb") as f:
      saved = pickle.load(f)
    ns = self.ns
    for name in ("update_rule_params", "meta_opt_state", "agents_states"):
      ns[name] = jax.tree.unflatten(
          jax.tree.structure(ns[name]), saved["leaves"][name]
      )
    ns["rng"], ns["metrics"], ns["meta_log"] = (
        saved["rng"],
        saved["metrics"],
        saved["meta_log"],
    )
    return len(saved["meta_log"])

  def save(self, path: Path, outputs) -> None:
    """Saves what the loop needs to continue bit for bit after a step."""
    ns = self.ns
    state = dict(
        zip(
            ("update_rule_params", "meta_opt_state", "agents_states"),
            _unreplicate(outputs[:3]),
            strict=True,
        )
    )
    saved = dict(
        leaves={k: jax.tree.leaves(v) for k, v in state.items()},
        rng=np.asarray(ns["rng"]),
        metrics=dict(ns["metrics"]),
        meta_log=dict(ns["meta_log"]),
    )
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
      pickle.dump(saved, f)
    tmp.replace(path)

  def run(self):
    nb.run_cells(self.ns, self._loop_cell, filename=FILENAME)


def _namespace(args):
  return notebook_namespace(
      Path(args.published),
      SMALL if args.small else FULL,
      args.seed,
      args.steps,
      args.init,
      Path(args.weights),
  )


# -------------------------------------------------------------------- run ----


def run(args) -> None:
  out = Path(args.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  ns, config_cell, loop_cell = _namespace(args)
  csv_path, ckpt = out / "rewards.csv", out / CHECKPOINT
  state, clock = dict(last=None), timing.Stopwatch()

  def on_step(meta_step, inputs, outputs, per_agent):
    del inputs, per_agent
    log = _unreplicate(outputs[4])
    row = dict(meta_step=meta_step + 1, seconds=clock.lap())
    row.update({k: float(log[k]) for k in CSV_COLUMNS if k in log})
    new_file = not csv_path.exists()
    with open(csv_path, "a", newline="") as f:
      writer = csv.DictWriter(f, CSV_COLUMNS)
      if new_file:
        writer.writeheader()
      writer.writerow(row)
    state["last"] = outputs
    if args.checkpoint_every and (meta_step + 1) % args.checkpoint_every == 0:
      notebook.save(ckpt, outputs)

  notebook = Notebook(ns, config_cell, loop_cell, on_step)
  done = 0
  if ckpt.exists():
    done = notebook.restore(ckpt)
    # Rows after the checkpoint are written again.
    rows = list(csv.DictReader(open(csv_path))) if csv_path.exists() else []
    with open(csv_path, "w", newline="") as f:
      writer = csv.DictWriter(f, CSV_COLUMNS)
      writer.writeheader()
      writer.writerows(r for r in rows if int(r["meta_step"]) <= done)
    print(f"resuming after meta-step {done}", flush=True)
  notebook.run()
  if state["last"] is not None:
    notebook.save(ckpt, state["last"])
  meta_params = _unreplicate(ns["step_update_rule_params"])
  _export(out / "meta_params.npz", meta_params, args)
  print(f"wrote {csv_path} and {out / 'meta_params.npz'}")


def _export(path: Path, meta_params, args) -> None:
  from disco.meta import trainer as mt
  from disco.update_rules import registry

  mt.export_meta_params(
      path,
      meta_params,
      registry.default_settings("disco"),
      args.steps,
      source="published meta-training notebook",
      init_meta_params=args.init,
      seed=args.seed,
  )


# --------------------------------------------------------------- fixture ----


def agent_layout(state) -> dict[str, Any]:
  """A notebook agent's state in the fixture's layout (``disco.parity``)."""
  learner, value, ts = (
      state.learner_state,
      state.value_state,
      state.env_timestep,
  )
  observation = ts.observation
  if isinstance(observation, dict):
    observation = observation["observation"]
  layout = dict(
      learner_params=learner.params,
      learner_opt_state_mu=learner.opt_state[0].mu,
      learner_opt_state_nu=learner.opt_state[0].nu,
      learner_opt_state_count=learner.opt_state[0].count,
      meta_state=learner.meta_state,
      value_params=value.params,
      value_opt_state_mu=value.opt_state[0].mu,
      value_opt_state_nu=value.opt_state[0].nu,
      value_opt_state_count=value.opt_state[0].count,
      value_adv_ema_state=value.adv_ema_state,
      value_td_ema_state=value.td_ema_state,
      env_game=state.env_state.state,
      env_rng=state.env_state.rng,
      timestep_observation=observation,
      timestep_reward=ts.reward,
      timestep_last=ts.step_type == 2,  # dm_env.StepType.LAST
  )
  # Flat numpy arrays: picklable without the notebook's classes.
  return fixtures.flatten_arrays(jax.device_get(layout))


def fixture(args) -> None:
  ns, config_cell, loop_cell = _namespace(args)
  steps: list[dict[str, Any]] = []

  def on_step(meta_step, inputs, outputs, per_agent):
    if not steps:
      steps.append(
          dict(
              meta_params=_unreplicate(inputs["update_rule_params"]),
              agents=[
                  agent_layout(a) for a in _unreplicate(inputs["agents_states"])
              ],
          )
      )
    grads, metrics, meta_logs = zip(*_unreplicate(per_agent), strict=True)
    steps.append(
        dict(
            key=_unreplicate(inputs["rng"]),
            meta_params=_unreplicate(outputs[0]),
            agents=[agent_layout(a) for a in _unreplicate(outputs[2])],
            log=_unreplicate(outputs[4]),
            grads=jax.tree.map(lambda *g: np.mean(g, axis=0), *grads),
            agent_logs=[
                dict(m, **{f"inner/{k}": v for k, v in t.items()})
                for m, t in zip(meta_logs, metrics, strict=True)
            ],
        )
    )
    print(f"meta-step {meta_step + 1}: {steps[-1]['log']}", flush=True)

  notebook = Notebook(ns, config_cell, loop_cell, on_step, capture_agents=True)
  notebook.run()
  recorded = dict(
      settings=dict(
          SMALL if args.small else FULL,
          rows=5,
          columns=5,
          seed=args.seed,
          init_meta_params=args.init,
          agent_learning_rate=float(ns["agent_settings"].learning_rate),
          meta_learning_rate=5e-4,
      ),
      loop_rng=notebook.initial_rng,
      initial=steps[0],
      steps=steps[1:],
  )
  if args.keep_recording:
    with open(args.keep_recording, "wb") as f:
      pickle.dump(recorded, f)
  write_fixture(recorded, Path(args.output))


def write_fixture(recorded: dict[str, Any], out: Path) -> None:
  fx = meta_steps.meta_train_steps_fixture(**recorded)
  out.parent.mkdir(parents=True, exist_ok=True)
  np.savez_compressed(out, **fx)
  print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, {len(fx)} arrays)")


# ------------------------------------------------------------------ main ----


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--published",
      required=True,
      help="folder of the published code (disco_rl/, colabs/meta_train.ipynb)",
  )
  parser.add_argument(
      "--weights",
      default=None,
      help="disco_103.npz (default: found as disco-eval finds it)",
  )
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
      "--init", default="random", help="random | disco103 (meta-parameters)"
  )
  parser.add_argument(
      "--small", action="store_true", help="small networks and batches"
  )
  commands = parser.add_subparsers(dest="command", required=True)
  run_parser = commands.add_parser("run", help="meta-train and log rewards")
  run_parser.add_argument("--steps", type=int, default=800)
  run_parser.add_argument("--output_dir", required=True)
  run_parser.add_argument("--checkpoint_every", type=int, default=50)
  fixture_parser = commands.add_parser(
      "fixture", help="record a multi-step parity fixture"
  )
  fixture_parser.add_argument("--steps", type=int, default=4)
  fixture_parser.add_argument("--output", required=True)
  fixture_parser.add_argument(
      "--keep_recording",
      default="",
      help="also pickle what was recorded here (to rewrite the fixture)",
  )
  args = parser.parse_args(argv)
  args.weights = str(weights_lib.disco103_path(args.weights))
  if args.command == "run":
    run(args)
  else:
    fixture(args)


if __name__ == "__main__":
  main()
