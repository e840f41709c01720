r"""Cold and warm starts of the launchers with the persistent compilation cache.

Each launcher runs twice in a fresh process with the same settings and a cache
folder that starts empty: the first run (cold) compiles every program and
fills the cache, the second (warm) loads them. For each run it prints the
programs compiled and loaded, the seconds spent in XLA (compiling, or loading
from the cache) and, before it, tracing and lowering (which the cache cannot
save), the launcher's own estimate of the first call's extra time
(``compile_time_s`` in ``summary.json``: first call minus a steady call) and
the wall time of the whole process::

  python benchmarks/compile_cache.py                 # all three launchers
  python benchmarks/compile_cache.py --only meta_train --repeats 2

The settings are the launchers' defaults (Disco103 on Catch 8x8; the published
meta-training settings; Disco103 against actor-critic on Catch), cut to a few
calls so that the start dominates.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import subprocess
import sys
import tempfile
import threading

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing

LAUNCHERS = {
    "eval": (
        "disco.launch.evaluate",
        ["--config.total_env_steps=6000"],
    ),
    "meta_train": (
        "disco.launch.meta_train",
        ["--config.num_meta_steps=3", "--config.checkpoint_every=0"],
    ),
    "compare": (
        "disco.launch.compare",
        [
            "--config.num_seeds=2",
            "--config.total_env_steps=6000",
            "--config.last_episodes=50",
        ],
    ),
}

_LINE = re.compile(
    r"Compilation cache: .+; (\d+) programs loaded, (\d+) compiled "
    r"\(([\d.]+) s in XLA; before it ([\d.]+) s tracing, ([\d.]+) s lowering"
    r"(?:; (\d+) traced program\(s\) loaded)?\)"
)
# The meta-training progress bar once its first meta-step is done.
_FIRST_META_STEP = re.compile(rb"\| 1/\d+ \[")


def _launcher_compile_time(out: Path) -> float | None:
  """``compile_time_s`` of the run's summary (compare: its first run)."""
  for summary in sorted(out.rglob("summary.json")):
    value = json.loads(summary.read_text()).get("compile_time_s")
    if value is not None:
      return value
  return None


def run_once(
    module: str,
    args: list[str],
    cache: Path,
    out: Path,
    cwd: Path | None = None,
) -> dict:
  """One launcher process: its compilation-cache line's counts and seconds,
  the time to its first meta-step and its wall time. ``cwd``: the folder it
  starts in (a checkout there is the code it imports)."""
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  first_step, stderr_chunks = [], []
  with timing.Stopwatch() as clock:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            module,
            *args,
            f"--config.output_dir={out}",
            f"--config.compilation_cache={cache}",
        ],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader = threading.Thread(
        target=_watch, args=(proc.stderr, clock, first_step, stderr_chunks)
    )
    reader.start()
    stdout = proc.stdout.read().decode()
    proc.wait()
    reader.join()
  if proc.returncode != 0:
    stderr_text = b"".join(stderr_chunks).decode(errors="replace")
    raise SystemExit(f"{module} failed:\n{stderr_text[-3000:]}")
  found = _LINE.search(stdout)
  if not found:
    raise SystemExit(f"{module}: no compilation-cache line in its output")
  loaded, compiled, xla, trace, lower, traced = found.groups()
  return dict(
      loaded=int(loaded),
      compiled=int(compiled),
      traced_loaded=int(traced or 0),
      xla_s=float(xla),
      trace_s=float(trace),
      lowering_s=float(lower),
      first_call_extra_s=_launcher_compile_time(out),
      first_meta_step_s=first_step[0] if first_step else None,
      wall_s=clock.wall,
  )


def _watch(stream, clock, first_step: list, chunks: list) -> None:
  """Reads ``stream`` to its end into ``chunks``, noting in ``first_step``
  the seconds on ``clock`` at the first meta-step's progress update."""
  seen = b""
  while chunk := stream.read1(4096):
    chunks.append(chunk)
    if not first_step:
      seen = seen[-64:] + chunk
      if _FIRST_META_STEP.search(seen):
        first_step.append(clock.seconds())


def main() -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--only", choices=sorted(LAUNCHERS), action="append")
  parser.add_argument(
      "--repeats", type=int, default=1, help="cold/warm pairs per launcher"
  )
  flags = parser.parse_args()
  names = flags.only or list(LAUNCHERS)
  print(
      cli.table_header(
          (
              "launcher",
              "start",
              "programs compiled",
              "programs loaded",
              "XLA s",
              "tracing s",
              "lowering s",
              "traced programs loaded",
              "first call minus steady, s",
              "to the first meta-step, s",
              "process wall s",
          )
      )
  )
  with tempfile.TemporaryDirectory() as tmp:
    for repeat in range(flags.repeats):
      for name in names:
        module, args = LAUNCHERS[name]
        cache = Path(tmp) / f"cache-{name}-{repeat}"
        for start in ("cold", "warm"):
          out = Path(tmp) / f"{name}-{repeat}-{start}"
          r = run_once(module, args, cache, out)
          extra, first = r["first_call_extra_s"], r["first_meta_step_s"]
          print(
              f"| {name} | {start} | {r['compiled']} | {r['loaded']} | "
              f"{r['xla_s']:.1f} | {r['trace_s']:.1f} | {r['lowering_s']:.1f} | "
              f"{r['traced_loaded']} | "
              f"{'-' if extra is None else f'{extra:.1f}'} | "
              f"{'-' if first is None else f'{first:.1f}'} | "
              f"{r['wall_s']:.1f} |",
              flush=True,
          )


if __name__ == "__main__":
  main()
