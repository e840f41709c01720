"""Spec strings: a name with settings, ``"name:key=value,..."``.

The command lines name an environment with its settings
(``'catch:rows=5,columns=5'``), a user-given reference score
(``'catch/5x5:random=-0.6,reference=1'``), a tuning grid or a per-rule
override this way; ``parse_spec`` reads them all.
"""

from __future__ import annotations

import ast
from typing import Any

from disco import errors


def parse_spec(spec: str, what: str) -> tuple[str, dict[str, Any]]:
  """``"name:key=value,..."`` -> ``(name, {key: value})``; values are Python
  literals (``rows=5``, ``conv_channels=(16,)``) or else strings.

  Args:
    spec: the spec string.
    what: what the spec names (``"environment"``), for the error.

  Raises:
    UsageError: an item without ``=`` or without a key.
  """
  name, _, rest = str(spec).partition(":")
  items, depth, current = [], 0, ""
  for char in rest:  # split at the commas outside brackets
    if char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    if char == "," and depth == 0:
      items.append(current)
      current = ""
    else:
      current += char
  if current.strip():
    items.append(current)
  settings = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise errors.UsageError(
          f"Bad {what} {spec!r}: write name:key=value,key=value."
      )
    try:
      settings[key.strip()] = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
      settings[key.strip()] = value.strip()
  return name.strip(), settings
