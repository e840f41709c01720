r"""Comparison launcher: rules x environments x seeds, with statistics.

    disco-compare --config.rules="('disco103', 'actor_critic', 'ppo')" \
        --config.envs="('catch', 'delayed_chain', 'gymnax/CartPole-v1')"

(or ``python -m disco.launch.compare``). Settings: ``configs/compare.py``. Each
rule runs on each environment into ``output_dir/runs/<rule>/<environment>``
(finished runs are skipped), then ``output_dir`` gets ``report.md``,
``results.csv``, ``statistics.json`` and figures; ``run_dirs`` only aggregates
existing ``disco-eval`` folders, ``shard="i/n"`` runs every n-th run, ``tune``
tunes baselines on separate seeds.

Bad input ends the program with one line on stderr and exit status 2 before
anything is trained. Python callers use ``disco.comparison``.
"""

from __future__ import annotations

from ml_collections import config_dict
from ml_collections.config_flags import tuple_parser

from disco.comparison import runner
from disco.comparison import settings as compare_settings
from disco.launch import common


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/compare.py``."""
  return compare_settings.default_config()


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` an entry per
  registered rule of ``config.rules`` (as the command line names them) with its
  settings and defaults, so overrides may set those and no other
  (``comparison.settings.prepare``)."""
  text = common.override_value(argv, "rules")
  try:  # as the flag parser reads it: ``ppo`` is ``('ppo',)``
    rules = None if text is None else tuple_parser.TupleParser().parse(text)
  except ValueError:
    return  # the flag parser reports it
  compare_settings.prepare(config, rules)


def main() -> None:
  """Console entry point (``disco-compare``)."""
  common.run_launcher(
      compare_settings.PROGRAM,
      __doc__,
      compare_settings.CONFIG_NAME,
      runner.compare,
      prepare=prepare_config,
  )


if __name__ == "__main__":
  main()
