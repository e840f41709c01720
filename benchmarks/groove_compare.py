r"""Time per LPG meta-step: ours against GROOVE's, interleaved in one run.

  python benchmarks/groove_compare.py                       # ours only
  python benchmarks/groove_compare.py --groove=PATH         # both
  python benchmarks/groove_compare.py --groove=PATH --estimator=es

``PATH`` is a checkout of github.com/EmptyJackson/groove. It is copied to a
temporary folder and patched there (never in place) for current
JAX/flax/gymnax, with the smallest changes that let its meta-gradient step
run (``GROOVE_PATCHES``):

* ``util/jax.py``: ``jax.config`` replaces ``from jax.config import config``
  (removed from JAX);
* ``util/data.py``: the ``evosax`` type imports (annotations only) become
  placeholders;
* ``models/optim.py``: GROOVE calls evosax < 0.2's ``OpenES(popsize,
  pholder_params, opt_name, lrate_*, sigma_*, ...)`` with ``initialize``,
  ``ask`` and ``tell(x, fitness, state, params)``; an adapter with those
  calls over evosax 0.3's ``Open_ES`` replaces the import
  (``EVOSAX_ADAPTER``: the same OpenAI-ES, learning rate and sigma decays
  as optax schedules, GROOVE's own pairwise rank fitness passed through
  unshaped; ``mean_decay``, 0 in GROOVE, is not supported);
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
setting), GROOVE's trained by SGD, ours by Adam. Ours read the tabular
states as indices, as the config does (the same function as GROOVE's
one-hot vectors, the first linear layer a gather). Steps alternate, ours then
GROOVE's, each timed to completion after two untimed calls (the first compiles;
GROOVE's ES step compiles again on the second).

``--estimator=es`` times one ES generation instead: ``--agents`` antithetic
pairs (GROOVE's ``--use_es``: ``2 x num_agents`` candidates; ours
``es.population_size = 2 x agents``), each member training one fresh agent
on ``dense`` for a lifetime of ``--lifetime`` updates (``--envs``
environments, rollouts of 20). GROOVE then evaluates every member's agent on
one episode per environment (500 steps on ``dense``) and draws new levels
(its train loop's ``sample``); ours takes the fitness from the episodes of
the lifetime's last 8 iterations. The environment steps of a generation are
printed for both.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
import re
import shutil
import sys
import tempfile

import jax

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing

REPO = Path(__file__).resolve().parents[1]
# GROOVE evaluates an ES member's agent on one whole episode of ``dense``.
DENSE_EPISODE_STEPS = 500

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
        "from models.evosax_adapter import OpenES",
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


# models/evosax_adapter.py of the patched copy (see the docstring).
EVOSAX_ADAPTER = '''"""evosax < 0.2's OpenES calls, as GROOVE makes them, on evosax 0.3."""
import jax
import optax
from evosax.algorithms import Open_ES
from evosax.core.fitness_shaping import identity_fitness_shaping_fn


class OpenES:
    def __init__(self, popsize, maximize, pholder_params, opt_name, lrate_init,
                 lrate_decay, lrate_limit, sigma_init, sigma_decay,
                 sigma_limit, mean_decay):
        if mean_decay:
            raise ValueError("mean_decay is not supported by the adapter")
        self.popsize = popsize
        self.sign = -1.0 if maximize else 1.0  # evosax 0.3 minimises
        self.pholder_params = pholder_params
        lrate = optax.exponential_decay(
            lrate_init, 1, lrate_decay, end_value=lrate_limit)
        sigma = optax.exponential_decay(
            sigma_init, 1, sigma_decay, end_value=sigma_limit)
        optimizer = {"adam": optax.adam, "sgd": optax.sgd}[opt_name](lrate)
        self.es = Open_ES(popsize, pholder_params, optimizer=optimizer,
                          std_schedule=sigma,
                          fitness_shaping_fn=identity_fitness_shaping_fn)

    @property
    def default_params(self):
        return self.es.default_params

    def initialize(self, rng, params):
        return self.es.init(rng, self.pholder_params, params)

    def ask(self, rng, state, params):
        return self.es.ask(rng, state, params)

    def tell(self, x, fitness, state, params):
        return self.es.tell(
            jax.random.PRNGKey(0), x, self.sign * fitness, state, params)[0]
'''


def patched_groove(source: Path, dest: Path) -> Path:
  """A patched copy of GROOVE at ``dest``."""
  shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git"))
  (dest / "models" / "evosax_adapter.py").write_text(EVOSAX_ADAPTER)
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


def groove_settings(
    parse_args,
    mode: str,
    *,
    envs,
    agents,
    rollout_len,
    inner_steps,
    gru,
    extra=(),
):
  """GROOVE's parsed arguments for ``agents`` agents on grid-world ``mode``
  (``extra``: more of its flags)."""
  return parse_args(
      [
          *extra,
          f"--env_mode={mode}",
          f"--env_workers={envs}",
          f"--num_agents={agents}",
          "--num_mini_batches=1",
          f"--train_rollout_len={rollout_len}",
          f"--num_agent_updates={inner_steps}",
          f"--lpg_gru_width={gru}",
      ]
  )


def set_groove_lifetime(mode: str, lifetime: int) -> None:
  """Agent lifetimes of ``lifetime`` updates on grid-world ``mode``, in
  GROOVE's tables (read when it samples levels and builds its ES step)."""
  grid = importlib.import_module("environments.gridworld.configs")
  grid.ENV_MODE_LIFETIME[mode] = lambda _: lifetime
  grid.ENV_MODE_LIFETIME_MAX[mode] = lifetime


def groove_jitted_step(meta, gargs, sampler, resample: bool):
  """GROOVE's train step (its ``train.py`` loop body) on the carry ``(rng,
  train_state, agents, critics)``; with ``resample``, agents whose lifetime
  ended restart on new levels, as its loop does."""
  step_fn = meta.make_lpg_train_step(gargs, sampler)

  @jax.jit
  def step(carry):
    rng, train_state, agents, critics = carry
    rng, key, sample_key = jax.random.split(rng, 3)
    train_state, agents, critics, metrics = step_fn(
        rng=key,
        lpg_train_state=train_state,
        agent_states=agents,
        value_critic_states=critics,
    )
    if resample:
      _, agents, critics = sampler.sample(sample_key, None, agents, critics)
    return (rng, train_state, agents, critics), metrics

  return step


def groove_step(groove: Path, args):
  """GROOVE's jitted meta-gradient (or ES) step and its initial carry."""
  sys.path.insert(0, str(groove))
  parse_args = importlib.import_module("experiments.parse_args").parse_args
  meta = importlib.import_module("meta.meta")
  level_sampler_lib = importlib.import_module("environments.level_sampler")
  es = args.estimator == "es"
  if es:
    set_groove_lifetime("dense", args.lifetime)
  gargs = groove_settings(
      parse_args,
      "dense",
      envs=args.envs,
      agents=args.agents,
      rollout_len=args.rollout_len,
      inner_steps=args.inner_steps,
      gru=args.gru,
      extra=["--use_es"] if es else [],
  )
  rng = jax.random.PRNGKey(args.seed)
  rng, lpg_rng, buffer_rng, agent_rng = jax.random.split(rng, 4)
  train_state = meta.create_lpg_train_state(lpg_rng, gargs)
  sampler = level_sampler_lib.LevelSampler(gargs)
  buffer = sampler.initialize_buffer(buffer_rng)
  _, agents, critics = sampler.initial_sample(
      agent_rng, buffer, args.agents, not es
  )
  # ES: every lifetime ended, and GROOVE's loop draws new levels.
  step = groove_jitted_step(meta, gargs, sampler, resample=es)
  return step, (rng, train_state, agents, critics)


def our_step(args, out_dir: Path):
  """Our population's meta-step, initial state and (ES) env steps per
  generation (configs/meta_train_lpg)."""
  from disco import checks
  from disco.meta import trainer as mt

  config = checks.load_config_file(REPO / "configs" / "meta_train_lpg.py", None)
  es = args.estimator == "es"
  # The config's grid-world settings (tabular states as indices).
  (dense,) = [g for g in config.population if g["env"] == "lpg/dense"]
  config.population = (
      dict(
          env="lpg/dense",
          env_settings=dict(dense["env_settings"]),
          num_agents=1 if es else args.agents,
      ),
  )
  if es:
    config.estimator = "es"
    config.es.population_size = 2 * args.agents
    config.es.lifetime_iterations = args.lifetime
    config.es.final_iterations = min(8, args.lifetime)
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
  steps = plan.population.env_steps_per_generation() if es else None
  return plan.population.step, mt.initial_state(plan), steps


def main():
  parser = cli.parser(__doc__)
  parser.add_argument("--groove", type=Path, default=None)
  parser.add_argument(
      "--estimator", choices=("backprop", "es"), default="backprop"
  )
  # ES: each member's lifetime in agent updates.
  parser.add_argument("--lifetime", type=int, default=50)
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
    ours, state, env_steps = our_step(args, tmp / "ours")
    steps = dict(ours=timing.Stepper(ours, state, logs=True))
    if args.groove is not None:
      if not (args.groove / "models" / "lpg.py").is_file():
        cli.usage_error(f"--groove={args.groove} is not a GROOVE checkout.")
      groove = patched_groove(args.groove, tmp / "groove")
      step, carry = groove_step(groove, args)
      steps["groove"] = timing.Stepper(step, carry, logs=True)
    # Two untimed calls each: GROOVE's ES step retraces once (its state's
    # dtypes settle).
    times = timing.interleave(steps, args.steps, warmup=2)

  if args.estimator == "es":
    groove_steps = (
        2
        * args.agents
        * args.envs
        * (args.lifetime * args.rollout_len + DENSE_EPISODE_STEPS)
    )
    print(
        f"LPG ES generation: {2 * args.agents} members x {args.envs} envs, "
        f"lifetimes of {args.lifetime} updates, rollouts of "
        f"{args.rollout_len}, GRU {args.gru}; env steps per generation: "
        f"ours {env_steps}, GROOVE {groove_steps}; "
        f"{jax.devices()[0].platform}, {args.steps} interleaved steps"
    )
  else:
    print(
        f"LPG meta-step: {args.agents} agents x {args.envs} envs, rollouts of "
        f"{args.rollout_len}, K={args.inner_steps}, GRU {args.gru}; "
        f"{jax.devices()[0].platform}, {args.steps} interleaved steps"
    )
  print(
      cli.table_header(
          ("code", "compile + first step (s)", "median s / meta-step")
      )
  )
  for name in steps:
    print(f"| {name} | {times.first[name]:.1f} | {times.median(name):.3f} |")
  if "groove" in steps:
    ratio = times.ratio("groove", "ours")
    print(f"GROOVE / ours time per meta-step: {ratio:.2f}x")


if __name__ == "__main__":
  with contextlib.suppress(KeyboardInterrupt):
    main()
