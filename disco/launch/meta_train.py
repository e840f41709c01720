"""Meta-training launcher: discover or fine-tune a Disco rule on a population.

  disco-meta-train --config.num_meta_steps=100 --config.output_dir=runs/my-rule

(or ``python -m disco.launch.meta_train ...``). The settings live in
``configs/meta_train.py``; pass ``--config=<file>`` for another config file.
The run writes into ``output_dir``:

* ``config.json``      the resolved config and the run's environment;
* ``metrics.csv``      one row per logged meta-step (meta loss, its
                        policy-gradient and regulariser parts, meta-gradient
                        and update norms, rewards, fractions of positive and
                        negative rewards per actor step, and every per-group
                        and inner-loop log as ``<group>/...``);
* ``rewards.png``, ``meta_loss.png``  the learning curves;
* ``checkpoints/<step>/``  the last ``keep_checkpoints`` checkpoints (every
                        ``checkpoint_every`` meta-steps and at exit, also on
                        Ctrl-C / SIGTERM); ``--config.resume=True`` continues
                        the run from the latest one, bit for bit;
* ``meta_params.npz``  the final meta-parameters, with metadata naming the
                        rule, so ``disco-eval --config.rule=<dir>/meta_params.npz``
                        evaluates the discovered rule;
* ``summary.json``     final metrics and timings;
* with ``config.validation`` (``every`` > 0): ``validation.csv``,
                        ``validation.png`` and ``best_meta_params.npz``
                        (the meta-parameters with the best score on the
                        held-out environments; ``disco.meta.validation``).
                        ``disco-validate RUN_DIR --follow`` validates the
                        checkpoints from another process instead.

``--config.estimator`` picks the meta-gradient estimator: ``backprop``
(through ``inner_steps`` learner updates; the default), ``es`` (evolution
strategies over whole lifetimes, ``config.es``), ``pes`` (persistent ES
over truncations, ``config.pes``) or one that a module named in
``--config.imports`` registers (``disco.meta.estimator_registry``; level
samplers likewise, ``disco.meta.level_sampler_registry``).

Bad input ends the program with a one-line message on stderr and exit status
2 before anything is trained (every bad setting is named in that line). The
work is done by the library (``disco.meta.trainer``: settings checked once,
``build``, a ``MetaTrainer`` loop with hooks, ``write``), which Python
callers use directly.

Several processes or hosts run one meta-training together on
``jax.distributed`` (``config.distributed``; ``disco.distributed``):
every process starts the same command, the agents are sharded over all
their devices, all write the checkpoints, and process 0 alone prints and
writes the other outputs.

Divergence is handled in the meta-step (see ``disco.meta.divergence``):
diverged agents restart and a non-finite meta-update is skipped; after
``max_consecutive_skips`` skips in a row the run stops with one line and exit
status 3, without a new checkpoint or an export. Checkpoints are written only
after an applied meta-update and never hold non-finite values; a resumed run
falls back past damaged checkpoints (moving them aside).
"""

from __future__ import annotations

from ml_collections import config_dict

from disco.launch import common
from disco.meta import settings as settings_lib
from disco.meta import trainer
from disco.update_rules import overrides
from disco.update_rules import registry as rule_registry


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` every setting
  of the rule the command line (or the config file) names, with its
  default, so that ``--config.hyper_params.KEY=VALUE`` and
  ``--config.rule_kwargs.KEY=VALUE`` may set any of them and no other."""
  name = common.override_value(argv, "rule") or config.get("rule")
  try:
    settings = rule_registry.default_settings(str(name))
  except ValueError:  # the settings pass reports it
    return
  overrides.prepare(config, settings)


def _train(config: config_dict.ConfigDict) -> None:
  trainer.train(config)


def main() -> None:
  """Console entry point (``disco-meta-train``)."""
  common.run_launcher(
      settings_lib.PROGRAM,
      __doc__,
      settings_lib.CONFIG_NAME,
      _train,
      prepare=prepare_config,
  )


if __name__ == "__main__":
  main()
