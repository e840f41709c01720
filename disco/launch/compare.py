r"""Comparison launcher: rules x environments x seeds, with statistics.

  disco-compare --config.rules="('disco103', 'actor_critic', 'ppo')" \
      --config.envs="('catch', 'delayed_chain', 'gymnax/CartPole-v1')"

(or ``python -m disco.launch.compare ...``). The settings live in
``configs/compare.py``. Every rule runs on every environment with
``num_seeds`` seeds through the ``disco-eval`` steps (``disco.evaluation``)
into ``output_dir/runs/<rule>/<environment>``; runs that finished are
skipped, so a killed sweep continues where it stopped. Then ``output_dir``
gets ``report.md``, ``results.csv``, ``statistics.json`` and figures
(``disco.comparison.report``). With ``run_dirs`` it only aggregates existing
``disco-eval`` folders; with ``shard="i/n"`` it runs every n-th run (for n
processes sharing a sweep). ``--config.hyper_params.<rule>.<key>=VALUE``
sets a rule's hyper-parameter and ``--config.network.<key>=VALUE`` every
rule's agent network; ``tune`` tunes baselines per environment on seeds kept
apart from the reported ones (see ``configs/compare.py`` and
``disco.comparison.tuning``). Bad input ends the program with one line on
stderr and exit status 2 before anything is trained.

The work is the library's (``disco.comparison``: ``CompareSettings``,
``build``, ``run``, ``write``, ``compare``); this module parses the flags.
"""

from __future__ import annotations

import ast

from ml_collections import config_dict

from disco.comparison import runner
from disco.comparison import settings as compare_settings
from disco.launch import common


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/compare.py``."""
  return compare_settings.default_config()


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.hyper_params`` and ``config.rule_kwargs`` an entry per
  registered rule of ``config.rules`` (as the command line names them) with
  that rule's settings and defaults, so that
  ``--config.hyper_params.<rule>.<key>=VALUE`` and
  ``--config.rule_kwargs.<rule>.<key>=VALUE`` may set any of them and no
  other (an unknown key: one line naming the valid ones;
  ``comparison.settings.prepare``)."""
  rules = None
  text = common.override_value(argv, "rules")
  if text is not None:
    try:
      rules = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      return  # the flag parser reports it
    rules = (rules,) if isinstance(rules, str) else rules
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
