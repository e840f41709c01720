"""The distillation dataset: learner batches of agents a teacher trains.

Each environment of a split gets a shard ``<split>-<i>.npz``: at
``samples_per_seed`` points of its agents' lifetime (one agent per seed, trained
as ``disco-eval`` would), the batch their learner would train on next, with
their parameters and rule state. Shards are written atomically (a stopped
gathering resumes) and read with ``allow_pickle=False``, checked against the
settings that made them.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import json
from pathlib import Path
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from disco import errors
from disco import evaluation
from disco import files
from disco import ops
from disco import run_folders
from disco import stopping
from disco.distillation import settings as settings_lib
from disco.training import analysis
from disco.update_rules import resolve

HELD_OUT_SEED_OFFSET = 1000
_METADATA_KEY = "__metadata__"
_RETURN_KEY = "__teacher_return__"


@dataclasses.dataclass(frozen=True)
class Shard:
  """One environment's samples and the agent that reads them.

  Attributes:
    split: ``"train"`` or ``"held_out"``.
    env: the environment's name and settings.
    plan: the teacher's evaluation plan on it.
    samples: ``{batch, params, rule_state, learner_steps}``, host arrays
      ``[N, ...]``.
    lifetime: the agents' lifetime in learner updates.
    teacher_return: the agents' mean return over their last episodes.
  """

  split: str
  env: tuple[str, dict[str, Any]]
  plan: evaluation.EvalPlan
  samples: dict[str, Any]
  lifetime: int
  teacher_return: float

  @property
  def num_samples(self) -> int:
    return int(self.samples["learner_steps"].shape[0])

  @property
  def label(self) -> str:
    name, env_settings = self.env
    extra = ",".join(f"{k}={v}" for k, v in env_settings.items())
    return f"{name}:{extra}" if extra else name


def _eval_config(
    settings: settings_lib.DistillSettings,
    env: tuple[str, dict[str, Any]],
    seed: int,
    scratch: Path,
):
  config = evaluation.default_config()
  name, env_settings = env
  gather = settings.dataset
  with config.unlocked():
    config.env_settings = dict(env_settings)
  config.update(
      rule=settings.teacher,
      env=name,
      total_env_steps=gather.total_env_steps,
      num_seeds=gather.num_seeds,
      seed=seed,
      output_dir=str(scratch),
      **gather.loop,
  )
  return config


def _plan(settings, env, seed, teacher, scratch) -> evaluation.EvalPlan:
  try:
    config = _eval_config(settings, env, seed, scratch)
  except (TypeError, ValueError) as e:
    raise errors.UsageError(f"config.dataset: {errors.one_line(e)}") from None
  return evaluation.build(config, log=lambda _: None, rule=teacher)


def _record_fn(plan: evaluation.EvalPlan):
  """``(states [S], rngs [S]) -> samples [S]``, jitted."""

  def record(state, rng):
    return dict(
        batch=plan.loop.learner_batch(state, rng),
        params=state.learner.params,
        rule_state=state.learner.rule_state,
        learner_steps=state.learner_steps,
    )

  return jax.jit(jax.vmap(record))


def record_points(num_calls: int, samples_per_seed: int) -> list[int]:
  """The calls (1-based) after which samples are drawn: evenly over the
  lifetime, the last at its end, at most one per call."""
  points = np.linspace(0, num_calls, samples_per_seed + 1)[1:]
  return sorted({max(1, int(round(p))) for p in points})


def _names(tree) -> tuple[list[str], list[Any], Any]:
  paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  names = [jax.tree_util.keystr(path) for path, _ in paths]
  return names, [leaf for _, leaf in paths], treedef


def _metadata(settings, split, env, seed, plan) -> dict[str, Any]:
  name, env_settings = env
  return run_folders.to_jsonable(
      dict(
          teacher=settings.teacher,
          split=split,
          env=name,
          env_settings=env_settings,
          seeds=plan.seeds,
          seed=seed,
          total_env_steps=settings.dataset.total_env_steps,
          samples_per_seed=settings.dataset.samples_per_seed,
          loop=dict(settings.dataset.loop),
      )
  )


def _save(path: Path, samples, teacher_return: float, metadata: dict) -> None:
  names, leaves, _ = _names(samples)
  arrays = dict(zip(names, (np.asarray(x) for x in leaves), strict=True))
  arrays[_METADATA_KEY] = np.asarray(json.dumps(metadata, sort_keys=True))
  arrays[_RETURN_KEY] = np.asarray(teacher_return, np.float64)
  with files.atomic_write(path) as f:
    np.savez(f, **arrays)


def _load(path: Path, template, expected_metadata: dict[str, Any]):
  """The samples of ``path`` and the teacher's return, checked against
  ``template`` (one sample's structure) and the settings that made it."""
  fix = "use a new output_dir, or overwrite=True to gather it again"
  try:
    with np.load(path, allow_pickle=False) as npz:
      metadata = json.loads(str(npz[_METADATA_KEY]))
      if metadata != expected_metadata:
        differ = sorted(
            k
            for k in set(metadata) | set(expected_metadata)
            if metadata.get(k) != expected_metadata.get(k)
        )
        raise errors.UsageError(
            f"Dataset shard {path} was gathered with other settings "
            f"({', '.join(differ)}): {fix}."
        )
      names, leaves, treedef = _names(template)
      arrays = []
      for name, leaf in zip(names, leaves, strict=True):
        if name not in npz.files:
          raise errors.UsageError(f"Dataset shard {path} lacks {name}: {fix}.")
        array = npz[name]
        if array.shape[1:] != leaf.shape or array.dtype != leaf.dtype:
          raise errors.UsageError(
              f"Dataset shard {path}: {name} is {array.dtype}{list(array.shape)}"
              f", expected {leaf.dtype}[N, {', '.join(map(str, leaf.shape))}]"
              f": {fix}."
          )
        arrays.append(array)
      teacher_return = float(npz[_RETURN_KEY])
  except (OSError, ValueError, KeyError) as e:
    if isinstance(e, errors.UsageError):
      raise
    raise errors.UsageError(
        f"Cannot read dataset shard {path} ({errors.one_line(e)}): {fix}."
    ) from None
  return jax.tree_util.tree_unflatten(treedef, arrays), teacher_return


def _teacher_return(metrics: dict[str, np.ndarray]) -> float:
  curve = analysis.return_curve(metrics, 100)[:, -1]
  finite = curve[np.isfinite(curve)]
  return float(finite.mean()) if finite.size else float("nan")


def gather(
    settings: settings_lib.DistillSettings,
    teacher: resolve.ResolvedRule,
    folder: Path,
    log: Callable[[str], None] = print,
) -> list[Shard]:
  """Every shard of both splits: read from disk, else gathered (the teacher's
  agents trained) and written.

  Raises:
    UsageError: a shard of other settings, or a setting an evaluation refuses.
  """
  folder.mkdir(parents=True, exist_ok=True)
  scratch = folder / "scratch"  # never written: the plans' output_dir
  shards = []
  for split, envs, seed in (
      ("train", settings.envs, settings.dataset.seed),
      (
          "held_out",
          settings.held_out_envs,
          settings.dataset.seed + HELD_OUT_SEED_OFFSET,
      ),
  ):
    for i, env in enumerate(envs):
      plan = _plan(settings, env, seed, teacher, scratch)
      path = folder / f"{split}-{i}.npz"
      metadata = _metadata(settings, split, env, seed, plan)
      record = _record_fn(plan)
      states = jax.eval_shape(
          functools.partial(plan.loop.init_seeds, plan.local_seeds)
      )
      rngs = jax.ShapeDtypeStruct((len(plan.local_seeds), 2), jnp.uint32)
      template = jax.tree.map(
          lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype),
          jax.eval_shape(record, states, rngs),
      )
      if not path.exists():
        log(
            f"Gathering {split} {env[0]} {env[1] or ''}: "
            f"{len(plan.seeds)} agent(s) x {plan.env_steps} env steps"
        )
        _save(path, *_gather_one(plan, settings, record), metadata)
      samples, teacher_return = _load(path, template, metadata)
      shards.append(
          Shard(
              split=split,
              env=env,
              plan=plan,
              samples=samples,
              lifetime=int(plan.loop.lifetime),
              teacher_return=teacher_return,
          )
      )
  return shards


def _draw_keys(seed: int, draws: int, num_seeds: int) -> np.ndarray:
  """The seeds' keys at each of ``draws`` record points,
  ``[draws, num_seeds, 2]``, from a key chain of ``PRNGKey(seed)``."""

  def chain(seed):
    rng, out = jax.random.PRNGKey(seed), []
    for _ in range(draws):
      rng, key = jax.random.split(rng)
      out.append(jax.random.split(key, num_seeds))
    return jnp.stack(out)

  (key_seed,) = ops.prng_seeds([seed])
  return np.asarray(jax.jit(chain)(key_seed))


def _gather_one(plan: evaluation.EvalPlan, settings, record):
  """Trains the plan's agents with the teacher; their samples and mean
  final return."""
  points = set(record_points(plan.num_calls, settings.dataset.samples_per_seed))
  states = plan.loop.init_seeds(plan.local_seeds)
  keys = iter(
      _draw_keys(settings.dataset.seed, len(points), len(plan.local_seeds))
  )
  drawn, chunks = [], []
  bar = tqdm.tqdm(
      range(1, plan.num_calls + 1),
      desc=f"gathering {plan.settings.env}",
      unit="call",
      file=sys.stderr,
      dynamic_ncols=True,
      disable=None,  # off where stderr is not a terminal
  )
  for call in bar:
    stopping.check_stop(f"while gathering the dataset (call {call})")
    states, metrics = plan.loop.run(
        states, plan.rule.meta_params, plan.iterations_per_call
    )
    chunks.append(metrics)
    if call in points:
      drawn.append(jax.device_get(record(states, next(keys))))
  samples = jax.tree.map(lambda *x: np.concatenate(x, axis=0), *drawn)
  return samples, _teacher_return(analysis.concat_metrics(chunks))
