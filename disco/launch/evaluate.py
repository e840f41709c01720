r"""Meta-evaluation launcher: train agents with a fixed rule on an environment.

  disco-eval --config.rule=actor_critic --config.total_env_steps=20000 \
      --config.num_seeds=3

(or ``python -m disco.launch.evaluate ...``). The settings live in
``configs/evaluate.py``; pass ``--config=<file>`` for another config file.
``--config.rule=list`` and ``--config.env=list`` print the registered rules
and environments. The run writes ``config.json``, ``metrics.csv``,
``learning_curve.png``, ``params_seed<k>.npz`` and ``summary.json`` into
``output_dir``, each written whole or not at all (``disco.files``), holding
the folder's lock for the whole run (a second process on the folder gets one
line and exit status 2); ``--config.overwrite=True`` first removes an earlier
evaluation's files from a folder marked as an evaluation's (nothing else:
``disco.run_folders``). Bad input (a rule or weights file with non-finite values
included) ends the program with a one-line message on stderr and exit status
2. A seed whose agent diverges (non-finite parameters) is reported with the
environment step where it did, and left out of the curves and final
statistics from there on; if every seed diverges the program exits with
status 3 after writing its outputs.

The work is the library's (``disco.evaluation``: ``EvalSettings``,
``build``, ``run``, ``write``, ``evaluate``); this module parses the flags
and prints. With ``config.distributed`` several processes or hosts share
the seeds (``disco.evaluation``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import evaluation
from disco.environments import registry as env_registry
from disco.launch import common
from disco.update_rules import registry as rule_registry

LIST = "list"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/evaluate.py``."""
  return evaluation.default_config()


def listing(what: str) -> str:
  """The registered rules (``what="rule"``) or environments (``"env"``)."""
  if what == "rule":
    entries = [
        (n, rule_registry.get_entry(n).description)
        for n in rule_registry.rule_names()
    ]
  else:
    entries = [
        (n, env_registry.get_entry(n).description)
        for n in env_registry.env_names()
    ]
  width = max(len(n) for n, _ in entries)
  return "\n".join(f"{n:<{width}}  {d}".rstrip() for n, d in entries)


def body(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> Any:
  """Prints the listing that ``rule=list`` or ``env=list`` asks for
  (returning ``common.LISTED``), else runs the evaluation
  (``evaluation.evaluate``) and returns its summary."""
  for what in ("rule", "env"):
    if config[what] == LIST:
      checks.import_modules(config.imports)
      log(listing(what))
      return common.LISTED
  return evaluation.evaluate(config, log=log, progress=progress)


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.env_settings`` every setting of the environment the
  command line names (``--config.env=NAME``), and ``config.hyper_params``
  and ``config.rule_kwargs`` every setting of the rule it names, with their
  defaults, so that ``--config.env_settings.KEY=VALUE`` (and the rule's
  keys) may set any of them and no other (``evaluation.prepare``)."""
  evaluation.prepare(
      config,
      env=common.override_value(argv, "env"),
      rule=common.override_value(argv, "rule"),
  )


def main() -> None:
  """Console entry point (``disco-eval``)."""
  common.run_launcher(
      evaluation.PROGRAM,
      __doc__,
      evaluation.CONFIG_NAME,
      body,
      prepare=prepare_config,
  )


if __name__ == "__main__":
  main()
