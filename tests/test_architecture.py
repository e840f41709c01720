"""``benchmarks/architecture.py`` on a small made-up checkout, and the
layering of this checkout's packages read with it."""

from __future__ import annotations

from pathlib import Path
import textwrap

import pytest

from benchmarks import architecture

REPO = Path(__file__).resolve().parent.parent

# Six lines of logic, then the same six lines again elsewhere with another
# indentation, between an import, a docstring, comments and closing brackets
# that the comparison skips.
BLOCK = """\
total = 0
for item in items:
  total += item.size
  if total > limit:
    raise ValueError(total)
names.append(item.name)
"""


def _write(root: Path, path: str, text: str) -> None:
  file = root / path
  file.parent.mkdir(parents=True, exist_ok=True)
  file.write_text(textwrap.dedent(text))


def _checkout(root: Path) -> None:
  long_body = "".join(f"  x{i} = {i}\n" for i in range(85))
  _write(root, "disco/__init__.py", "")
  _write(
      root,
      "disco/first.py",
      '"""A module."""\n\nimport os\n\n\ndef copy_a(items, limit, names):\n'
      '  """Docstring."""\n'
      + textwrap.indent(BLOCK, "  ")
      + "  return total\n\n\ndef long_one():\n"
      + long_body,
  )
  _write(
      root,
      "disco/second.py",
      "import sys\n\n\nclass Holder:\n\n  def copy_b(self, items, limit, "
      "names):\n    # A comment the comparison skips.\n"
      + textwrap.indent(BLOCK, "    ")
      + "    return (\n        total\n    )\n",
  )
  _write(root, "disco/launch/__init__.py", "")
  _write(
      root,
      "disco/launch/top.py",
      "from disco.launch import middle\n\n\ndef build(config):\n"
      "  common.check_int(config.steps, 'steps', 1)\n"
      "  if config.bad:\n    raise common.UsageError('bad')\n"
      "  return middle.run(common.as_dict(config.env, 'env'))\n",
  )
  _write(
      root,
      "disco/launch/middle.py",
      "from disco.launch import bottom\n\n\ndef run(x):\n"
      "  return x.as_dict()  # a method: not a check\n",
  )
  _write(root, "disco/launch/bottom.py", "VALUE = 1\n")
  _write(
      root,
      "benchmarks/script.py",
      "from disco.launch import top\n\n\ndef main():\n"
      "  from disco.launch import middle as m\n  return top, m\n",
  )


def test_finds_long_functions_repeated_blocks_imports_and_checks(tmp_path):
  _checkout(tmp_path)
  report = architecture.measure(tmp_path)

  long = [f for f in report.functions if f.lines > 80]
  assert [(f.module, f.name, f.lines) for f in long] == [
      ("disco.first", "long_one", 86)
  ]
  (block,) = report.blocks["disco"]
  assert block.length == 6
  first, second = block.places
  assert first[0] == "disco.first" and second[0] == "disco.second"
  assert first[2] - first[1] == 5 and second[2] - second[1] == 5
  assert report.blocks["benchmarks"] == []

  assert report.launch_imports == {
      "disco.launch.bottom": [],
      "disco.launch.middle": ["disco.launch.bottom"],
      "disco.launch.top": ["disco.launch.middle"],
  }
  assert architecture.longest_chain(report.launch_imports) == [
      "disco.launch.top",
      "disco.launch.middle",
      "disco.launch.bottom",
  ]
  assert report.benchmark_imports == [
      ("benchmarks/script.py", "disco.launch.top"),
      ("benchmarks/script.py", "disco.launch.middle"),
  ]
  assert report.checks == {
      "disco.launch.top": {"check_int": 1, "as_dict": 1, "raise UsageError": 1}
  }
  text = architecture.markdown(report)
  assert "`disco/first.py:17` `long_one` | 86 |" in text
  assert "top -> middle -> bottom" in text


def test_command_line_prints_the_report(tmp_path, capsys):
  _checkout(tmp_path)
  architecture.main(["--root", str(tmp_path), "--max_lines", "10"])
  out = capsys.readouterr().out
  assert "over 10 lines" in out and "`disco/first.py` 102" in out


# ------------------------------------------------------------- layering ----

# Packages of disco/ and the packages they may not import. Scoring
# (normalised scores, aggregates) is below both comparisons and
# meta-training, which score runs with it; meta-training does not stand on
# comparisons.
NOT_IMPORTED = {
    "disco.scoring": ("disco.comparison", "disco.meta"),
    "disco.meta": ("disco.comparison",),
}


def _imports_between(
    root: Path, package: str, others: tuple[str, ...]
) -> list[tuple[str, str]]:
  """``(module, name)``: every import of a name of ``others`` by a module of
  ``package`` under ``root`` (``from disco import comparison`` included)."""
  found = []
  for path in architecture.python_files(root, package.replace(".", "/")):
    module = architecture.module_name(root, path)
    for name in architecture.imported_modules(architecture.parse(path), module):
      if any(name == o or name.startswith(o + ".") for o in others):
        found.append((module, name))
  return sorted(set(found))


@pytest.mark.parametrize("package", sorted(NOT_IMPORTED))
def test_packages_import_nothing_from_the_packages_above_them(package):
  found = _imports_between(REPO, package, NOT_IMPORTED[package])
  assert not found, f"{package} imports {found}: move what both use lower."


def test_the_layering_check_sees_an_import(tmp_path):
  _write(tmp_path, "disco/meta/step.py", "from disco import comparison\n")
  _write(tmp_path, "disco/meta/top.py", "import disco.comparison.runner\n")
  assert _imports_between(tmp_path, "disco.meta", ("disco.comparison",)) == [
      ("disco.meta.step", "disco.comparison"),
      ("disco.meta.top", "disco.comparison.runner"),
  ]


def _module_graph(root: Path) -> dict[str, set[str]]:
  """``{module: the modules of disco/ it imports}`` (package front doors
  left out: importing a package's ``__init__`` is how its users reach it)."""
  paths = architecture.python_files(root, "disco")
  modules = {
      architecture.module_name(root, p): p
      for p in paths
      if p.name != "__init__.py"
  }
  return {
      module: {
          name
          for name in architecture.imported_modules(
              architecture.parse(path), module
          )
          if name in modules and name != module
      }
      for module, path in modules.items()
  }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected groups of more than one module (Tarjan)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in graph[node]:
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      group = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        group.append(member)
        if member == node:
          break
      if len(group) > 1:
        out.append(sorted(group))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return out


def test_no_modules_import_each_other():
  circles = _circles(_module_graph(REPO))
  assert not circles, f"modules importing each other: {circles}"


def test_the_circle_check_sees_a_circle(tmp_path):
  _write(tmp_path, "disco/a.py", "from disco import b\n")
  _write(tmp_path, "disco/b.py", "from disco import c\n")
  _write(tmp_path, "disco/c.py", "import disco.a\n")
  _write(tmp_path, "disco/d.py", "from disco import a\n")
  assert _circles(_module_graph(tmp_path)) == [
      ["disco.a", "disco.b", "disco.c"]
  ]


def test_no_function_over_80_lines_and_no_module_over_700():
  """Functions and modules of ``disco/`` stay short enough to read whole."""
  long, big = [], []
  for path in architecture.python_files(REPO, "disco"):
    module = architecture.module_name(REPO, path)
    lines = len(path.read_text().splitlines())
    if lines > 700:
      big.append((module, lines))
    long += [
        (module, f.name, f.lines)
        for f in architecture.functions(architecture.parse(path), module)
        if f.lines > 80
    ]
  assert not long, f"functions over 80 lines: {long}"
  assert not big, f"modules over 700 lines: {big}"
