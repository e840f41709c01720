#!/bin/bash
# Our dependencies as wheels for the GPU machines (Python 3.12, x86_64, no
# network), in .gpu/whl (ignored by git; carry it with the device tool's
# `carry: [".gpu"]`, 64 MiB at most with everything else carried). JAX
# itself, NumPy and SciPy are the machine's own, and so are the packages in
# $GPU_HAVE (the plotting stack and common utilities of the CUDA images; the
# FFmpeg binary that gymnax's rendering would use is left out too).
# benchmarks/gpu_check.sh installs them with --no-deps into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU_HAVE=${GPU_HAVE:-"imageio-ffmpeg matplotlib pillow fonttools kiwisolver contourpy pyparsing cycler python-dateutil pytz tzdata pyyaml protobuf psutil packaging typing-extensions six uvloop pygments"}
export GPU_HAVE
rm -rf .gpu/whl && mkdir -p .gpu/whl
python3 - >.gpu/requirements.txt <<'PY'
import configparser
import os
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
skip = {"jax", "jaxlib", "numpy", "scipy", *os.environ["GPU_HAVE"].split()}
for line in cfg["options"]["install_requires"].splitlines():
  line = line.strip()
  name = line.split(">")[0].split("<")[0].split("=")[0].strip()
  if line and not line.startswith("#") and name not in skip:
    print(line)
PY
# What those need beyond the machine's JAX stack, from this machine's
# resolution (pip's report of an install of the package).
python3 -m pip install -q --dry-run --ignore-installed --report .gpu/report.json \
  -e . >/dev/null
python3 - <<'PY' >.gpu/extra.txt
import json
import os
skip = {"jax", "jaxlib", "numpy", "scipy", "disco-rl-harness"}
skip |= set(os.environ["GPU_HAVE"].split())
have = {l.split(">")[0].split("<")[0].split("=")[0].strip().lower()
        for l in open(".gpu/requirements.txt")}
for item in json.load(open(".gpu/report.json"))["install"]:
  name = item["metadata"]["name"].lower()
  if name not in skip and name not in have and not name.startswith("nvidia"):
    print(f"{name}=={item['metadata']['version']}")
PY
# Each as a CPython 3.12 wheel, or built here where PyPI has only a source
# archive (pure-Python packages such as rliable).
cat .gpu/requirements.txt .gpu/extra.txt | while read -r req; do
  python3 -m pip download -q --dest .gpu/whl --only-binary=:all: --no-deps \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any "$req" 2>/dev/null ||
    python3 -m pip wheel -q --no-deps --wheel-dir .gpu/whl "$req"
done
du -sh .gpu/whl
