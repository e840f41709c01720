"""Meta-training launcher: discover or fine-tune a Disco rule on a population.

    disco-meta-train --config.num_meta_steps=100 --config.output_dir=runs/my-rule

(or ``python -m disco.launch.meta_train``). Settings: ``configs/meta_train.py``;
``--config.estimator`` is ``backprop`` (default), ``bmg``, ``es``, ``pes`` or
one a ``--config.imports`` module registers. Outputs in ``output_dir``:
``config.json``, ``metrics.csv`` (a row per logged meta-step), ``rewards.png``
and ``meta_loss.png``, ``checkpoints/<step>/`` (every ``checkpoint_every``
meta-steps and at exit; ``--config.resume=True`` continues from the latest, bit
for bit), ``meta_params.npz`` (evaluate it with ``disco-eval
--config.rule=<dir>/meta_params.npz``), ``summary.json``, and with
``config.validation.every`` > 0 ``validation.csv``, ``validation.png`` and
``best_meta_params.npz``.

Bad settings end the program before training with one line, exit status 2;
``max_consecutive_skips`` non-finite meta-updates in a row stop it with status
3. Python callers use ``disco.meta.trainer``.
"""

from __future__ import annotations

from ml_collections import config_dict

from disco.launch import common
from disco.meta import settings as settings_lib
from disco.meta import trainer
from disco.update_rules import overrides
from disco.update_rules import registry as rule_registry


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` every setting of
  the rule the command line (or config) names, with its default, so overrides
  may set those and no other."""
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
