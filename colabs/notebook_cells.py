"""What the notebook generators (``colabs/make_*_notebook.py``) share: the
install cell and the assembly of cells into a validated notebook."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
import sys

import nbformat
from nbformat import v4

INSTALL = """\
# Install the package when it is not importable yet. The notebook runs from
# the colabs/ folder of a checkout of the repository (git clone it, then open
# the notebook there), so `..` is the repository.
import importlib.util
import os
import sys

if importlib.util.find_spec('disco') is None:
  if not os.path.isfile(os.path.join('..', 'setup.cfg')):
    raise RuntimeError(
        'disco is not installed and this notebook is not in the colabs/ '
        'folder of a checkout: git clone the repository and open the '
        'notebook from its colabs/ folder, or pip install the package into '
        'this kernel.')
  get_ipython().run_line_magic('pip', 'install -q -e ..')
  sys.path.insert(0, os.path.abspath('..'))  # importable without a restart"""


def notebook(
    intro: str, parameters: str, sections: Sequence[tuple[str, str, ...]]
) -> nbformat.NotebookNode:
  """A notebook: the ``intro`` markdown, the ``parameters`` cell (tagged
  papermill style, so tools can replace it), the install cell, then
  ``sections``: tuples of a markdown text (or ``""``) and code cells."""
  md, code = v4.new_markdown_cell, v4.new_code_cell
  cells = [
      md(intro),
      code(parameters, metadata={"tags": ["parameters"]}),
      code(INSTALL),
  ]
  for text, *codes in sections:
    if text:
      cells.append(md(text))
    cells.extend(code(c) for c in codes)
  for i, cell in enumerate(cells):  # stable ids keep diffs small
    cell["id"] = f"cell-{i:02d}"
  nb = v4.new_notebook(
      cells=cells,
      metadata={
          "kernelspec": {
              "display_name": "Python 3",
              "language": "python",
              "name": "python3",
          },
          "language_info": {"name": "python"},
      },
  )
  nbformat.validate(nb)
  return nb


def write(nb: nbformat.NotebookNode, path: Path) -> None:
  nbformat.write(nb, path)
  print(f"wrote {path}", file=sys.stderr)
