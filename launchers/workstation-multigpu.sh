#!/usr/bin/env bash
# Example: a RACE sweep on one machine with several GPUs: one pilot per GPU at a time, each
# pinned with CUDA_VISIBLE_DEVICES, the rest queued.
#
#   launchers/workstation-multigpu.sh [more overrides...]
#   GPUS=0,1 launchers/workstation-multigpu.sh budget=1e17,1e18 model=qwen2.5-0.5b
#
# The GPU list goes in brackets: a bare launcher.gpus=0,1,2,3 would be a sweep axis.
set -euo pipefail

exec "${RACE:-race}" sweep launcher=local "launcher.gpus=[${GPUS:-0,1,2,3}]" "$@"
