#!/usr/bin/env bash
# Example: a RACE sweep on a real SLURM cluster. Run it on a login node (inside tmux or
# screen: `race sweep` stays up to submit the job array, wait for it and aggregate), from
# the repository with the project's venv active or RACE pointing at its `race`.
#
#   launchers/sbatch-cluster.sh [BUDGET] [MODELS] [REWARDS] [more overrides...]
#   launchers/sbatch-cluster.sh 1e18 qwen2.5-0.5b,qwen2.5-1.5b rule grid.group_size=8
#
# BUDGET is one full-run budget in FLOPs; comma lists (MODELS, REWARDS) are sweep axes; the
# positional arguments end at the first key=value. Each pilot is one array task with one GPU;
# a pilot that reaches timeout_min is signalled, checkpoints, is requeued and resumes.
# Adapt the partition (RACE_PARTITION), setup and mem_gb to your site; add sbatch options
# with e.g. launcher.additional.account=my-account.
set -euo pipefail

budget=1e18
models=qwen2.5-0.5b,qwen2.5-1.5b
rewards=rule,qwen2.5-math-prm-7b   # the policy's tokenizer family: not the tiny PRMs
[[ $# -gt 0 && $1 != *=* ]] && { budget=$1; shift; }
[[ $# -gt 0 && $1 != *=* ]] && { models=$1; shift; }
[[ $# -gt 0 && $1 != *=* ]] && { rewards=$1; shift; }

exec "${RACE:-race}" sweep "budget=$budget" "model=$models" "reward=$rewards" \
    launcher=slurm \
    launcher.partition="${RACE_PARTITION:-gpu}" \
    launcher.gpus_per_node=1 \
    launcher.cpus_per_task=8 \
    launcher.mem_gb=64 \
    launcher.timeout_min=120 \
    launcher.array_parallelism=32 \
    'launcher.setup=[module load cuda]' \
    "$@"
