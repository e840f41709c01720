"""The published DiscoRL evaluation notebook on an LPG grid world (issue 30).

  python benchmarks/published_offcatch.py --published PATH \\
      [--env_steps 100000] [--seeds 0 1] [--learning_rate 1e-2] \\
      [--out benchmarks/results/offcatch/published]

Runs the published evaluation notebook's own cells (``published_notebook``:
its agent, Disco103 weights, helper functions, replay and training loop,
with its settings: 2 environments x 29 steps per iteration, a replay of 1024
trajectories, learner batches of 64, a 512x512 MLP agent, learning rate
1e-2), with one change: its ``get_env`` returns this package's ``lpg/dense``
grid world (``disco.environments.lpg_grid``) behind a small adapter instead
of Catch. The published agent has no notion of truncation: every episode
end (LAST) is a termination to it, the 500-step time limit included. The
published code is NOT part of this package; ``--published`` names a copy of
it (``disco_rl/`` and ``colabs/``), e.g. from
https://github.com/google-deepmind/disco_rl.

For every seed (the notebook's ``PRNGKey(0)`` replaced by the seed) it
writes ``<out>/seed<k>.json``: the return of each finished episode with the
environment step at which it ended, and the final score (mean return of the
last ``--last_episodes`` episodes), so ``disco-eval`` runs of the same
budget compare directly. Finished seeds are not run again.
"""

from __future__ import annotations

import json
from pathlib import Path
import sys

from dm_env import specs
import jax.numpy as jnp
import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import published_notebook as nb
from disco import weights as weights_lib
from disco.environments import lpg_grid

NOTEBOOK = "colabs/eval.ipynb"
FILENAME = "<published eval notebook on lpg/dense>"
CATCH_ENV = (
    "return jittable_envs.CatchJittableEnvironment(\n"
    "      batch_size=batch_size, env_settings=jittable_envs.get_config_catch()\n"
    "  )"
)


def adapter_class(published_types, base_class, layout: str):
  """A subclass of the published ``BatchedJittableEnvironment`` (so the
  notebook unrolls it with its jitted actor) stepping this package's LPG
  grid world ``layout``: the published timestep (observation, step type,
  reward) of each of our timesteps; our discount is dropped, as the
  published agent reads episode ends from the step type alone."""

  class LpgAdapter(base_class):

    def __init__(self, batch_size: int):  # pylint: disable=super-init-not-called
      self.batch_size = batch_size
      self._env = lpg_grid.LpgGridWorld(batch_size, layout=layout)
      spec = self._env.observation_spec()
      self._single_observation_spec = {
          "observation": specs.Array(spec.shape, spec.dtype)
      }
      self._single_action_spec = specs.BoundedArray(
          (), np.int32, 0, self._env.num_actions - 1
      )

    def _convert(self, ts):
      return published_types.EnvironmentTimestep(
          observation=ts.observation,
          step_type=ts.step_type.astype(jnp.int32),
          reward=ts.reward.astype(jnp.float32),
      )

    def reset(self, rng_key):
      state, ts = self._env.reset(rng_key)
      return state, self._convert(ts)

    def step(self, state, actions):
      state, ts = self._env.step(state, actions)
      return state, self._convert(ts)

    def __hash__(self):
      return id(self)

    def __eq__(self, other):
      return self is other

  return LpgAdapter


def episode_returns(rewards: np.ndarray, last: np.ndarray, num_envs: int):
  """``(returns, end_steps)`` of the finished episodes of streams laid out
  ``[iterations, ..., T, B]`` (as the notebook keeps them): per stream in
  time order, an episode's return sums its rewards up to its LAST step."""
  rewards = rewards.reshape(rewards.shape[0], -1, num_envs)  # [N, T, B]
  last = last.reshape(last.shape[0], -1, num_envs)
  steps_per_iteration = rewards.shape[1] * num_envs
  returns, ends = [], []
  for b in range(num_envs):
    r = rewards[:, :, b].reshape(-1)
    done = last[:, :, b].reshape(-1)
    total = 0.0
    for t in range(r.size):
      total += r[t]
      if done[t]:
        returns.append(total)
        ends.append((t // rewards.shape[1] + 1) * steps_per_iteration)
        total = 0.0
  order = np.argsort(ends, kind="stable")
  return np.asarray(returns)[order], np.asarray(ends)[order]


def run_seed(args, seed: int) -> dict:
  ns = nb.namespace(Path(args.published), f"published_offcatch_{seed}")
  cells = nb.code_cells(Path(args.published), NOTEBOOK)
  from disco_rl.environments.wrappers import batched_jittable_env  # pylint: disable=g-import-not-at-top
  import disco_rl.types as published_types  # pylint: disable=g-import-not-at-top

  ns["LpgAdapter"] = adapter_class(
      published_types,
      batched_jittable_env.BatchedJittableEnvironment,
      args.layout,
  )
  agent_cell = nb.replace(
      nb.cell(cells, "Instantiate a simple MLP agent."),
      CATCH_ENV,
      "return LpgAdapter(batch_size)",
  )
  agent_cell = nb.replace(
      agent_cell,
      "agent_settings.learning_rate = 1e-2",
      f"agent_settings.learning_rate = {args.learning_rate!r}",
  )
  loop_cell = nb.replace(
      nb.cell(cells, "Training loop"),
      "rng_key = jax.random.PRNGKey(0)",
      f"rng_key = jax.random.PRNGKey({seed})",
  )
  if args.batch_size != 64:
    # Batches of batch_size from the same 2 environments (the notebook's
    # num_envs is batch_size // replay_ratio).
    loop_cell = nb.replace(
        loop_cell, "batch_size = 64", f"batch_size = {args.batch_size}"
    )
    loop_cell = nb.replace(
        loop_cell,
        "replay_ratio = 32",
        f"replay_ratio = {args.batch_size // 2}",
    )
  nb.run_cells(
      ns,
      *nb.setup_cells(cells, Path(args.weights)),
      agent_cell,
      nb.cell(cells, "Helper functions for interacting"),
      nb.cell(cells, "A simple Replay buffer."),
      filename=FILENAME,
  )
  loop = nb.SteppedLoop(
      ns,
      loop_cell,
      "# Run the loop.",
      "# Collect all logs and statistics.",
      FILENAME,
  )
  steps_per_iteration = ns["num_envs"] * ns["rollout_len"]
  partial = Path(args.out) / f"seed{seed}.partial.json"
  iterations = -(-args.env_steps // steps_per_iteration)
  chunk = 50
  while loop.done < iterations:
    loop.run(min(chunk, iterations - loop.done))
    # Only the rewards and discounts are needed of the logs the loop keeps.
    ns["all_metrics"].clear()
    ns["all_returns"].clear()
    rewards = np.stack([np.asarray(x) for x in ns["all_rewards"]])
    discounts = np.stack([np.asarray(x) for x in ns["all_discounts"]])
    returns, _ = episode_returns(rewards, discounts == 0, ns["num_envs"])
    recent = returns[-args.last_episodes :]
    partial.write_text(
        json.dumps(
            dict(
                seed=seed,
                env_steps=int(loop.done * steps_per_iteration),
                episode_returns=returns.tolist(),
            )
        )
    )
    print(
        f"seed {seed}: {loop.done * steps_per_iteration} env steps, "
        f"{returns.size} episodes, recent mean return "
        f"{recent.mean() if recent.size else float('nan'):.3f}",
        flush=True,
    )
  returns, ends = episode_returns(rewards, discounts == 0, ns["num_envs"])
  return dict(
      seed=seed,
      env=f"lpg/{args.layout}",
      env_steps=int(iterations * steps_per_iteration),
      learning_rate=args.learning_rate,
      batch_size=args.batch_size,
      episode_returns=returns.tolist(),
      episode_end_steps=ends.tolist(),
      final_return=float(returns[-args.last_episodes :].mean()),
      last_episodes=args.last_episodes,
  )


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--published",
      required=True,
      help="folder of a copy of the published code (disco_rl/, colabs/)",
  )
  parser.add_argument(
      "--weights",
      default=None,
      help="disco_103.npz (default: found as disco-eval finds it)",
  )
  parser.add_argument("--layout", default="dense", choices=lpg_grid.LAYOUTS)
  parser.add_argument("--env_steps", type=int, default=100_000)
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
  parser.add_argument("--learning_rate", type=float, default=1e-2)
  parser.add_argument("--last_episodes", type=int, default=100)
  parser.add_argument(
      "--batch_size",
      type=int,
      default=64,
      help="learner batch (the notebook's 64; 8 costs about an eighth)",
  )
  parser.add_argument("--out", default="benchmarks/results/offcatch/published")
  args = parser.parse_args(argv)
  if not Path(args.published, "disco_rl").is_dir():
    parser.error(f"--published {args.published}: no disco_rl/ folder there.")
  if args.weights is None:
    found = weights_lib.find_disco103()
    args.weights = str(
        found
        or Path(args.published, "disco_rl/update_rules/weights/disco_103.npz")
    )
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  for seed in args.seeds:
    path = out / f"seed{seed}.json"
    if path.is_file():  # finished before
      result = json.loads(path.read_text())
    else:
      result = run_seed(args, seed)
      path.write_text(json.dumps(result))
    print(
        f"seed {seed}: final return {result['final_return']:.3f} "
        f"(last {result['last_episodes']} episodes, "
        f"{result['env_steps']} env steps)",
        flush=True,
    )


if __name__ == "__main__":
  main()
