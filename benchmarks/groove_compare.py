r"""Time per LPG meta-step: ours against GROOVE's, interleaved in one run.

  python benchmarks/groove_compare.py                       # ours only
  python benchmarks/groove_compare.py --groove=PATH         # both

``PATH`` is a checkout of github.com/EmptyJackson/groove. It is copied to a
temporary folder and patched there (never in place) for current
JAX/flax/gymnax, with the smallest changes that let its meta-gradient step
run (``GROOVE_PATCHES``):

* ``util/jax.py``: ``jax.config`` replaces ``from jax.config import config``
  (removed from JAX);
* ``util/data.py``, ``models/optim.py``: the ``evosax`` imports become
  placeholders (only its ES path uses them; the meta-gradient path does not);
* ``models/lpg.py``: ``nn.GRUCell`` is given its ``features`` (flax >= 0.7
  requires it);
* gymnax 1.0: ``GridWorld`` gets ``is_terminated`` (its ``is_terminal``,
  which already counts the time limit as GROOVE did), and the rollout reads
  ``step``'s extra ``truncated`` output;
* ``jax.tree_map`` becomes ``jax.tree.map`` everywhere (removed from JAX).

Both sides run the same work: ``--agents`` agents on the LPG grid world
``dense`` (tabular), ``--envs`` environments per agent, rollouts of
``--rollout_len`` steps, ``--inner_steps`` (K) agent updates per meta-step,
a GRU of ``--gru`` units, one device. GROOVE also evaluates every agent on
4 episodes per meta-step (part of its step). Agents and value functions are
linear on both sides (``configs/meta_train_lpg.py``; GROOVE's tabular
setting), GROOVE's trained by SGD, ours by Adam. Steps alternate, ours then
GROOVE's, each timed to completion after a compiling first call.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from pathlib import Path
import re
import shutil
import sys
import tempfile
import time

import jax
import numpy as np

REPO = Path(__file__).resolve().parents[1]

# (file, regular expression, replacement) applied to a copy of GROOVE.
GROOVE_PATCHES = (
    (
        "util/jax.py",
        r"from jax\.config import config as jax_config",
        "jax_config = jax.config",
    ),
    (
        "util/data.py",
        r"from evosax import Strategy, EvoParams, EvoState",
        "Strategy = EvoParams = EvoState = object  # evosax: ES only",
    ),
    (
        "models/optim.py",
        r"from evosax import OpenES",
        "OpenES = None  # evosax: ES only",
    ),
    (
        "environments/gridworld/gridworld.py",
        r"(\n    def is_terminal\(self, state: EnvState, params: EnvParams\))",
        r"\n    def is_terminated(self, state, params):\n"
        r"        return self.is_terminal(state, params)\n\1",
    ),
    (
        "environments/rollout.py",
        r"next_obs, next_state, reward, done, info = self\.env\.step\(",
        "next_obs, next_state, reward, done, _, info = self.env.step(",
    ),
    (
        "models/lpg.py",
        r"nn\.GRUCell\(\)",
        "nn.GRUCell(features=gru_state.shape[-1])",
    ),
)


def patched_groove(source: Path, dest: Path) -> Path:
  """A patched copy of GROOVE at ``dest``."""
  shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git"))
  for name, pattern, repl in GROOVE_PATCHES:
    path = dest / name
    text, n = re.subn(pattern, repl, path.read_text())
    if n == 0:
      raise SystemExit(f"GROOVE patch did not apply: {name}: {pattern}")
    path.write_text(text)
  for path in dest.rglob("*.py"):
    text = path.read_text()
    if "jax.tree_map" in text:
      path.write_text(text.replace("jax.tree_map", "jax.tree.map"))
  return dest


def groove_step(groove: Path, args):
  """GROOVE's jitted meta-gradient step and its initial carry."""
  sys.path.insert(0, str(groove))
  parse_args = importlib.import_module("experiments.parse_args").parse_args
  meta = importlib.import_module("meta.meta")
  level_sampler_lib = importlib.import_module("environments.level_sampler")
  gargs = parse_args(
      [
          "--env_mode=dense",
          f"--env_workers={args.envs}",
          f"--num_agents={args.agents}",
          "--num_mini_batches=1",
          f"--train_rollout_len={args.rollout_len}",
          f"--num_agent_updates={args.inner_steps}",
          f"--lpg_gru_width={args.gru}",
      ]
  )
  rng = jax.random.PRNGKey(args.seed)
  rng, lpg_rng, buffer_rng, agent_rng = jax.random.split(rng, 4)
  train_state = meta.create_lpg_train_state(lpg_rng, gargs)
  sampler = level_sampler_lib.LevelSampler(gargs)
  buffer = sampler.initialize_buffer(buffer_rng)
  _, agents, critics = sampler.initial_sample(
      agent_rng, buffer, args.agents, True
  )
  step_fn = meta.make_lpg_train_step(gargs, sampler)

  @jax.jit
  def step(carry):
    rng, train_state, agents, critics = carry
    rng, key = jax.random.split(rng)
    train_state, agents, critics, metrics = step_fn(
        rng=key,
        lpg_train_state=train_state,
        agent_states=agents,
        value_critic_states=critics,
    )
    return (rng, train_state, agents, critics), metrics

  return step, (rng, train_state, agents, critics)


def our_step(args, out_dir: Path):
  """Our population's meta-step and initial state (configs/meta_train_lpg)."""
  from disco.launch import common
  from disco.launch import meta_train as mt

  config = common.load_config_file(REPO / "configs" / "meta_train_lpg.py", None)
  config.population = (
      dict(env="lpg/dense", env_settings={}, num_agents=args.agents),
  )
  config.num_devices = 1
  config.batch_size = args.envs
  config.rollout_len = args.rollout_len
  config.inner_steps = args.inner_steps
  config.lifetime_updates = (0, 0)
  config.rule_kwargs = dict(net=dict(hidden_size=args.gru))
  if args.agent_dense is not None:
    config.agent.network.dense = tuple(args.agent_dense)
  config.seed = args.seed
  if args.max_unrolled is not None:
    config.max_unrolled_inner_steps = args.max_unrolled
  config.output_dir = str(out_dir)
  plan = mt.build(config)
  return plan.population.step, mt.initial_state(plan)


def timed(fn, carry):
  t0 = time.perf_counter()
  carry, logs = fn(carry)
  jax.block_until_ready((carry, logs))
  return carry, time.perf_counter() - t0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--groove", type=Path, default=None)
  parser.add_argument("--agents", type=int, default=8)
  parser.add_argument("--envs", type=int, default=64)
  parser.add_argument("--rollout_len", type=int, default=20)
  parser.add_argument("--inner_steps", type=int, default=5)
  parser.add_argument("--gru", type=int, default=256)
  # Our agents' hidden layers (default: the config's, linear as GROOVE's).
  parser.add_argument("--agent_dense", type=int, nargs="*", default=None)
  # Our max_unrolled_inner_steps (default: the config's).
  parser.add_argument("--max_unrolled", type=int, default=None)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    steps = {}
    ours, state = our_step(args, tmp / "ours")
    steps["ours"] = [lambda s: ours(s), state, []]
    if args.groove is not None:
      if not (args.groove / "models" / "lpg.py").is_file():
        raise SystemExit(f"--groove={args.groove} is not a GROOVE checkout.")
      groove = patched_groove(args.groove, tmp / "groove")
      step, carry = groove_step(groove, args)
      steps["groove"] = [step, carry, []]
    compile_s = {}
    for name, entry in steps.items():
      entry[1], compile_s[name] = timed(entry[0], entry[1])
    for _ in range(args.steps):
      for entry in steps.values():
        entry[1], seconds = timed(entry[0], entry[1])
        entry[2].append(seconds)

  print(
      f"LPG meta-step: {args.agents} agents x {args.envs} envs, rollouts of "
      f"{args.rollout_len}, K={args.inner_steps}, GRU {args.gru}; "
      f"{jax.devices()[0].platform}, {args.steps} interleaved steps"
  )
  print("| code | compile + first step (s) | median s / meta-step |")
  print("|---|---|---|")
  for name, entry in steps.items():
    print(f"| {name} | {compile_s[name]:.1f} | {np.median(entry[2]):.3f} |")
  if "groove" in steps:
    ratio = np.median(steps["groove"][2]) / np.median(steps["ours"][2])
    print(f"GROOVE / ours time per meta-step: {ratio:.2f}x")


if __name__ == "__main__":
  with contextlib.suppress(KeyboardInterrupt):
    main()
