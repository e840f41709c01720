"""What the command lines share: absl flags with an ``ml_collections``
``--config`` file overridden as ``--config.key=value``, the entry point
``run_launcher``, and one-line failures with exit statuses:
``errors.UsageError`` (or a path name too long) 2, ``errors.Diverged`` 3,
``errors.ResourceError`` (or a full disk, exhausted device memory) 1,
SIGINT/SIGTERM 130."""

from __future__ import annotations

from collections.abc import Callable, Sequence
import difflib
import os
from pathlib import Path
import re
import sys
from typing import Any, NoReturn

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_dict
from ml_collections import config_flags
from ml_collections.config_flags import config_path as ml_config_path

from disco import checks
from disco import compile_cache
from disco import errors
from disco import stopping
from disco.update_rules import migrations
from disco.update_rules import overrides

# What a launcher's body returns when it printed a listing (``rule=list``):
# the list alone is the output, without the compilation-cache line.
LISTED = object()


def fail(
    program: str, message: Any, status: int = 2, at_once: bool = False
) -> NoReturn:
  """Prints a one-line error and exits with ``status``; ``at_once`` skips the
  interpreter's shutdown (after flushing), after a failed write whose background
  writers would print more errors."""
  print(f"{program}: error: {errors.one_line(message)}", file=sys.stderr)
  if at_once:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
  sys.exit(status)


# --------------------------------------------------------- command line ----


_CONFIG_FILE_ARG = re.compile(r"^--?config(=(.*))?$")
# ``--config.KEY=VALUE`` or ``--config.KEY`` (its value the next argument).
_OVERRIDE_ARG = re.compile(r"^--?config\.([^=]+)(=.*)?$")


def config_file_from_argv(
    argv: Sequence[str], default: Path
) -> tuple[Path, str | None, list[str]]:
  """The ``--config=FILE[:ARG]`` of the command line (else ``default``), its
  argument, and ``argv`` without it."""
  rest, found = [], None
  i = 0
  while i < len(argv):
    m = _CONFIG_FILE_ARG.match(argv[i])
    if m and found is None:
      if m.group(1):
        found = m.group(2)
      else:
        found = argv[i + 1] if i + 1 < len(argv) else ""
        i += 1
    else:
      rest.append(argv[i])
    i += 1
  if found is None:
    return default, None, rest
  if Path(found).exists() or ":" not in found:
    return Path(found), None, rest
  path, arg = found.split(":", 1)
  return Path(path), arg, rest


def _a_setting(value: Any) -> str:
  """``value``'s kind in words: ``"a string"``, ``"an integer"``, ..."""
  kinds = {
      str: "a string",
      bool: "a True/False",
      int: "an integer",
      float: "a number",
      tuple: "a tuple",
      list: "a list",
      type(None): "an unset (None)",
  }
  return kinds.get(type(value), f"a {type(value).__name__}")


def unknown_override(
    argv: Sequence[str], config: config_dict.ConfigDict
) -> str | None:
  """Describes the first ``--config.a.b=...`` naming a key ``config`` lacks
  (with close matches), or a key under a setting that is not a group; None if
  none."""
  for arg in argv:
    m = re.match(r"^--?(?:no)?config\.([^=]+)", arg)
    if not m:
      continue
    node, path = config, []
    for key in m.group(1).split("."):
      if path and not isinstance(node, config_dict.ConfigDict):
        setting = "config." + ".".join(path)
        parent = config
        for p in path[:-1]:
          parent = parent[p]
        close = difflib.get_close_matches(key, list(parent.keys()), 1)
        hint = "".join(
            f" Did you mean 'config.{'.'.join([*path[:-1], c])}'?"
            for c in close
        )
        return (
            f"{setting} is {_a_setting(node)} setting ({node!r}), not a "
            f"group of settings: it has no key '{key}' (in "
            f"{arg.split('=')[0]}). Set it itself as --{setting}=VALUE." + hint
        )
      if not isinstance(node, config_dict.ConfigDict) or key not in node:
        where = "config" + "".join(f".{p}" for p in path)
        keys = (
            list(node.keys())
            if isinstance(node, config_dict.ConfigDict)
            else []
        )
        close = difflib.get_close_matches(key, keys, 2)
        hint = " or ".join(f"'{where}.{c}'" for c in close)
        # A rule's setting that moved (rule_kwargs -> hyper_params).
        rule = override_value(argv, "rule") or config.get("rule")
        moved = migrations.new_key(str(rule), ".".join([*path, key]))
        if moved is not None:
          hint = f"'config.{moved}' (it moved there)"
        return (
            f"Unknown config key '{where}.{key}' (in {arg.split('=')[0]})."
            + (f" Did you mean {hint}?" if hint else "")
            + f" Valid keys of {where}: {', '.join(sorted(keys)) or 'none'}."
        )
      node, path = node[key], [*path, key]
  return None


def parse_config_flags(
    argv: Sequence[str],
    default_config: Path,
    help_text: str,
    flag_values: flags.FlagValues | None = None,
    prepare: Callable[[config_dict.ConfigDict, list[str]], None] | None = None,
) -> list[str]:
  """Defines ``--config`` on ``flag_values`` (default: absl's FLAGS) and parses
  ``argv`` (``--config=FILE[:ARG]``, default ``default_config``, and
  ``--config.key=value`` overrides, applied after ``prepare(config, argv)``);
  returns the remaining arguments. The modules of ``imports`` are imported
  before ``prepare`` runs.

  Raises:
    UsageError: unknown flags or config keys, bad values, or a config file that
      does not load.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  path, arg, argv = config_file_from_argv(list(argv), default_config)
  config = checks.load_config_file(path, arg)
  # A module of --config.imports may register what the other flags name.
  checks.import_modules(
      override_value(argv, "imports") or config.get("imports", "")
  )
  if prepare is not None:
    prepare(config, argv)
  argv = last_tuple_overrides(argv, config)
  try:
    if "config" not in fv:
      config_flags.DEFINE_config_dict(
          "config",
          config,
          help_text,
          flag_values=fv,
          lock_config=True,
          sys_argv=argv,
      )
    return fv(argv)
  except Exception as e:  # noqa: BLE001 - every parse failure is a usage error
    # ml_collections: AttributeError/KeyError for unknown keys, TypeError for
    # a key under a non-group setting.
    message = None
    if isinstance(e, (AttributeError, KeyError, TypeError)):
      message = unknown_override(argv, config)
    raise errors.UsageError(message or errors.one_line(e)) from None


def _is_tuple_setting(key: str, config: config_dict.ConfigDict) -> bool:
  """Whether ``config``'s setting ``key`` (``a.b``) holds a tuple (False for
  a key it lacks: the parser reports that)."""
  try:
    kind = ml_config_path.get_type(key, config)
  except Exception:  # noqa: BLE001 - any lookup failure: not a tuple
    return False
  return kind is tuple or ml_config_path.get_origin(kind) is tuple


def last_tuple_overrides(
    argv: Sequence[str], config: config_dict.ConfigDict
) -> list[str]:
  """``argv`` (program name, then arguments) keeping only the last of the
  ``--config.KEY=VALUE`` (or ``--config.KEY VALUE``) flags that set one tuple
  setting: ``ml_collections`` would join their values. Nothing after ``--`` is a
  flag."""
  argv = list(argv)
  spans: list[tuple[str, int, int]] = []  # (key, first, past the last)
  i = 1
  while i < len(argv) and argv[i] != "--":
    m = _OVERRIDE_ARG.match(argv[i])
    end = i + 1
    if m and _is_tuple_setting(m.group(1), config):
      if m.group(2) is None and end < len(argv):
        end += 1  # --config.KEY VALUE
      spans.append((m.group(1), i, end))
    i = end
  last = {key: first for key, first, _ in spans}
  dropped = {
      j
      for key, first, end in spans
      if last[key] != first
      for j in range(first, end)
  }
  return [a for j, a in enumerate(argv) if j not in dropped]


def override_value(argv: Sequence[str], key: str) -> str | None:
  """The last value given as ``--config.<key>=VALUE`` in ``argv``, if any."""
  value = None
  for arg in argv:
    if arg.startswith(f"--config.{key}="):
      value = arg.split("=", 1)[1]
  return value


def print_rule_settings(
    program: str, config: config_dict.ConfigDict, names: str | None
) -> None:
  """Prints the settings of the rules ``names`` (comma-separated; None: every
  rule) after importing ``config.imports``; an unknown name fails with status 2.
  """
  try:
    checks.import_modules(config.get("imports", ""))
    wanted = None
    if names is not None:
      wanted = [n.strip() for n in names.split(",") if n.strip()]
    print(overrides.describe(wanted))
  except (errors.UsageError, ValueError) as e:
    fail(program, e)


def _define_rule_listing_flags() -> None:
  """``--list_rules`` and ``--describe_rule`` (once per process)."""
  if "describe_rule" in flags.FLAGS:
    return
  flags.DEFINE_boolean(
      "list_rules",
      False,
      "Print every registered rule's settings (default, meaning) and exit.",
  )
  flags.DEFINE_string(
      "describe_rule",
      None,
      "Print the settings of these rules (comma-separated names) and exit.",
  )


def _call_body(
    program: str,
    body: Callable[[config_dict.ConfigDict], Any],
    config: config_dict.ConfigDict,
    argv: Sequence[str],
) -> None:
  """``body(config)`` with the compilation cache, failures as one line and an
  exit status (130 for a stop not acted on)."""
  try:
    cache_folder = compile_cache.enable(
        config.get("compilation_cache", ""), program
    )
    compile_stats = compile_cache.CompileStats()
    if len(argv) > 1:
      raise errors.UsageError(
          f"Unexpected argument(s) {list(argv[1:])}: settings "
          "are given as --config.<key>=<value>."
      )
    listed = body(config) is LISTED
    stopping.check_stop("after the run had finished")
    if not listed and jax.process_index() == 0:  # as the other output
      print(compile_stats.describe(cache_folder))
  except errors.UsageError as e:
    fail(program, e)
  except errors.Diverged as e:
    fail(program, e, errors.DIVERGED_EXIT)
  except errors.ResourceError as e:
    fail(program, e, errors.RESOURCE_EXIT, at_once=True)
  except KeyboardInterrupt:
    sys.exit(errors.INTERRUPTED_EXIT)
  except Exception as e:
    message = errors.name_too_long_message(e)  # bad input, not a resource
    if message is not None:
      fail(program, message)
    message = errors.resource_message(e, "run the same command again.")
    if message is None:
      raise
    fail(program, message, errors.RESOURCE_EXIT, at_once=True)


def run_launcher(
    program: str,
    doc: str,
    config_name: str,
    body: Callable[[config_dict.ConfigDict], Any],
    prepare: Callable[[config_dict.ConfigDict, list[str]], None] | None = None,
) -> None:
  """Runs a launcher: parses ``--config`` (default ``configs/<config_name>.py``)
  and its overrides, calls ``body(config)`` with the compilation cache on and
  prints what it saved (unless ``body`` returns ``LISTED``). Ctrl-C and SIGTERM
  set a flag ``body`` checks at safe points (``stopping.check_stop``); the
  program then exits with status 130."""
  default_config = checks.config_path(config_name)
  main_module = sys.modules.get("__main__")
  if main_module is not None and not getattr(main_module, "__doc__", None):
    main_module.__doc__ = doc  # what absl's --help shows

  def flags_parser(argv: list[str]) -> list[str]:
    try:
      return parse_config_flags(
          argv,
          default_config,
          f"Config file (default: {default_config}); override its values "
          "with --config.<key>=<value>.",
          prepare=prepare,
      )
    except errors.UsageError as e:
      fail(program, e)
    except OSError as e:  # e.g. --config=PATH with too long a name
      message = errors.name_too_long_message(e)
      if message is None:
        raise
      fail(program, message)

  _define_rule_listing_flags()

  def main(argv: Sequence[str]) -> None:
    if flags.FLAGS.list_rules or flags.FLAGS.describe_rule:
      print_rule_settings(
          program,
          flags.FLAGS.config,
          None if flags.FLAGS.list_rules else flags.FLAGS.describe_rule,
      )
      return
    if not flags.FLAGS["verbosity"].present:
      # Only this program's lines (--verbosity=0 shows the libraries' INFO).
      logging.set_verbosity(logging.WARNING)
    # SIGTERM is handled like Ctrl-C.
    stopping.install_stop_handlers(program)
    _call_body(program, body, flags.FLAGS.config, argv)

  try:
    app.run(main, flags_parser=flags_parser)
  except KeyboardInterrupt:  # Ctrl-C before install_stop_handlers
    fail(
        program,
        "SIGINT received while starting: stopped before anything was "
        "written.",
        errors.INTERRUPTED_EXIT,
    )
