"""Meta-parameters in and out of a meta-training run:
``load_initial_meta_params`` (the starting point, checked against the rule) and
``export_meta_params`` (with the metadata ``disco.update_rules.resolve`` reads
back)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from disco import errors
from disco import run_folders
from disco import weights as weights_lib
from disco.meta import settings as settings_lib
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

RANDOM, DISCO103, DISCO = (
    settings_lib.RANDOM,
    settings_lib.DISCO103,
    settings_lib.DISCO,
)


def load_initial_meta_params(
    init: str, rule, init_seed: int, rule_name: str = DISCO
):
  """``'random'`` (``rule.init_meta_params(PRNGKey(init_seed))``),
  ``'disco103'`` (for the Disco rule) or the path of a ``.npz`` of rule
  ``rule_name``'s meta-parameters, checked against the rule's structure.

  Raises:
    UsageError: unknown value, missing or mismatching file.
  """
  init = str(init).strip()
  if init == RANDOM:
    return rule.random_meta_params(init_seed)
  expected = rule.meta_param_shapes()
  if init == DISCO103:
    if rule_name not in (DISCO, DISCO103):
      raise errors.UsageError(
          f"config.init_meta_params={DISCO103!r} holds Disco meta-parameters "
          f"but config.rule={rule_name!r}: use 'random' or a .npz of "
          f"{rule_name!r} meta-parameters."
      )
    try:
      return weights_lib.load_disco103(expected=expected)
    except weights_lib.WeightsError as e:
      raise errors.UsageError(
          f"Cannot load Disco103: {errors.one_line(e)}"
      ) from None
  path = check_init_path(init)
  try:
    npz = weights_lib.NpzFile(path)  # read once: metadata, headers, arrays
  except weights_lib.WeightsError as e:
    raise errors.UsageError(
        f"config.init_meta_params: {errors.one_line(e)}"
    ) from None
  try:
    metadata = npz.metadata()
    if metadata.get("kind") == resolve.AGENT_PARAMS_KIND:
      raise errors.UsageError(
          f"{path} holds trained agent parameters, not a rule's "
          "meta-parameters."
      )
    same = {rule_name} | (
        {DISCO, DISCO103} if rule_name in (DISCO, DISCO103) else set()
    )
    if metadata.get("rule", DISCO) not in same:
      raise errors.UsageError(
          f"{path} holds meta-parameters of rule {metadata['rule']!r}; "
          f"this run meta-trains rule {rule_name!r} (config.rule)."
      )
    return npz.params(expected)
  except weights_lib.WeightsError as e:
    raise errors.UsageError(
        f"config.init_meta_params: {errors.one_line(e)}"
    ) from None
  finally:
    npz.close()


def check_init_path(init: str) -> Path:
  """The file ``config.init_meta_params`` names, which must exist."""
  path = Path(init).expanduser()
  if not init or not (init.endswith(".npz") or path.exists()):
    raise errors.UsageError(
        f"config.init_meta_params={init!r} is neither '{RANDOM}', "
        f"'{DISCO103}' nor the path of a .npz file."
    )
  if not path.is_file():
    raise errors.UsageError(
        f"Meta-parameter file {path} (config.init_meta_params) "
        "does not exist: check the path."
    )
  return path


def export_meta_params(
    path: str | Path,
    meta_params,
    settings,
    meta_step: int,
    with_network: bool = False,
    **extra,
) -> Path:
  """Saves meta-parameters with the metadata ``disco-eval`` resolves them by:
  ``rule``, ``rule_kwargs``, ``meta_step``, the hyper-parameters of ``settings``
  differing from the rule's defaults, with ``with_network`` its agent network
  where it differs from the default, and ``extra``."""
  metadata = dict(
      run_folders.to_jsonable(extra),
      rule=settings.rule,
      rule_kwargs=run_folders.to_jsonable(settings.rule_kwargs),
      meta_step=int(meta_step),
  )
  defaults = rule_registry.default_settings(settings.rule)
  overrides = {}
  for key in ("hyper_params",) + (("network",) if with_network else ()):
    value = run_folders.to_jsonable(getattr(settings, key))
    if value != run_folders.to_jsonable(getattr(defaults, key)):
      overrides[key] = value
  if overrides:
    metadata["settings"] = overrides
  return weights_lib.save_meta_params(
      path,
      jax.tree.map(np.asarray, jax.device_get(meta_params)),
      metadata=metadata,
  )
