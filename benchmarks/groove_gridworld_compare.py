r"""Our LPG grid worlds against GROOVE's ``GridWorld-v0``, stepped side by side.

  python benchmarks/groove_gridworld_compare.py --groove PATH [--layout dense]

``PATH`` is a checkout of github.com/EmptyJackson/groove, copied and patched
outside it as ``groove_compare.py`` does (for the grid world, gymnax 1.0's
``is_terminated``). Both implement the tabular grid worlds of the LPG
paper, Appendix A.1, but draw their random numbers differently, so they are
compared on the same transitions, not on the same trajectories:

1. Our environment (``lpg/<layout>``, a fixed layout) runs ``--streams``
   streams for ``--steps`` steps with uniformly random actions among the five
   both share: stay, up, down, left, right (ours also moves diagonally;
   GROOVE's action 4 stays). Every visited state and its action is a sample.
2. GROOVE's ``step_env`` (without its automatic reset) is applied to the same
   samples: the agent's cell, the objects' cells and presence and the
   episode's time are copied into its ``EnvState``, the layout's walls and
   object table into its ``EnvParams``.
3. Deterministic parts must agree on every sample: the reward, which objects
   are collected, the agent's next cell and the presence of every object that
   was present (both when the episode goes on), and the end of an episode at
   the time limit. Stochastic parts are compared as rates with 95% intervals,
   against each other and against the A.1 table: the respawn of each absent
   object, and termination after collecting each kind of object.

The one difference by design: at the time limit GROOVE's discount is 0
(gymnax treats it as a termination), ours is 1 (a truncation). After an
episode ends, GROOVE restarts on its fixed start cell, ours on a random free
cell (the paper gives none); restarts are not compared.
"""

from __future__ import annotations

from pathlib import Path
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import groove_compare
from disco import types
from disco.environments import lpg_grid

# Our move index (``lpg_grid.MOVES``) of GROOVE's actions 0-4: up, down,
# left, right, and 4, which moves nowhere.
OUR_ACTION = np.array([1, 5, 7, 3, 0], np.int32)


def rollout(env: lpg_grid.LpgGridWorld, steps: int, seed: int):
  """Visited states, actions and outcomes of ours: a dict of ``[N, ...]``
  arrays, ``N = steps * B``."""
  rng = jax.random.PRNGKey(seed)
  state, _ = env.reset(rng)

  def body(state, key):
    groove_actions = jax.random.randint(key, (env.batch_size,), 0, 5)
    actions = jnp.asarray(OUR_ACTION)[groove_actions]
    next_state, ts = env.step(state, actions)
    return next_state, dict(
        position=state.position,
        present=state.present,
        time=state.time,
        groove_action=groove_actions,
        next_position=next_state.position,
        next_present=next_state.present,
        reward=ts.reward,
        last=ts.step_type == types.LAST,
        terminated=ts.discount == 0,
    )

  keys = jax.random.split(jax.random.fold_in(rng, 1), steps)
  _, samples = jax.lax.scan(body, state, keys)
  samples = jax.tree.map(
      lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), samples
  )
  return samples, np.asarray(state.object_cells[0])


def groove_outcomes(groove: Path, env, object_cells, samples, seed):
  """GROOVE's ``step_env`` on our samples: reward, next cell and presence,
  done, termination (``[N, ...]`` numpy arrays)."""
  sys.path.insert(0, str(groove))
  from environments.gridworld import gridworld as groove_grid

  tables = env.tables
  height, width = tables.free.shape
  size = max(height, width)  # GROOVE's grids are square: pad with walls
  walls = np.ones((size, size), bool)
  walls[:height, :width] = ~tables.free
  kinds = env.layout.objects
  obj_ids = np.repeat(np.arange(len(kinds)), [k.count for k in kinds])
  num_objects = len(obj_ids)
  flat = lambda cells: cells[..., 0] * size + cells[..., 1]
  world = groove_grid.GridWorld(
      max_grid_size=size,
      max_n_objs=num_objects,
      max_n_obj_types=len(kinds),
      tabular=True,
  )
  params = groove_grid.EnvParams(
      max_steps_in_episode=tables.max_steps,
      random_respawn=False,
      auto_collect=True,
      grid_size=size,
      walls=jnp.asarray(walls.reshape(-1)),
      start_pos=0,
      n_objs=num_objects,
      obj_ids=jnp.asarray(obj_ids),
      static_obj_poss=jnp.asarray(flat(object_cells)),
      obj_rewards=jnp.asarray([k.reward for k in kinds], jnp.float32),
      obj_p_terminate=jnp.asarray([k.term_prob for k in kinds], jnp.float32),
      obj_p_respawn=jnp.asarray([k.respawn_prob for k in kinds], jnp.float32),
  )
  obj_poss = jnp.asarray(flat(object_cells) + obj_ids * size**2)

  def one(key, position, present, time, action):
    state = groove_grid.EnvState(
        time=time,
        pos=position[0] * size + position[1],
        obj_poss=obj_poss,
        obj_existss=present,
        early_term=jnp.asarray(False),
    )
    _, next_state, reward, done, info = world.step_env(
        key, state, action, params
    )
    return dict(
        reward=reward,
        next_position=jnp.stack(
            [next_state.pos // size, next_state.pos % size]
        ),
        next_present=next_state.obj_existss,
        done=done,
        terminated=next_state.early_term,
        discount=info["discount"],
    )

  n = len(samples["reward"])
  keys = jax.random.split(jax.random.PRNGKey(seed + 1), n)
  out = jax.jit(jax.vmap(one))(
      keys,
      jnp.asarray(samples["position"]),
      jnp.asarray(samples["present"]),
      jnp.asarray(samples["time"]),
      jnp.asarray(samples["groove_action"]),
  )
  return jax.tree.map(np.asarray, out)


def rate(events: np.ndarray) -> str:
  """``p [lo, hi] (n)``: a proportion with its 95% Wilson interval."""
  n, k = events.size, int(events.sum())
  if n == 0:
    return "- (0)"
  z = 1.96
  p = k / n
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return f"{p:.3f} [{centre - half:.3f}, {centre + half:.3f}] ({n})"


def compare(ours, theirs, env) -> tuple[list[str], list[str]]:
  """(mismatch lines of the deterministic parts, table rows of the rates)."""
  tables = env.tables
  going_on = ~ours["last"] & ~theirs["done"]
  # GROOVE's step does not restart the episode, so its next presence shows
  # what was collected even when the episode ended.
  collected = ours["present"] & ~theirs["next_present"]
  at_limit = ours["time"] + 1 >= tables.max_steps
  checks = {
      "reward": ours["reward"] == theirs["reward"],
      "next cell (episode goes on)": np.all(
          ours["next_position"] == theirs["next_position"], axis=-1
      )
      | ~going_on,
      "presence of the objects present before the step, i.e. what is "
      "collected (episode goes on)": np.all(
          (ours["next_present"] == theirs["next_present"]) | ~ours["present"],
          axis=-1,
      )
      | ~going_on,
      "reward of the collected object": ours["reward"]
      == np.sum(np.where(collected, tables.rewards, 0.0), axis=-1),
      "episode ends at the time limit": (ours["last"] == theirs["done"])
      | ~at_limit,
      "no end before the time limit without a termination": (
          ours["last"] == ours["terminated"]
      )
      | at_limit,
  }
  mismatches = [
      f"{name}: {int((~ok).sum())} of {ok.size} samples differ"
      for name, ok in checks.items()
  ]
  rows = []
  absent = ~ours["present"] & going_on[:, None]
  for k in range(env.num_objects):
    rows.append(
        (
            f"respawn of absent object {k}",
            tables.respawn_probs[k],
            rate(ours["next_present"][absent[:, k], k]),
            rate(theirs["next_present"][absent[:, k], k]),
        )
    )
  for term_prob in np.unique(tables.term_probs):
    mask = np.any(collected & (tables.term_probs == term_prob), axis=-1)
    rows.append(
        (
            f"termination after collecting (eps_term {term_prob:g})",
            term_prob,
            rate(ours["terminated"][mask]),
            rate(theirs["terminated"][mask]),
        )
    )
  return mismatches, rows


def main(argv=None) -> int:
  parser = cli.parser(__doc__)
  parser.add_argument("--groove", type=Path, required=True)
  parser.add_argument(
      "--layout", default="dense", choices=sorted(lpg_grid.LAYOUTS)
  )
  parser.add_argument("--streams", type=int, default=64)
  parser.add_argument("--steps", type=int, default=1200)
  parser.add_argument("--layout_seed", type=int, default=0)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  env = lpg_grid.LpgGridWorld(
      args.streams, layout=args.layout, layout_seed=args.layout_seed
  )
  ours, object_cells = rollout(env, args.steps, args.seed)
  with tempfile.TemporaryDirectory() as tmp:
    groove = groove_compare.patched_groove(args.groove, Path(tmp) / "groove")
    theirs = groove_outcomes(groove, env, object_cells, ours, args.seed)
  mismatches, rows = compare(ours, theirs, env)
  n = len(ours["reward"])
  print(
      f"lpg/{args.layout} (layout seed {args.layout_seed}) against GROOVE's "
      f"GridWorld-v0: {n} transitions ({args.streams} streams x "
      f"{args.steps} steps, random actions among stay/up/down/left/right); "
      f"{int(ours['last'].sum())} episode ends, "
      f"{int((ours['reward'] != 0).sum())} collections."
  )
  print("Deterministic parts (must be 0):")
  for line in mismatches:
    print(f"  {line}")
  print(
      cli.table_header(
          ("event", "A.1 table", "ours: rate [95% CI] (samples)", "GROOVE")
      )
  )
  for name, table, a, b in rows:
    print(f"| {name} | {table:g} | {a} | {b} |")
  at_limit = ours["time"] + 1 >= env.tables.max_steps
  print(
      "Discount at the time limit: ours "
      f"{np.unique(np.where(ours['terminated'], 0, 1)[at_limit])}, GROOVE "
      f"{np.unique(theirs['discount'][at_limit])} (a truncation for us, a "
      "termination for gymnax)."
  )
  return int(any(" 0 of " not in line for line in mismatches))


if __name__ == "__main__":
  sys.exit(main())
