"""``benchmarks/architecture.py`` on a small made-up checkout."""

from __future__ import annotations

from pathlib import Path
import textwrap

from benchmarks import architecture

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
