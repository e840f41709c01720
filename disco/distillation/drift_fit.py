"""Distilling a learned drift (LPO) into a smaller one, and drawing drifts.

The student, an ``LPO`` with the teacher's features and PPO term but another
``hidden_size``, has its drift network fitted to the teacher's (before the ReLU)
on a ``Grid`` of ``log r`` in ``[-1, 1]`` and ``A`` in ``[-4, 4]``: by least
squares for ``hidden_size=0`` (linear in the features), else by Adam.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import types
from disco.update_rules import drift as drift_lib
from disco.update_rules import mirror_learning

# (log_r [...], advs [...]) -> drift [...]
DriftFn = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class Grid:
  """A grid of ``num_log_r x num_advs`` points of ``(log r, A)``."""

  log_r_range: tuple[float, float] = (-1.0, 1.0)
  advs_range: tuple[float, float] = (-4.0, 4.0)
  num_log_r: int = 201
  num_advs: int = 161

  def points(self) -> tuple[jax.Array, jax.Array]:
    """``(log_r, advs)``, each ``[num_log_r, num_advs]``."""
    log_r = jnp.linspace(*self.log_r_range, self.num_log_r)
    advs = jnp.linspace(*self.advs_range, self.num_advs)
    return tuple(jnp.meshgrid(log_r, advs, indexing="ij"))


@dataclasses.dataclass(frozen=True)
class Agreement:
  """How close a student's drift is to its teacher's on a grid.

  Attributes:
    rmse: root mean squared difference of the drifts.
    max_abs: largest absolute difference.
    r2: ``1 - SSE / SST`` of the drifts (1: identical).
    teacher_scale: the teacher's root mean square drift.
    net_r2: ``r2`` of the networks' outputs alone, without the shared PPO term
      and ReLU; NaN if not measured.
  """

  rmse: float
  max_abs: float
  r2: float
  teacher_scale: float
  net_r2: float = float("nan")


def check_compatible(
    teacher: mirror_learning.LPO, student: mirror_learning.LPO
) -> None:
  """Raises ValueError (one line) if the student cannot stand for the teacher:
  another feature layout, PPO term or clip."""
  for name in ("features", "ppo_base"):
    if getattr(teacher, name) != getattr(student, name):
      raise ValueError(
          f"Student and teacher differ in {name} ({getattr(student, name)!r} "
          f"vs {getattr(teacher, name)!r}): give the student the teacher's."
      )
  eps_t = teacher.hyper_params["clip_epsilon"]
  eps_s = student.hyper_params["clip_epsilon"]
  if teacher.ppo_base and eps_t != eps_s:
    raise ValueError(
        f"Student and teacher differ in clip_epsilon ({eps_s} vs {eps_t}), "
        "which sets their PPO term: give the student the teacher's."
    )


def _linear_fit(
    student: mirror_learning.LPO,
    log_r: jax.Array,
    advs: jax.Array,
    targets: jax.Array,
) -> types.MetaParams:
  features = drift_lib.FEATURES[student.features][0](log_r, advs)
  x = np.asarray(features, np.float64).reshape(-1, features.shape[-1])
  y = np.asarray(targets, np.float64).reshape(-1)
  weights, *_ = np.linalg.lstsq(x, y, rcond=None)
  like = student.meta_param_shapes()  # one [F, 1] leaf
  return jax.tree.map(
      lambda leaf: jnp.asarray(weights.reshape(leaf.shape), leaf.dtype), like
  )


def distill(
    teacher: mirror_learning.LPO,
    teacher_params: types.MetaParams,
    student: mirror_learning.LPO,
    *,
    grid: Grid = Grid(),
    steps: int = 3000,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> tuple[types.MetaParams, Agreement]:
  """Fits ``student``'s drift network (``check_compatible``) to ``teacher``'s
  with ``teacher_params`` on ``grid`` (hidden units: ``steps`` of Adam at
  ``learning_rate`` from ``seed``); returns its meta-parameters and the
  ``Agreement`` of the drifts."""
  check_compatible(teacher, student)
  log_r, advs = grid.points()
  targets = teacher.drift_net(teacher_params, log_r, advs)
  if student.hidden_size == 0:
    params = _linear_fit(student, log_r, advs, targets)
  else:
    params = jax.tree.map(
        lambda w: w.astype(jnp.float32),
        mirror_learning.LPO(
            hyper_params=student.hyper_params,
            features=student.features,
            hidden_size=student.hidden_size,
            ppo_base=student.ppo_base,
            init="random",
        ).init_meta_params(jax.random.PRNGKey(seed)),
    )
    optimizer = optax.adam(learning_rate)

    def loss(p):
      return jnp.mean(jnp.square(student.drift_net(p, log_r, advs) - targets))

    @jax.jit
    def train(p):
      def step(carry, _):
        p, opt_state = carry
        grads = jax.grad(loss)(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), None

      (p, _), _ = jax.lax.scan(step, (p, optimizer.init(p)), None, steps)
      return p

    params = train(params)
  drifts = agreement(
      lambda x, a: teacher.drift_from_params(teacher_params, x, a),
      lambda x, a: student.drift_from_params(params, x, a),
      grid,
  )
  nets = agreement(
      lambda x, a: teacher.drift_net(teacher_params, x, a),
      lambda x, a: student.drift_net(params, x, a),
      grid,
  )
  return params, dataclasses.replace(drifts, net_r2=nets.r2)


def agreement(teacher: DriftFn, student: DriftFn, grid: Grid = Grid()):
  """``Agreement`` of two drift functions on ``grid``."""
  log_r, advs = grid.points()
  t = np.asarray(teacher(log_r, advs), np.float64)
  s = np.asarray(student(log_r, advs), np.float64)
  sse = float(np.sum(np.square(s - t)))
  sst = float(np.sum(np.square(t - t.mean())))
  return Agreement(
      rmse=float(np.sqrt(np.mean(np.square(s - t)))),
      max_abs=float(np.max(np.abs(s - t))),
      r2=1.0 - sse / sst if sst > 0 else float(sse == 0.0),
      teacher_scale=float(np.sqrt(np.mean(np.square(t)))),
  )


def plot_drifts(
    drifts: Mapping[str, DriftFn],
    path,
    grid: Grid = Grid(),
    advantages: tuple[float, ...] = (-1.0, 1.0),
) -> None:
  """Draws each drift ``f(r, A)`` as a map over ``(r, A)`` (top rows, at most
  three a row) and the objectives ``r A - f(r, A)`` against ``r`` at
  ``advantages`` (bottom row) into the PNG ``path``."""
  from matplotlib import pyplot as plt
  from matplotlib import ticker

  def log_axis(ax):
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.FixedLocator([0.5, 1.0, 2.0]))
    ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("r")

  log_r, advs = grid.points()
  r = np.exp(np.asarray(log_r[:, 0]))
  a_axis = np.asarray(advs[0])
  n = len(drifts)
  columns = min(3, max(n, len(advantages)))
  map_rows = -(-n // columns)
  line_rows = -(-len(advantages) // columns)
  fig, axes = plt.subplots(
      map_rows + line_rows,
      columns,
      figsize=(4.2 * columns, 3.4 * (map_rows + line_rows)),
      squeeze=False,
  )
  map_axes = list(axes[:map_rows].flat)
  line_axes = list(axes[map_rows:].flat)
  values = {name: np.asarray(fn(log_r, advs)) for name, fn in drifts.items()}
  top = max(float(np.quantile(v, 0.99)) for v in values.values()) or 1.0
  for ax, (name, v) in zip(map_axes, values.items(), strict=False):
    mesh = ax.pcolormesh(
        r, a_axis, v.T, vmin=0.0, vmax=top, cmap="viridis", shading="auto"
    )
    log_axis(ax)
    ax.set_title(name)
    ax.set_ylabel("A")
    fig.colorbar(mesh, ax=ax, label="drift f(r, A)")
  for ax in map_axes[n:]:
    ax.axis("off")
  for ax, a in zip(line_axes, advantages, strict=False):
    for name, fn in drifts.items():
      adv = jnp.full_like(log_r[:, 0], a)
      objective = r * a - np.asarray(fn(log_r[:, 0], adv))
      ax.plot(r, objective, label=name)
    log_axis(ax)
    ax.axvline(1.0, color="grey", lw=0.5)
    ax.set_title(f"objective r A - f at A = {a:g}")
  for ax in line_axes[len(advantages) :]:
    ax.axis("off")
  line_axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def standard_drifts(clip_epsilon: float = 0.2) -> dict[str, DriftFn]:
  """PPO's and DPO's drifts (DPO at its published constants)."""
  hp = mirror_learning.DPO_HYPER_PARAMS
  return {
      "PPO": lambda x, a: drift_lib.ppo_drift(x, a, clip_epsilon),
      "DPO": lambda x, a: drift_lib.dpo_drift(
          x, a, hp["dpo_alpha"], hp["dpo_beta"]
      ),
  }
