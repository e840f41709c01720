r"""Meta-evaluation launcher: train agents with a fixed rule on an environment.

    disco-eval --config.rule=actor_critic --config.total_env_steps=20000 \
        --config.num_seeds=3

(or ``python -m disco.launch.evaluate``). Settings: ``configs/evaluate.py``;
``--config.rule=list`` and ``--config.env=list`` list the registered rules and
environments. Writes ``config.json``, ``metrics.csv``, ``learning_curve.png``,
``params_seed<k>.npz`` and ``summary.json`` into ``output_dir`` (default
``runs/eval-<rule>-<time>``); ``--config.overwrite=True`` replaces an earlier
evaluation there.

Bad input ends the program with one line on stderr and exit status 2. A diverged
seed is reported and left out of the statistics; if every seed diverges, the
exit status is 3. Python callers use ``disco.evaluation``.
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
    ] + [
        (f.prefix + "<id>", f.description) for f in env_registry.env_families()
    ]
  width = max(len(n) for n, _ in entries)
  return "\n".join(f"{n:<{width}}  {d}".rstrip() for n, d in entries)


def body(
    config: config_dict.ConfigDict,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> Any:
  """Prints the listing ``rule=list`` or ``env=list`` asks for (returning
  ``common.LISTED``), else runs ``evaluation.evaluate`` and returns its summary.
  """
  for what in ("rule", "env"):
    if config[what] == LIST:
      checks.import_modules(config.imports)
      log(listing(what))
      return common.LISTED
  return evaluation.evaluate(config, log=log, progress=progress)


def prepare_config(config: config_dict.ConfigDict, argv: list[str]) -> None:
  """Gives ``config.env_settings``, ``config.hyper_params`` and
  ``config.rule_kwargs`` every setting of the environment and rule the command
  line names, with defaults (its preset's where it has one), so overrides may
  set those and no other (``evaluation.prepare``)."""
  evaluation.prepare(
      config,
      env=common.override_value(argv, "env"),
      rule=common.override_value(argv, "rule"),
      preset=common.override_value(argv, "preset"),
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
