r"""The shape of the code: the figures of issue 46's "Measure", for any checkout.

  python -m benchmarks.architecture                # this checkout
  python -m benchmarks.architecture --root /tmp/arch-before --top 15

Reads the Python files under ``--root`` with ``ast`` (nothing is imported)
and prints, as Markdown:

* lines per module of ``disco/`` (every module, longest first), the modules
  over ``--max_lines`` (700);
* the functions over ``--max_function_lines`` (80; from ``def`` to the
  function's last line, nested functions counted on their own too);
* repeated blocks of ``--min_block`` (6) or more lines in ``disco/`` and in
  ``benchmarks/``: the same lines, compared with their indentation stripped,
  in two places or more. Imports, docstrings, comments, blank lines and
  lines of closing brackets alone are skipped before comparing (they are
  boilerplate, not logic), so a block may span more lines of the file;
* imports between the modules of ``disco/launch/`` (each edge, and the
  longest chain of modules importing one another: the "floors");
* every import of ``disco.launch`` in ``benchmarks/`` (file: name);
* the places that check a config key or flag, by module: calls of the check
  helpers (``check_int``, ``check_number``, ``check_bool``, ``as_dict``,
  ``check_config_keys``; a method call such as ``row.as_dict()``, with
  fewer than two arguments, is not one) and ``raise UsageError``.
"""

from __future__ import annotations

import argparse
import ast
import collections
from collections.abc import Iterable, Iterator, Sequence
import dataclasses
from pathlib import Path
import re
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli

CHECK_HELPERS = (
    "check_int",
    "check_number",
    "check_bool",
    "as_dict",
    "check_config_keys",
)
USAGE_ERROR = "UsageError"
# Lines that hold only closing brackets and separators: formatting, not code.
_CLOSERS = re.compile(r"^[\)\]\}:,;\s]*$")


@dataclasses.dataclass(frozen=True)
class Function:
  module: str
  name: str  # qualified within the module (``Class.method.inner``)
  line: int
  lines: int


@dataclasses.dataclass(frozen=True)
class Block:
  """A run of ``length`` compared lines found at every ``(module, first
  line, last line)`` of ``places``."""

  length: int
  places: tuple[tuple[str, int, int], ...]


@dataclasses.dataclass(frozen=True)
class Report:
  module_lines: dict[str, int]
  functions: list[Function]
  blocks: dict[str, list[Block]]  # tree ("disco", "benchmarks") -> blocks
  launch_imports: dict[str, list[str]]  # launch module -> launch modules
  benchmark_imports: list[tuple[str, str]]  # (file, disco.launch name)
  checks: dict[str, collections.Counter]  # module -> {helper: count}
  min_block: int = 6


# ------------------------------------------------------------- reading ----


def python_files(root: Path, tree: str) -> list[Path]:
  folder = root / tree
  if not folder.is_dir():
    return []
  return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(root: Path, path: Path) -> str:
  """``disco/launch/common.py`` -> ``disco.launch.common``."""
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def parse(path: Path) -> ast.Module:
  return ast.parse(path.read_text(), filename=str(path))


# ----------------------------------------------------------- functions ----


def functions(tree: ast.Module, module: str) -> Iterator[Function]:
  """Every function and method of a module, nested ones included."""

  def visit(node: ast.AST, prefix: str) -> Iterator[Function]:
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = prefix + child.name
        yield Function(
            module, name, child.lineno, child.end_lineno - child.lineno + 1
        )
        yield from visit(child, name + ".")
      elif isinstance(child, ast.ClassDef):
        yield from visit(child, prefix + child.name + ".")
      else:
        yield from visit(child, prefix)

  yield from visit(tree, "")


# ------------------------------------------------------ repeated blocks ----


def skipped_lines(tree: ast.Module) -> set[int]:
  """Line numbers of imports and docstrings."""
  skipped = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      skipped.update(range(node.lineno, node.end_lineno + 1))
    if isinstance(
        node,
        (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef),
    ):
      body = node.body
      if (
          body
          and isinstance(body[0], ast.Expr)
          and isinstance(body[0].value, ast.Constant)
          and isinstance(body[0].value.value, str)
      ):
        skipped.update(range(body[0].lineno, body[0].end_lineno + 1))
  return skipped


def code_lines(text: str, tree: ast.Module) -> list[tuple[int, str]]:
  """``(line number, stripped text)`` of the lines compared for repeats."""
  skipped = skipped_lines(tree)
  kept = []
  for number, line in enumerate(text.splitlines(), start=1):
    stripped = line.strip()
    if (
        number in skipped
        or not stripped
        or stripped.startswith("#")
        or _CLOSERS.match(stripped)
    ):
      continue
    kept.append((number, stripped))
  return kept


def repeated_blocks(
    files: dict[str, list[tuple[int, str]]], min_block: int
) -> list[Block]:
  """Maximal runs of ``min_block`` or more compared lines that occur in two
  places or more (places in one file may not overlap), longest first."""
  windows = collections.defaultdict(list)
  for module, lines in files.items():
    texts = [t for _, t in lines]
    for i in range(len(lines) - min_block + 1):
      windows[tuple(texts[i : i + min_block])].append((module, i))
  # Pairs of places whose windows match, grown along their diagonal into
  # maximal runs: (module a, start a, module b, start b) -> length.
  matched = {
      (a, b)
      for places in windows.values()
      if len(places) > 1
      for a in places
      for b in places
      if a < b
  }
  runs = []
  for (ma, ia), (mb, ib) in matched:
    if ((ma, ia - 1), (mb, ib - 1)) in matched:
      continue  # not the start of its run
    length = min_block
    while (
        (ma, ia + length - min_block + 1),
        (mb, ib + length - min_block + 1),
    ) in matched:
      length += 1
    if ma == mb and ib < ia + length:
      continue  # a run overlapping itself
    runs.append((ma, ia, mb, ib, length))
  # One block per repeated text, with all its places.
  by_text: dict[tuple[str, ...], set] = collections.defaultdict(set)
  for ma, ia, mb, ib, length in runs:
    text = tuple(t for _, t in files[ma][ia : ia + length])
    by_text[text].update({(ma, ia), (mb, ib)})
  blocks = []
  for text, places in by_text.items():
    spans = []
    for module, i in sorted(places):
      lines = files[module]
      spans.append((module, lines[i][0], lines[i + len(text) - 1][0]))
    blocks.append(Block(len(text), tuple(spans)))
  # A block inside a longer block at the same places says nothing more.
  blocks.sort(key=lambda b: (-b.length, b.places))
  kept: list[Block] = []
  for block in blocks:
    if not any(_inside(block, longer) for longer in kept):
      kept.append(block)
  return kept


def _inside(block: Block, longer: Block) -> bool:
  return all(
      any(
          m == other and first_o <= first and last <= last_o
          for other, first_o, last_o in longer.places
      )
      for m, first, last in block.places
  )


# ------------------------------------------------------------- imports ----


def imported_modules(tree: ast.Module, module: str) -> Iterator[str]:
  """Every module a module imports (``from a import b`` yields ``a.b``,
  which may name an attribute rather than a module), at any depth."""
  package = module.rsplit(".", 1)[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parent = package.rsplit(".", node.level - 1)[0]
        base = f"{parent}.{base}" if base else parent
      for alias in node.names:
        yield f"{base}.{alias.name}"
        yield base


def launch_graph(
    trees: dict[str, ast.Module], package: str = "disco.launch"
) -> dict[str, list[str]]:
  """``{launch module: [launch modules it imports]}``."""
  modules = {m for m in trees if m.startswith(package + ".")}
  graph = {}
  for module in sorted(modules):
    found = {
        name
        for name in imported_modules(trees[module], module)
        if name in modules and name != module
    }
    graph[module] = sorted(found)
  return graph


def longest_chain(graph: dict[str, list[str]]) -> list[str]:
  """The longest path of modules importing one another (cycles cut)."""
  best: dict[str, list[str]] = {}

  def chain(module: str, seen: frozenset) -> list[str]:
    if module in best:
      return best[module]
    below = [
        chain(m, seen | {module})
        for m in graph.get(module, ())
        if m not in seen
    ]
    result = [module] + max(below, key=len, default=[])
    best[module] = result
    return result

  return max((chain(m, frozenset()) for m in graph), key=len, default=[])


def launch_imports(tree: ast.Module) -> Iterator[str]:
  """The ``disco.launch`` names a file imports (``disco.launch.x`` for
  ``from disco.launch import x``), each import statement once."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.startswith("disco.launch"):
          yield alias.name
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "disco.launch"
    ):
      for alias in node.names:
        yield f"{node.module}.{alias.name}"


# -------------------------------------------------------------- checks ----


def _called_name(func: ast.expr) -> str | None:
  if isinstance(func, ast.Name):
    return func.id
  if isinstance(func, ast.Attribute):
    return func.attr
  return None


def config_checks(tree: ast.Module) -> collections.Counter:
  """Calls of the check helpers and ``raise UsageError`` in a module."""
  counts = collections.Counter()
  for node in ast.walk(tree):
    if isinstance(node, ast.Call):
      name = _called_name(node.func)
      if name in CHECK_HELPERS and len(node.args) + len(node.keywords) >= 2:
        counts[name] += 1
    elif isinstance(node, ast.Raise) and node.exc is not None:
      exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
      if _called_name(exc) == USAGE_ERROR:
        counts["raise UsageError"] += 1
  return counts


# -------------------------------------------------------------- report ----


def measure(root: Path, min_block: int = 6) -> Report:
  root = Path(root)
  trees, texts = {}, {}
  for path in python_files(root, "disco"):
    name = module_name(root, path)
    texts[name] = path.read_text()
    trees[name] = parse(path)
  module_lines = {
      m: len(text.splitlines())
      for m, text in sorted(texts.items(), key=lambda kv: kv[0])
  }
  found = [f for m, t in trees.items() for f in functions(t, m)]
  blocks = {
      "disco": repeated_blocks(
          {m: code_lines(texts[m], trees[m]) for m in trees}, min_block
      )
  }
  bench, benchmark_imports = {}, []
  for path in python_files(root, "benchmarks"):
    name = str(path.relative_to(root))
    text = path.read_text()
    tree = parse(path)
    bench[name] = code_lines(text, tree)
    benchmark_imports += [(name, n) for n in launch_imports(tree)]
  blocks["benchmarks"] = repeated_blocks(bench, min_block)
  checks = {m: config_checks(t) for m, t in trees.items()}
  return Report(
      module_lines=module_lines,
      functions=found,
      blocks=blocks,
      launch_imports=launch_graph(trees),
      benchmark_imports=benchmark_imports,
      checks={m: c for m, c in checks.items() if c},
      min_block=min_block,
  )


def module_path(module: str) -> str:
  return module.replace(".", "/") + ".py"


def _table(
    header: Sequence[str], rows: Iterable[Sequence[object]]
) -> list[str]:
  """A Markdown table, or nothing without rows."""
  rows = [cli.table_row(row) for row in rows]
  return [cli.table_header(header), *rows] if rows else []


def markdown(
    report: Report,
    max_lines: int = 700,
    max_function_lines: int = 80,
    top: int = 20,
    level: int = 3,
) -> str:
  """The report as Markdown, its sections headed at ``level``."""
  h = "#" * level
  out = []
  lines = report.module_lines
  over = {m: n for m, n in lines.items() if n > max_lines}
  out += [
      f"{h} Lines per module",
      "",
      f"{len(lines)} modules, {sum(lines.values()):,} lines in `disco/`; "
      f"{len(over)} over {max_lines} lines"
      + (
          f" ({sum(over.values()):,} lines): "
          + ", ".join(f"`{module_path(m)}` {n:,}" for m, n in _by_size(over))
          if over
          else ""
      )
      + ".",
      "",
  ]
  by_package = collections.Counter()
  for m, n in lines.items():
    parts = m.split(".")
    by_package["/".join(parts[:2]) + "/" if len(parts) > 2 else "disco/"] += n
  out += _table(
      ("package", "lines"),
      [(f"`{p}`", f"{n:,}") for p, n in _by_size(by_package)],
  )
  out += ["", f"The {top} longest modules:", ""]
  out += _table(
      ("module", "lines"),
      [(f"`{module_path(m)}`", f"{n:,}") for m, n in _by_size(lines)[:top]],
  )
  long = sorted(
      (f for f in report.functions if f.lines > max_function_lines),
      key=lambda f: (-f.lines, f.module, f.line),
  )
  out += [
      "",
      f"{h} Longest functions",
      "",
      f"{len(long)} functions over {max_function_lines} lines"
      + (f" (the {top} longest below)" if len(long) > top else "")
      + ".",
      "",
  ]
  out += _table(
      ("function", "lines"),
      [
          (f"`{module_path(f.module)}:{f.line}` `{f.name}`", f.lines)
          for f in long[:top]
      ],
  )
  out += ["", f"{h} Repeated blocks", ""]
  for tree, blocks in report.blocks.items():
    copies = sum(b.length * (len(b.places) - 1) for b in blocks)
    out += [
        f"`{tree}/`: {len(blocks)} blocks of {report.min_block} or more "
        "compared lines in two "
        f"places or more; {copies:,} compared lines are copies"
        + (f" (the {top} longest below)" if len(blocks) > top else "")
        + ".",
        "",
    ]
    out += _table(
        ("lines", "places"),
        [
            (
                b.length,
                ", ".join(
                    f"`{_place(tree, m)}:{first}-{last}`"
                    for m, first, last in b.places
                ),
            )
            for b in blocks[:top]
        ],
    )
    out.append("")
  graph = report.launch_imports
  edges = sum(len(v) for v in graph.values())
  chain = longest_chain(graph)
  out += [
      f"{h} Imports between `disco/launch/` modules",
      "",
      f"{edges} imports between {len(graph)} modules; the longest chain "
      f"({len(chain)} modules): "
      + (" -> ".join(m.rsplit(".", 1)[1] for m in chain) or "none")
      + ".",
      "",
  ]
  out += _table(
      ("module", "imports from `disco/launch/`"),
      [
          (
              f"`{m.rsplit('.', 1)[1]}`",
              ", ".join(x.rsplit(".", 1)[1] for x in v) or "-",
          )
          for m, v in graph.items()
      ],
  )
  imports = report.benchmark_imports
  names = collections.Counter(n for _, n in imports)
  out += [
      "",
      f"{h} Imports of `disco.launch` from `benchmarks/`",
      "",
      f"{len(imports)} import statements in "
      f"{len({f for f, _ in imports})} files, of {len(names)} names: "
      + ", ".join(f"`{n}` {c}" for n, c in sorted(names.items()))
      + ".",
      "",
  ]
  out += _table(
      ("file", "names"),
      [
          (f"`{f}`", ", ".join(f"`{n}`" for n in ns))
          for f, ns in _group(imports).items()
      ],
  )
  checks = report.checks
  total = collections.Counter()
  for counts in checks.values():
    total.update(counts)
  kinds = [*CHECK_HELPERS, "raise UsageError"]
  out += [
      "",
      f"{h} Places that check a flag",
      "",
      f"{sum(total.values())} places in {len(checks)} modules: "
      + ", ".join(f"`{k}` {total[k]}" for k in kinds)
      + ".",
      "",
  ]
  out += _table(
      ("module", *kinds, "all"),
      [
          (
              f"`{module_path(m)}`",
              *(c[k] or "" for k in kinds),
              sum(c.values()),
          )
          for m, c in sorted(
              checks.items(), key=lambda kv: -sum(kv[1].values())
          )
      ],
  )
  return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _by_size(counts: dict[str, int]) -> list[tuple[str, int]]:
  return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _place(tree: str, module: str) -> str:
  return module_path(module) if tree == "disco" else module


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
  grouped: dict[str, list[str]] = {}
  for key, value in pairs:
    grouped.setdefault(key, []).append(value)
  return grouped


def main(argv: Sequence[str] | None = None) -> str:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      "--root", default=".", help="the checkout to measure (default: here)"
  )
  parser.add_argument("--max_lines", type=int, default=700)
  parser.add_argument("--max_function_lines", type=int, default=80)
  parser.add_argument("--min_block", type=int, default=6)
  parser.add_argument(
      "--top", type=int, default=20, help="rows of each long list"
  )
  parser.add_argument(
      "--level", type=int, default=3, help="Markdown level of the headings"
  )
  args = parser.parse_args(argv)
  root = Path(args.root)
  if not (root / "disco").is_dir():
    parser.error(f"--root {root}: no disco/ folder there")
  text = markdown(
      measure(root, args.min_block),
      args.max_lines,
      args.max_function_lines,
      args.top,
      args.level,
  )
  sys.stdout.write(text)
  return text


if __name__ == "__main__":
  main()
