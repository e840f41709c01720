"""Running a distillation: gather the dataset, fit the student, measure its
agreement."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import time
from typing import Any

import jax
import numpy as np

from disco.distillation import dataset as dataset_lib
from disco.distillation import fitting
from disco.distillation import plan as plan_lib


@dataclasses.dataclass(frozen=True)
class DistillResult:
  """What ``run`` returns.

  Attributes:
    shards: the dataset's shards, training and held-out.
    init: the untrained student's meta-parameters.
    params: the fitted student's meta-parameters.
    history: the fit's rows (``fit.csv``).
    agreement: the rows of ``agreement.csv``.
    gather_seconds: seconds gathering the dataset.
    fit_seconds: seconds fitting.
  """

  shards: list[dataset_lib.Shard]
  init: Any
  params: Any
  history: list[dict[str, float]]
  agreement: list[dict[str, Any]]
  gather_seconds: float
  fit_seconds: float


def num_params(tree: Any) -> int:
  """The number of entries of every array of ``tree``."""
  return int(sum(np.size(x) for x in jax.tree.leaves(tree)))


def _agreement_rows(
    pairs: list[fitting.Pair], params: Any, init: Any
) -> list[dict[str, Any]]:
  rows = []
  for pair in pairs:
    measured = fitting.agreement(pair, dict(student=params, untrained=init))
    for who, figures in measured.items():
      rows.append(
          dict(
              split=pair.shard.split,
              env=pair.shard.label,
              who=who,
              samples=pair.shard.num_samples,
              **figures,
          )
      )
  return rows


def run(
    plan: plan_lib.DistillPlan, log: Callable[[str], None] = print
) -> DistillResult:
  """Gathers the dataset (or reuses its shards), fits the student on the
  training shards and measures it on every shard.

  Raises:
    UsageError: a dataset shard made with other settings.
  """
  settings, teacher, heads = plan.settings, plan.teacher, plan.heads
  start = time.perf_counter()
  shards = dataset_lib.gather(settings, teacher, plan.dataset_dir, log)
  gather_seconds = time.perf_counter() - start
  pairs = [fitting.Pair(s, teacher.meta_params, plan.student) for s in shards]
  train = [p for p in pairs if p.shard.split == "train"]
  init = plan.student.random_meta_params(settings.fit.seed)
  log(
      f"Fitting a student of {num_params(init):,} meta-parameters (teacher "
      f"{num_params(teacher.meta_params):,}) on "
      f"{sum(p.shard.num_samples for p in train)} samples of "
      f"{len(train)} environment(s), {settings.fit.steps} steps"
  )
  start = time.perf_counter()
  params, history = fitting.fit(
      train,
      init,
      settings.fit,
      lambda _, row: log(
          f"step {row['step']}: loss {row['loss']:.4g} "
          + " ".join(f"{k} {row[f'{k}_kl']:.3g}" for k in heads)
      ),
  )
  fit_seconds = time.perf_counter() - start
  return DistillResult(
      shards=shards,
      init=init,
      params=params,
      history=history,
      agreement=_agreement_rows(pairs, params, init),
      gather_seconds=gather_seconds,
      fit_seconds=fit_seconds,
  )
