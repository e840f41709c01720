"""Our loops against the published DiscoRL code, interleaved in one process.

The published code is NOT part of this package. It runs only when
``--published PATH`` names a copy of it (``disco_rl/`` and ``colabs/``),
whose notebooks' own code cells are executed as ``published_notebook.py``
describes; without it only ours and the matmul are timed.

Evaluation (default), at the published evaluation notebook's settings
(Disco103, Catch 8x8, 2 environments x 29 steps per iteration, a replay of
1024 trajectories, batches of 64, learning rate 1e-2). Each round times, one
after the other:

1. ours: one call of our compiled evaluation loop (``eval_throughput.py``),
   ``--iterations`` iterations with a learner step in each;
2. notebook: the published notebook's training-loop cell (its Python
   replay, ``pmap``'ed actor unroll and learner step) for ``--iterations``
   iterations; the rate is that of the median iteration;
3. lean: the published agent's ``pmap``'ed learner step (the notebook's
   ``learner_step_fn``) called ``--iterations`` times back to back, its
   state chained, on batches sampled once from the notebook's replay and
   kept on the device (no replay, no acting);
4. matmul: a ``--matmul_size`` square float32 ``jnp.dot`` (median of
   ``--matmul_reps`` calls; ``timing.Matmul``).

``--meta``: the meta-step at the published meta-training notebook's settings
(2 agents on Catch 5x5, 32 environments, rollouts of 16, 2 inner steps, agent
(512, 512) with an LSTM model of 256, value function (256, 256), random
meta-parameters). Each round times ``--steps`` meta-steps of ours
(``meta_train_step.py``'s population) and of the notebook's own loop cell
(its ``pmap``'ed ``meta_update``, set up by ``published_meta_train.py``),
then the matmul; compile times are printed once.

Achieved GFLOP/s is XLA's cost analysis of one learner step or meta-step
(``flops.py``; loop bodies counted once) times steps per second, printed
beside the matmul's GFLOP/s of the same round. A table row per round, then
the medians over rounds of the ratios.

  python benchmarks/published_compare.py --published ../published --rounds 3
  python benchmarks/published_compare.py --published ../published --meta
  python benchmarks/published_compare.py --published ../published --tiny \\
      --rounds 1 --iterations 3 --steps 2 --matmul_size 512   # smoke test

``--tiny`` shrinks the networks, batches and rollouts of both codes (a
smoke test of this script, not a benchmark). Run it on one device (both
codes then use one). Timings are only meaningful on an otherwise idle
machine.
"""

from __future__ import annotations

import math
from pathlib import Path
import sys

import jax
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import eval_throughput
from benchmarks import flops
from benchmarks import meta_train_step
from benchmarks import published_meta_train
from benchmarks import published_notebook as nb
from benchmarks import timing
from disco import weights as weights_lib

EVAL_NOTEBOOK = "colabs/eval.ipynb"
EVAL_FILENAME = "<eval.ipynb>"
# Tiny settings (--tiny) of the evaluation: ours, then the notebook's lines.
TINY_EVAL_SIZES = dict(batch_size=16, min_replay_size=16, rollout_len=5)
TINY_EVAL_NETWORK = dict(
    dense=(16,), model_lstm_size=8, model_head_hiddens=(8,)
)
TINY_EVAL_AGENT_LINES = (
    ("dense=(512, 512)", "dense=(16,)"),
    ("head_mlp_hiddens=(128,)", "head_mlp_hiddens=(8,)"),
    ("lstm_size=128", "lstm_size=8"),
)
TINY_EVAL_LOOP_LINES = (
    ("batch_size = 64", "batch_size = 16"),
    ("rollout_len = 29", "rollout_len = 5"),
    ("replay_ratio = 32", "replay_ratio = 8"),  # still 2 environments
)
LEAN_BATCHES = 4


class Rounds:
  """One row per round: each contestant's speed and achieved GFLOP/s (and
  its percentage of the matmul's in the same round); ``summary`` prints the
  medians over rounds of ours' speed-ups and of the efficiencies.

  ``flop``: per contestant, ``flops.compiled_flops``'s counts of one step.
  Achieved GFLOP/s uses XLA's cost analysis (``efficiency_<name>``);
  ``efficiency_<name>_dots`` uses the matrix products with loops counted per
  trip instead (the cost analysis counts a loop body once).
  """

  def __init__(self, flop: dict[str, dict[str, float]], in_seconds: bool):
    self._flop, self._in_seconds, self._rows = flop, in_seconds, []
    names = list(flop)
    unit = "seconds per step" if in_seconds else "steps/s"
    print(
        f"\n{unit}; achieved GFLOP/s (% of the matmul's)\n"
        + " | ".join(
            [
                "round",
                *names,
                "matmul GFLOP/s",
                *(f"{c} GFLOP/s" for c in names),
            ]
        )
    )

  def add(self, rate: dict[str, float], matmul_gflops: float) -> None:
    """``rate``: steps per second of each contestant."""
    row, cells = {}, []
    for name, r in rate.items():
      cells.append(f"{1 / r if self._in_seconds else r:.3f}")
      if name != "ours":
        row[f"ours/{name}"] = rate["ours"] / r
    gflops = []
    for name, r in rate.items():
      for count, suffix in (("cost_analysis", ""), ("matmul", "_dots")):
        achieved = r * self._flop[name][count] / 1e9
        row[f"efficiency_{name}{suffix}"] = achieved / matmul_gflops
        if not suffix:
          gflops.append(
              f"{achieved:.1f} ({100 * achieved / matmul_gflops:.0f}%)"
          )
    self._rows.append(row)
    print(
        " | ".join(
            [str(len(self._rows)), *cells, f"{matmul_gflops:.1f}", *gflops]
        ),
        flush=True,
    )

  def summary(self) -> dict[str, float]:
    rows = self._rows
    summary = {k: timing.median(row[k] for row in rows) for k in rows[0]}
    print(f"\nmedians over {len(rows)} round(s):")
    for k, v in summary.items():
      print(f"{k}={v:.3f}")
    return summary


# ------------------------------------------------------------- evaluation ----


def published_eval_loop(published: Path, weights: Path, tiny: bool):
  """The evaluation notebook up to its loop, which ``run(n)`` continues."""
  ns = nb.namespace(published, "published_eval_notebook")
  cells = nb.code_cells(published, EVAL_NOTEBOOK)
  agent_cell = nb.cell(cells, "Instantiate a simple MLP agent.")
  loop_cell = nb.cell(cells, "Training loop")
  if tiny:
    for old, new in TINY_EVAL_AGENT_LINES:
      agent_cell = nb.replace(agent_cell, old, new)
    for old, new in TINY_EVAL_LOOP_LINES:
      loop_cell = nb.replace(loop_cell, old, new)
  nb.run_cells(
      ns,
      *nb.setup_cells(cells, weights),
      agent_cell,
      nb.cell(cells, "Helper functions for interacting"),
      nb.cell(cells, "A simple Replay buffer."),
      filename=EVAL_FILENAME,
  )
  return nb.SteppedLoop(
      ns,
      loop_cell,
      "# Run the loop.",
      "# Collect all logs and statistics.",
      EVAL_FILENAME,
  )


def run_notebook(loop: nb.SteppedLoop, n: int) -> tuple[list[float], int]:
  """``n`` iterations of the notebook's loop: ``(seconds of each, learner
  steps)``. The logs the loop keeps are dropped afterwards (memory)."""
  ns = loop.ns
  seconds = loop.run(n)
  learner_steps = len(ns["all_metrics"])
  for name in (
      "all_metrics",
      "all_rewards",
      "all_discounts",
      "all_returns",
      "all_steps",
  ):
    ns[name].clear()
  return seconds, learner_steps


class PublishedLean:
  """The notebook agent's ``pmap``'ed learner step, back to back on batches
  already on the device (sampled once from the notebook's replay)."""

  def __init__(self, ns, rng: jax.Array):
    self.step_fn = ns["learner_step_fn"]
    self._devices = ns["devices"]
    self._to_devices = jax.pmap(lambda x: x, devices=self._devices)
    self._batches = [
        self._to_devices(ns["buffer"].sample(ns["batch_size"]))
        for _ in range(LEAN_BATCHES)
    ]
    self._fixed = (ns["actor_state"], ns["update_rule_params"])
    self.state = ns["learner_state"]
    self._rng = rng
    keys = self._keys(1)
    self.first_args = (
        keys[0],
        self._batches[0],
        self.state,
        *self._fixed,
        False,
    )
    self.state, _, _ = self.step_fn(
        *self.first_args
    )  # compiles for these inputs
    jax.block_until_ready(self.state)

  def _keys(self, n: int) -> list[jax.Array]:
    self._rng, rng = jax.random.split(self._rng)
    return [
        self._to_devices(jax.random.split(k, len(self._devices)))
        for k in jax.random.split(rng, n)
    ]

  def run(self, n: int) -> float:
    """Seconds per learner step over ``n`` steps."""
    keys = self._keys(n)

    def steps(state):
      for i in range(n):
        state, _, _ = self.step_fn(
            keys[i], self._batches[i % LEAN_BATCHES], state, *self._fixed, False
        )
      return state

    state, seconds = timing.timed(steps, self.state)
    if not all(np.isfinite(x).all() for x in jax.tree.leaves(state.params)):
      print("warning: the lean loop's parameters are no longer finite")
    self.state = state
    return seconds / n


def _eval_setup(args):
  """Builds and warms every contestant; prints FLOPs and compile times."""
  sizes = TINY_EVAL_SIZES if args.tiny else {}
  network = TINY_EVAL_NETWORK if args.tiny else {}
  n = args.iterations
  loop, fresh, meta_params = eval_throughput.build(
      args.weights, 1, network, sizes
  )
  states, first, again = eval_throughput.warm_up(loop, fresh, meta_params, n)
  config = loop.config
  fn, step_args = flops.eval_learner_step(
      config.batch_size,
      config.rollout_len,
      eval_throughput.NOTEBOOK["rows"],
      network,
  )
  gflop = dict(ours=flops.compiled_flops(fn, *step_args))
  print(
      f"ours: compile {max(0.0, first - again):.1f} s (first call "
      f"{first:.1f} s, same call compiled {again:.1f} s)"
  )
  ours = dict(loop=loop, states=states, meta_params=meta_params)
  notebook = lean = None
  if args.published:
    notebook = published_eval_loop(
        Path(args.published), Path(args.weights), args.tiny
    )
    ns = notebook.ns
    # Iterations until its learner has stepped twice (a pmap'ed function
    # compiles again when first given pmap's own outputs).
    fill = math.ceil(ns["min_buffer_size"] / ns["num_envs"])
    seconds, learner_steps = run_notebook(notebook, fill + 1)
    if learner_steps != 2:
      raise RuntimeError(
          f"expected 2 learner steps in the notebook's first {fill + 1} "
          f"iterations, got {learner_steps}."
      )
    print(
        f"published notebook ({len(ns['devices'])} device(s)): first "
        f"iteration {seconds[0]:.1f} s, first two learner iterations "
        f"{seconds[-2]:.1f} s and {seconds[-1]:.1f} s (compiles included)"
    )
    lean = PublishedLean(ns, jax.random.PRNGKey(1))
    gflop["published"] = flops.compiled_flops(lean.step_fn, *lean.first_args)
  for name, f in gflop.items():
    print(
        f"{name} learner step: {f['cost_analysis'] / 1e9:.2f} GFLOP (XLA "
        f"cost analysis), {f['matmul'] / 1e9:.2f} GFLOP in matrix products"
    )
  return ours, notebook, lean, gflop


def eval_compare(args) -> dict[str, float]:
  ours, notebook, lean, gflop = _eval_setup(args)
  matmul = timing.Matmul(args.matmul_size)
  n = args.iterations
  table = Rounds(
      dict(ours=gflop["ours"])
      | (
          dict(notebook=gflop["published"], lean=gflop["published"])
          if notebook
          else {}
      ),
      in_seconds=False,
  )

  def ours_step() -> float:
    ours["states"], _, seconds = eval_throughput.timed_call(
        ours["loop"], ours["states"], ours["meta_params"], n
    )
    return seconds / n

  def notebook_step() -> float:
    seconds, learner_steps = run_notebook(notebook, n)
    if learner_steps != n:
      raise RuntimeError(f"expected {n} learner steps, got {learner_steps}")
    return timing.median(seconds)

  candidates = dict(ours=ours_step)
  if notebook:
    candidates.update(notebook=notebook_step, lean=lambda: lean.run(n))
  _rounds(candidates, table, matmul, args)
  return table.summary()


def _rounds(candidates, table: Rounds, matmul: timing.Matmul, args) -> None:
  """``--rounds`` rounds of the candidates (seconds per step), each followed
  by the matmul; a table row per round."""
  timing.interleave(
      candidates,
      args.rounds,
      warmup=0,
      on_round=lambda _, seconds: table.add(
          {name: 1 / s for name, s in seconds.items()},
          matmul.gflops(args.matmul_reps),
      ),
  )


# ------------------------------------------------------------ meta-step ----


def _meta_setup(args):
  settings = (
      published_meta_train.SMALL if args.tiny else published_meta_train.FULL
  )
  given = [
      f"--num_agents={settings['num_agents']}",
      f"--batch_size={settings['batch_size']}",
      f"--rollout_len={settings['rollout_len']}",
      "--num_devices=1",
  ] + (["--tiny"] if args.tiny else [])
  plan, state = meta_train_step.build(
      meta_train_step.arg_parser().parse_args(given), settings["inner_steps"]
  )
  state, _, first = meta_train_step.timed_step(plan, state)
  state, _, again = meta_train_step.timed_step(plan, state)
  print(
      f"ours: compile {max(0.0, first - again):.1f} s (first meta-step "
      f"{first:.1f} s, second {again:.1f} s)"
  )
  gflop = dict(ours=flops.lowered_flops(plan.population.lower(state)))
  ours = dict(plan=plan, state=state)
  notebook = None
  if args.published:
    ns, config_cell, loop_cell = published_meta_train.notebook_namespace(
        Path(args.published), settings, 0, 0, "random", Path(args.weights)
    )
    nb.run_cells(ns, config_cell, filename=published_meta_train.FILENAME)
    notebook = nb.SteppedLoop(
        ns,
        loop_cell,
        "# Run the meta learning loop.",
        "# Collect metrics from all devices.",
        published_meta_train.FILENAME,
    )
    # Its meta-update compiles on its first two calls (see
    # published_notebook._device_put_replicated); the third runs compiled.
    seconds = notebook.run(3)
    compile_s = seconds[0] + seconds[1] - 2 * seconds[2]
    print(
        f"published notebook: compile {compile_s:.1f} s (first meta-steps {seconds[0]:.1f} s and {seconds[1]:.1f} s, "
        f"third {seconds[2]:.1f} s)"
    )
    devices = ns["devices"]
    gflop["published"] = flops.compiled_flops(
        ns["jitted_meta_update"],
        update_rule_params=ns["step_update_rule_params"],
        meta_opt_state=ns["step_meta_opt_state"],
        agents_states=ns["step_agents_states"],
        rng=jax.random.split(jax.random.PRNGKey(0), len(devices)),
    )
  for name, f in gflop.items():
    print(
        f"{name} meta-step: {f['cost_analysis'] / 1e9:.2f} GFLOP (XLA cost "
        f"analysis), {f['matmul'] / 1e9:.2f} GFLOP in matrix products"
    )
  return ours, notebook, gflop


def meta_compare(args) -> dict[str, float]:
  ours, notebook, gflop = _meta_setup(args)
  matmul = timing.Matmul(args.matmul_size)
  table = Rounds(
      dict(ours=gflop["ours"])
      | (dict(notebook=gflop["published"]) if notebook else {}),
      in_seconds=True,
  )
  stepper = timing.Stepper(
      ours["plan"].population.step, ours["state"], logs=True
  )
  candidates = dict(
      ours=lambda: timing.median(stepper() for _ in range(args.steps))
  )
  if notebook:
    candidates["notebook"] = lambda: timing.median(notebook.run(args.steps))
  _rounds(candidates, table, matmul, args)
  return table.summary()


# ------------------------------------------------------------------ main ----


def main(argv=None) -> dict[str, float]:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--published",
      default=None,
      help="folder of a copy of the published code (disco_rl/, colabs/); "
      "without it only ours and the matmul run",
  )
  parser.add_argument(
      "--weights",
      default=None,
      help="disco_103.npz (default: found as disco-eval finds it)",
  )
  parser.add_argument(
      "--meta", action="store_true", help="the meta-step instead"
  )
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument(
      "--iterations",
      type=int,
      default=20,
      help="evaluation: iterations (learner steps) per contestant per round",
  )
  parser.add_argument(
      "--steps",
      type=int,
      default=5,
      help="--meta: meta-steps per contestant per round",
  )
  parser.add_argument("--matmul_size", type=int, default=4096)
  parser.add_argument("--matmul_reps", type=int, default=3)
  parser.add_argument(
      "--tiny",
      action="store_true",
      help="tiny networks and batches (a smoke test of this script)",
  )
  args = parser.parse_args(argv)
  counts = (args.rounds, args.iterations, args.steps, args.matmul_size)
  if min(counts + (args.matmul_reps,)) < 1:
    parser.error(
        "--rounds, --iterations, --steps, --matmul_size and --matmul_reps "
        "must be >= 1"
    )
  if args.published and not Path(args.published, "disco_rl").is_dir():
    parser.error(
        f"--published {args.published}: no disco_rl/ folder there; pass the "
        "folder of a copy of the published code."
    )
  args.weights = str(weights_lib.disco103_path(args.weights))
  print(
      f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), "
      f"{jax.device_count()} device(s); published code: "
      + (args.published or "not given")
  )
  return meta_compare(args) if args.meta else eval_compare(args)


if __name__ == "__main__":
  main()
