"""The documentation: the README's front page, the generated reference pages,
and the launcher commands shown in the README and under docs/.

Nothing here trains or builds an agent: the commands go through the
launchers' own command-line parsing (``common.parse_config_flags`` with each
launcher's ``prepare_config``), which rejects unknown flags, unknown config
keys and values of the wrong type, and the named rules and environments are
looked up in the registries. ``.ci/run`` builds the site itself with
``mkdocs build --strict``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from pathlib import Path
import re
import shlex
import sys

from absl import flags
import pytest

from disco import checks
from disco import errors
from disco.environments import registry as env_registry
from disco.launch import common
from disco.launch import validate as validate_launcher
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"

# The README's two commands, which must stay its first two code blocks.
FIRST_COMMANDS = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
    "disco-eval",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e "
    "'.[test]' && python -m ipykernel install --sys-prefix --name python3 && "
    "python -m pytest",
)
README_MAX_CHARS = 8_000

# Program -> (launcher module, config name).
LAUNCHERS = {
    "disco-eval": ("disco.launch.evaluate", "evaluate"),
    "disco-meta-train": ("disco.launch.meta_train", "meta_train"),
    "disco-compare": ("disco.launch.compare", "compare"),
    "disco-validate": ("disco.launch.validate", "validate"),
    "disco-distill": ("disco.launch.distill", "distill"),
}
MODULES = {module: program for program, (module, _) in LAUNCHERS.items()}
# Values for the shell variables the shown commands use (a variable that is
# neither here nor assigned in its block fails the test).
SHELL_VARIABLES = {
    "i": "0",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "2",
    "OMPI_COMM_WORLD_RANK": "0",
    "OMPI_COMM_WORLD_SIZE": "2",
}
# Words that may stand before a command.
PREFIXES = {"do", "then", "else", "time", "exec", "srun", "nohup"}


def _reference_generator():
  spec = importlib.util.spec_from_file_location(
      "gen_reference", DOCS / "gen_reference.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# ----------------------------------------------------------------- README ----


def test_readme_opens_with_the_two_commands():
  blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.S)
  assert tuple(blocks[:2]) == FIRST_COMMANDS


def test_readme_is_a_short_front_page():
  text = README.read_text()
  assert len(text) < README_MAX_CHARS, (
      f"README.md has {len(text)} characters (at most {README_MAX_CHARS}): "
      "move the details to a page under docs/ and link it."
  )


def test_readme_lists_the_installed_launchers():
  installed = sorted(
      e.name
      for e in importlib.metadata.distribution("disco-rl-harness").entry_points
      if e.group == "console_scripts"
  )
  text = README.read_text()
  words = {5: "Five", 6: "Six", 4: "Four"}
  assert f"## {words.get(len(installed), len(installed))} launchers" in text
  section = text.split("launchers\n", 1)[1].split("\n## ", 1)[0]
  shown = sorted(set(re.findall(r"^(disco-[a-z-]+) ", section, re.M)))
  assert shown == installed, f"README shows {shown}; installed: {installed}"


def test_the_home_page_links_what_a_newcomer_looks_for():
  """One click from the site's home page: your own environment, meta-training,
  comparing with PPO, hardware, which rule, errors."""
  links = set(re.findall(r"\]\(([^)#]+)", (DOCS / "index.md").read_text()))
  for page in (
      "getting-started/tutorial.md",
      "guides/meta-training.md",
      "guides/comparing.md",
      "getting-started/hardware.md",
      "guides/choosing-a-rule.md",
      "getting-started/faq.md",
  ):
    assert page in links and (DOCS / page).is_file(), page


# -------------------------------------------------------------- reference ----


def test_reference_pages_are_current():
  generator = _reference_generator()
  stale = generator.stale(generator.pages())
  assert not stale, (
      f"Stale reference pages {stale}: run python docs/gen_reference.py and "
      "commit docs/reference/."
  )


def test_reference_check_sees_a_changed_page(tmp_path, monkeypatch):
  generator = _reference_generator()
  pages = generator.pages()
  for name, body in pages.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(body)
  monkeypatch.setattr(generator, "OUT", tmp_path)
  assert generator.stale(pages) == []
  (tmp_path / "rules.md").write_text(pages["rules.md"].replace("0.997", "1"))
  (tmp_path / "old.md").write_text("a page the script no longer writes\n")
  assert generator.stale(pages) == ["old.md", "rules.md"]


def test_reference_lists_every_rule_environment_and_config_key():
  generator = _reference_generator()
  pages = generator.pages()
  for name in rule_registry.rule_names():
    assert f"## `{name}`" in pages["rules.md"]
  for name in env_registry.env_names():
    assert f"`{name}`" in pages["environments.md"]
  assert "`validation.envs`" in pages["configs.md"]  # a nested key
  assert "`distributed.step_timeout`" in pages["configs.md"]


# --------------------------------------------------------------- commands ----


def _bash_blocks(path: Path):
  """``(line number, text)`` of every ```bash block of a Markdown file, with
  continuation lines joined."""
  lines = path.read_text().splitlines()
  i = 0
  while i < len(lines):
    if lines[i].strip() == "```bash":
      start, body = i + 2, []
      i += 1
      while i < len(lines) and lines[i].strip() != "```":
        body.append(lines[i])
        i += 1
      yield start, "\n".join(body).replace("\\\n", " ")
    i += 1


def _substitute(text: str, variables: dict[str, str], where: str) -> str:
  def value(m: re.Match) -> str:
    name = m.group(1) or m.group(2)
    if name not in variables:
      raise AssertionError(
          f"{where}: shell variable ${name} has no value: assign it in the "
          "block or add it to SHELL_VARIABLES in tests/test_docs.py."
      )
    return variables[name]

  return re.sub(r"\$(?:\{(\w+)\}|(\w+))", value, text)


def _segments(text: str):
  """The simple commands of a line of shell, as word lists."""
  lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  lexer.commenters = "#"
  words: list[str] = []
  for token in lexer:
    if token and set(token) <= set("&|;()<>"):
      if words:
        yield words
      words = []
    else:
      words.append(token)
  if words:
    yield words


def _commands(text: str, where: str, variables: dict[str, str]):
  """``(program, arguments)`` of every launcher command in ``text``."""
  for line in text.splitlines():
    m = re.match(r"^\s*(\w+)=(\"[^\"]*\"|'[^']*'|\S*)\s*$", line)
    if m:  # NAME="value": a variable later lines use
      variables[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) else ""
      continue
    for words in _segments(line):
      while words and (words[0] in PREFIXES or re.match(r"^\w+=", words[0])):
        words = words[1:]
      if len(words) >= 3 and words[0] == "bash" and words[1] == "-c":
        yield from _commands(words[2], where, variables)
        continue
      if len(words) >= 3 and words[0] in ("python", "python3"):
        if words[1] == "-m" and words[2] in MODULES:
          words = [MODULES[words[2]], *words[3:]]
      if words and words[0] in LAUNCHERS:
        args = [_substitute(w, variables, where) for w in words[1:]]
        yield words[0], args


def shown_commands():
  """Every launcher command in a ```bash block of the README or docs/."""
  found = []
  for path in [README, *sorted(DOCS.rglob("*.md"))]:
    for line, block in _bash_blocks(path):
      where = f"{path.relative_to(REPO)}:{line}"
      variables = dict(SHELL_VARIABLES)
      for program, args in _commands(block, where, variables):
        found.append((where, program, args))
  return found


def check_command(program: str, args: list[str]) -> str | None:
  """Why the launcher would reject ``program args`` on its command line
  (before running anything), or None."""
  module_name, config_name = LAUNCHERS[program]
  module = importlib.import_module(module_name)
  argv = [program, *args]
  if program == "disco-validate":
    argv = validate_launcher._argv(argv)  # RUN_DIR and --follow
  # A config file named relative to the repository.
  argv = [
      re.sub(
          r"^(--?config=)(?!/)(.+\.py)$",
          lambda m: m.group(1) + str(REPO / m.group(2)),
          a,
      )
      for a in argv
  ]
  fv = flags.FlagValues()
  flags.DEFINE_boolean("list_rules", False, "", flag_values=fv)
  flags.DEFINE_string("describe_rule", None, "", flag_values=fv)
  try:
    rest = common.parse_config_flags(
        argv,
        checks.config_path(config_name),
        "",
        flag_values=fv,
        prepare=getattr(module, "prepare_config", None),
    )
  except errors.UsageError as e:
    return str(e)
  if len(rest) > 1:
    return f"unexpected arguments {rest[1:]}"
  return _unknown_names(fv["config"].value, fv["describe_rule"].value)


def _unknown_names(config, describe_rule: str | None) -> str | None:
  """A rule or environment the config names that is not registered."""

  def rule_ok(name) -> bool:
    return (
        not isinstance(name, str)
        or name == "list"
        or resolve.is_rule_path(name)
        or name in rule_registry.rule_names()
    )

  def env_ok(name) -> bool:
    name = str(name).split(":")[0]
    return name == "list" or name in env_registry.env_names()

  rules = [config.get("rule"), *(config.get("rules") or ())]
  rules += (describe_rule or "").split(",") if describe_rule else []
  envs = [config.get("env"), *(config.get("envs") or ())]
  for group in config.get("population") or ():
    envs.append(group["env"])
  validation = config.get("validation")
  for held_out in (validation.get("envs") if validation else None) or ():
    envs.append(held_out["env"])
  for rule in rules:
    if rule is not None and not rule_ok(rule):
      return f"unknown rule {rule!r}"
  for env in envs:
    if env is not None and not env_ok(env):
      return f"unknown environment {env!r}"
  return None


COMMANDS = shown_commands()


def test_the_docs_show_commands_of_every_launcher():
  assert {program for _, program, _ in COMMANDS} == set(LAUNCHERS)
  assert len(COMMANDS) > 40


@pytest.mark.parametrize(
    "where,program,args",
    COMMANDS,
    ids=[f"{w}:{p}" for w, p, _ in COMMANDS],
)
def test_shown_command_names_existing_flags(where, program, args, tmp_path):
  if "--config.imports=tutorial_envs" in args:  # the tutorial's own module
    problem = _with_tutorial_module(tmp_path, program, args)
  else:
    problem = check_command(program, args)
  assert problem is None, f"{where}: {program}: {problem}"


def _with_tutorial_module(tmp_path, program, args) -> str | None:
  """``check_command`` with the tutorial's module importable, and what it
  registered removed afterwards."""
  import test_tutorial  # pylint: disable=g-import-not-at-top

  text = test_tutorial.PAGE.read_text()
  (tmp_path / test_tutorial.MODULE).write_text(
      test_tutorial.tutorial_module(text)
  )
  before = set(env_registry.env_names())
  sys.path.insert(0, str(tmp_path))
  try:
    return check_command(program, args)
  finally:
    sys.path.remove(str(tmp_path))
    sys.modules.pop("tutorial_envs", None)
    for name in set(env_registry.env_names()) - before:
      env_registry.unregister_env(name)


@pytest.mark.parametrize(
    "program,args,message",
    [
        ("disco-eval", ["--config.num_seed=3"], "Did you mean"),
        ("disco-eval", ["--config.num_seeds=three"], "three"),
        ("disco-eval", ["--config.hyper_params.no_such=1"], "no_such"),
        ("disco-meta-train", ["--config.es.sigmaa=0.1"], "sigmaa"),
        (
            "disco-compare",
            ["--config.rules=('disco103', 'no_rule')"],
            "no_rule",
        ),
        ("disco-eval", ["--config.env=gymnax/CartPole"], "CartPole"),
        ("disco-validate", ["runs/x", "--config.validation.evry=5"], "evry"),
        ("disco-eval", ["--describe_rule=ppo,nope"], "nope"),
        ("disco-eval", ["stray"], "stray"),
    ],
)
def test_the_check_rejects_what_the_launcher_rejects(program, args, message):
  problem = check_command(program, args)
  assert problem is not None and message in problem


def test_commands_are_found_through_shell_syntax():
  block = (
      "P=\"({'env': 'catch', 'num_agents': 2},)\"\n"
      'for i in 0 1; do\n  disco-meta-train --config.population="$P" '
      "--config.distributed.process_id=$i &\ndone; wait\n"
      "JAX_DEFAULT_MATMUL_PRECISION=highest python -m disco.launch.evaluate "
      "--config.num_seeds=2   # a comment\n"
      "srun bash -c 'disco-compare --config.shard=$SLURM_PROCID/$SLURM_NTASKS'"
  )
  found = list(_commands(block, "test", dict(SHELL_VARIABLES)))
  assert found == [
      (
          "disco-meta-train",
          [
              "--config.population=({'env': 'catch', 'num_agents': 2},)",
              "--config.distributed.process_id=0",
          ],
      ),
      ("disco-eval", ["--config.num_seeds=2"]),
      ("disco-compare", ["--config.shard=0/2"]),
  ]
