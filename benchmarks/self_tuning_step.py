"""A self-tuning rule's learner step against its base rule's, interleaved.

  python -m benchmarks.self_tuning_step --out benchmarks/results/self_tuning_step

For each pair (``stac`` / ``actor_critic``, ``self_tuning_ppo`` / ``ppo``)
both agents are built by ``disco-eval``'s own steps on the same environment
with the same loop (``--env``, default Catch 8x8; the published notebook's
loop, batches of 64 trajectories of 29 steps), one learner batch is drawn,
and each agent's jitted learner step (``--steps_per_call`` steps in one
``lax.scan``) is timed round-robin with the other's (``benchmarks.timing``).
Two more candidates: the self-tuning rule with ``meta_gradient="linearized"``
(the outer loss's gradient at the parameters before the update, sharing the
update's forward pass), and the self-tuning rule's outer loss alone (its
gradient at the parameters and the optimiser's step on it), the part of the
self-tuning step that an exact meta-gradient cannot share with the base
step. Writes ``step_cost.csv``: the median seconds per learner step of each,
the ratios to the base step (the issue's target is at most 2). Run it alone
on the machine.
"""

from __future__ import annotations

from pathlib import Path

import jax

from benchmarks import cli
from benchmarks import timing
from disco import evaluation
from disco import self_tuning_step

PAIRS = (("stac", "actor_critic"), ("self_tuning_ppo", "ppo"))
LOOP = dict(
    num_envs=2,
    rollout_len=29,
    batch_size=64,
    replay_capacity=1024,
    min_replay_size=64,
    update_epochs=1,
    num_minibatches=1,
)


def stepper(
    rule: str,
    env: str,
    steps: int,
    tmp: Path,
    outer_only: bool = False,
    meta_gradient: str | None = None,
) -> timing.Stepper:
  """A candidate running ``steps`` learner steps of ``rule`` per call (with
  ``outer_only``, of a self-tuning rule's outer loss instead; with
  ``meta_gradient``, the self-tuning rule's option of that name)."""
  kwargs = {} if meta_gradient is None else dict(meta_gradient=meta_gradient)
  plan = evaluation.build(
      evaluation.make_config(
          rule=rule,
          env=env,
          preset="none",
          output_dir=str(tmp / f"{rule}-{outer_only}-{meta_gradient}"),
          rule_kwargs=kwargs,
          **LOOP,
      ),
      log=lambda _: None,
  )
  state = plan.loop.init(jax.random.PRNGKey(0))
  batch = plan.loop.learner_batch(state, jax.random.PRNGKey(1))
  agent, meta_params = plan.agent, plan.rule.meta_params

  def outer_step(rng, rollout, learner, meta_params, is_meta_training):
    del is_meta_training
    _, grads = self_tuning_step.outer_value_and_grad(
        agent, rng, rollout, learner.params, learner.rule_state, meta_params
    )
    return agent.apply_gradients(learner, grads, learner.rule_state)

  def many(learner):
    def one(learner, rng):
      step = outer_step if outer_only else agent.learner_step
      learner, _ = step(rng, batch, learner, meta_params, False)
      return learner, None

    rngs = jax.random.split(jax.random.PRNGKey(2), steps)
    return jax.lax.scan(one, learner, rngs)[0]

  return timing.Stepper(jax.jit(many), state.learner)


def main(argv=None) -> list[dict]:
  parser = cli.parser(__doc__)
  parser.add_argument("--out", type=Path, required=True)
  parser.add_argument("--env", default="catch")
  parser.add_argument("--steps_per_call", type=int, default=20)
  parser.add_argument("--rounds", type=int, default=15)
  args = parser.parse_args(argv)
  args.out.mkdir(parents=True, exist_ok=True)
  rows = []
  for tuned, base in PAIRS:
    tmp = args.out / "tmp"
    candidates = {
        r: stepper(r, args.env, args.steps_per_call, tmp) for r in (base, tuned)
    }
    candidates["linearized"] = stepper(
        tuned, args.env, args.steps_per_call, tmp, meta_gradient="linearized"
    )
    candidates["outer"] = stepper(
        tuned, args.env, args.steps_per_call, tmp, outer_only=True
    )
    times = timing.interleave(candidates, rounds=args.rounds, warmup=2)
    per_step = {r: times.median(r) / args.steps_per_call for r in candidates}
    rows.append(
        dict(
            self_tuning=tuned,
            base=base,
            env=args.env,
            base_ms_per_step=round(1e3 * per_step[base], 3),
            self_tuning_ms_per_step=round(1e3 * per_step[tuned], 3),
            ratio=round(times.ratio(tuned, base), 3),
            linearized_ms_per_step=round(1e3 * per_step["linearized"], 3),
            linearized_over_base=round(times.ratio("linearized", base), 3),
            outer_ms_per_step=round(1e3 * per_step["outer"], 3),
            outer_over_base=round(times.ratio("outer", base), 3),
            rounds=args.rounds,
        )
    )
    print(rows[-1], flush=True)
  cli.write_csv(args.out / "step_cost.csv", rows)
  return rows


if __name__ == "__main__":
  main()
