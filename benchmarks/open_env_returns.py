"""Random-policy returns of Craftax and Sokoban, and Sokoban's optimum.

  python benchmarks/open_env_returns.py random --episodes 256
  python benchmarks/open_env_returns.py random --envs jumanji/Sokoban-v0
  python benchmarks/open_env_returns.py sokoban_optimal

``random`` plays ``--episodes`` streams of each environment through disco's
own adapter (``registry.make_env``, default settings) with uniformly random
actions until every stream's first episode has ended, and prints the mean
undiscounted return of those first episodes with its standard error, their
mean length and the mean of the environment's per-episode info (Craftax's
achievements, Sokoban's solve rate). Counting each stream's first episode
only keeps the mean unbiased (episodes that end sooner are not
over-represented). The numbers are written into
``disco/environments/reference_scores.py`` by hand.

``sokoban_optimal`` finds the shortest solution of each level of jumanji's
``ToyGenerator`` (the default levels of ``jumanji/Sokoban-v0``) by a
breadth-first search over (agent, boxes) with jumanji's rules (a move into a
wall or the grid's edge, or a push of a box into a wall, a box or the edge,
does nothing), replays it in the environment to check the return, and prints
the mean optimal return over the two levels (each drawn with probability
1/2).

Needs craftax and jumanji (``pip install -e '.[craftax,sokoban]'``).
"""

from __future__ import annotations

import collections
from pathlib import Path
import sys

import jax
import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing
from disco.environments import registry
from disco.environments import sokoban_envs

ENVS = (
    "craftax/Craftax-Classic-Symbolic-v1",
    "craftax/Craftax-Symbolic-v1",
    "jumanji/Sokoban-v0",
)
CHUNK = 100  # steps per compiled call
MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # jumanji's up, right, down, left


def first_episodes(
    name: str, episodes: int, seed: int
) -> dict[str, np.ndarray]:
  """Per stream, its first episode's return, length and info at its end."""
  env = registry.make_env(name, episodes)
  state, first = env.reset(jax.random.PRNGKey(seed))
  names = sorted(first.info or {})

  def chunk(carry, key):
    def step(carry, key):
      state, total, length, done, info = carry
      actions = jax.random.randint(key, (episodes,), 0, env.num_actions)
      state, ts = env.step(state, actions)
      alive = jnp.logical_not(done)
      total = total + jnp.where(alive, ts.reward, 0.0)
      length = length + alive.astype(jnp.int32)
      ends = jnp.logical_and(alive, ts.step_type == 2)
      info = {k: jnp.where(ends, ts.info[k], v) for k, v in info.items()}
      return (state, total, length, jnp.logical_or(done, ends), info), None

    return jax.lax.scan(step, carry, jax.random.split(key, CHUNK))[0]

  chunk = jax.jit(chunk)
  zeros = jnp.zeros(episodes)
  carry = (
      state,
      zeros,
      jnp.zeros(episodes, jnp.int32),
      jnp.zeros(episodes, bool),
      {k: zeros for k in names},
  )
  key = jax.random.PRNGKey(seed + 1)
  while not bool(carry[3].all()):
    key, chunk_key = jax.random.split(key)
    carry = chunk(carry, chunk_key)
  _, total, length, _, info = jax.device_get(carry)
  return dict(returns=total, lengths=length, **info)


def report_random(args) -> None:
  for name in args.envs:
    clock = timing.Stopwatch()
    out = first_episodes(name, args.episodes, args.seed)
    returns, lengths = out.pop("returns"), out.pop("lengths")
    sem = returns.std(ddof=1) / np.sqrt(returns.size)
    print(
        f"{name}: random return {returns.mean():.4f} +- {sem:.4f} (s.e.m.) "
        f"over {returns.size} episodes (seed {args.seed}); mean length "
        f"{lengths.mean():.1f} (max {lengths.max()}) [{clock.seconds():.0f} s]",
        flush=True,
    )
    unlocked = {k: v.mean() for k, v in out.items() if v.mean() > 0}
    if unlocked:
      print(
          "  info at the end (mean): "
          + ", ".join(f"{k} {v:.4f}" for k, v in sorted(unlocked.items())),
          flush=True,
      )


def shortest_solution(level: np.ndarray, on_targets: int = 4) -> list[int]:
  """The actions of a shortest way to have ``on_targets`` boxes on targets in
  ``level`` ``[10, 10, 2]`` (fixed, variable grids; jumanji's codes), by
  breadth-first search; ``RuntimeError`` if there is none."""
  fixed, variable = level[..., 0], level[..., 1]
  size = fixed.shape
  walls = fixed == sokoban_envs.WALL
  targets = frozenset(
      zip(*np.nonzero(fixed == sokoban_envs.TARGET), strict=True)
  )
  agent = tuple(np.argwhere(variable == sokoban_envs.AGENT)[0])
  boxes = frozenset(zip(*np.nonzero(variable == sokoban_envs.BOX), strict=True))

  def free(cell, boxes):
    inside = 0 <= cell[0] < size[0] and 0 <= cell[1] < size[1]
    return inside and not walls[cell] and cell not in boxes

  start = (agent, boxes)
  parents = {start: None}
  queue = collections.deque([start])
  while queue:
    agent, boxes = queue.popleft()
    if len(boxes & targets) >= on_targets:
      path, node = [], (agent, boxes)
      while parents[node] is not None:
        node, action = parents[node]
        path.append(action)
      return path[::-1]
    for action, (dr, dc) in enumerate(MOVES):
      to = (agent[0] + dr, agent[1] + dc)
      if to in boxes:
        beyond = (to[0] + dr, to[1] + dc)
        if not free(beyond, boxes):
          continue
        moved = (to, (boxes - {to}) | {beyond})
      elif free(to, boxes):
        moved = (to, boxes)
      else:
        continue
      if moved not in parents:
        parents[moved] = ((agent, boxes), action)
        queue.append(moved)
  raise RuntimeError(f"No way to have {on_targets} boxes on targets.")


def report_sokoban_optimal(args) -> None:
  del args
  # pylint: disable-next=g-import-not-at-top
  from jumanji.environments.routing.sokoban import generator

  toy = generator.ToyGenerator()
  levels, seen = [], set()
  for k in range(64):  # ToyGenerator draws one of its levels per key
    state = toy(jax.random.PRNGKey(k))
    level = np.stack(
        [np.asarray(state.fixed_grid), np.asarray(state.variable_grid)], -1
    )
    if level.tobytes() not in seen:
      seen.add(level.tobytes())
      levels.append(level)
  env = registry.make_env("jumanji/Sokoban-v0", 1)
  resets = [env.reset(jax.random.PRNGKey(s)) for s in range(64)]
  time_limit = sokoban_envs.DEFAULTS["time_limit"]
  optimal = []
  for k, level in enumerate(levels):
    # The most boxes the level lets onto targets, by the shortest way.
    for count in range(4, -1, -1):
      try:
        actions = shortest_solution(level, count)
        break
      except RuntimeError:
        continue
    # Replay it from a reset that drew this level.
    shown = np.asarray(sokoban_envs.observe(level[..., ::-1]))
    state = next(
        s for s, ts in resets if np.array_equal(ts.observation[0], shown)
    )
    total = 0.0
    for a in actions:
      state, ts = env.step(state, jnp.asarray([a], jnp.int32))
      total += float(ts.reward[0])
    if count == 4:  # solved: the episode ends there
      assert int(ts.step_type[0]) == 2 and float(ts.discount[0]) == 0.0
      best = total
    else:  # unsolvable: keep the boxes there until the time limit
      assert len(actions) < time_limit
      best = total - 0.1 * (time_limit - len(actions))
    optimal.append(best)
    print(
        f"toy level {k}: at most {count} of 4 boxes on targets, reached in "
        f"{len(actions)} steps (replayed: return {total:.4f}); optimal "
        f"return {best:.4f}",
        flush=True,
    )
  print(
      f"jumanji/Sokoban-v0 (toy levels, time limit {time_limit}): optimal "
      f"return {np.mean(optimal):.4f} (mean over the {len(levels)} levels, "
      "each drawn with probability 1/2)"
  )


def main():
  cli.run_commands(
      __doc__,
      {
          "random": cli.Command(
              report_random,
              lambda p: (
                  p.add_argument("--envs", nargs="*", default=list(ENVS)),
                  p.add_argument("--episodes", type=int, default=256),
                  p.add_argument("--seed", type=int, default=0),
              ),
              help="random-policy returns",
          ),
          "sokoban_optimal": cli.Command(
              report_sokoban_optimal, help="the toy levels' optimal return"
          ),
      },
  )


if __name__ == "__main__":
  main()
