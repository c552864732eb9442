"""The SLURM launcher: what a pilot asks the cluster for, the check of that request
against ``sinfo`` before anything is submitted, and the watcher of one job array.
Timed-out or preempted pilots are checkpointed by submitit's signal handler, requeued,
and resume from their own last checkpoint.

``sinfo`` and ``squeue`` are read through pure parsers (:func:`parse_sinfo`,
:func:`parse_squeue`), tested against stored outputs; only :func:`check_slurm` and
:func:`_squeue` run them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from race.errors import UsageError
from race.run.launch.launcher_base import AskedOnce, Ended, Task, Watcher

# SLURM defaults per pilot when cpus_per_task / mem_gb are null: (CPUs, GB) without a GPU,
# and per GPU (data loading, tokenization and the checkpoint's host copy)
SLURM_CPU_DEFAULTS, SLURM_GPU_DEFAULTS = (1, 4), (8, 32)


def slurm_resources(cfg) -> tuple[int, int]:
    """(CPUs, host GB) each SLURM pilot asks for: the configured values, else defaults
    that scale with ``gpus_per_node``."""
    cpus, gb = (tuple(n * cfg.gpus_per_node for n in SLURM_GPU_DEFAULTS)
                if cfg.gpus_per_node else SLURM_CPU_DEFAULTS)
    return (cfg.cpus_per_task or cpus, cfg.mem_gb or gb)


def slurm_parameters(cfg) -> dict[str, Any]:
    """The submitit ``update_parameters`` of a SLURM job array for ``cfg`` (a
    ``LauncherConfig``)."""
    cpus, mem_gb = slurm_resources(cfg)
    params = dict(timeout_min=cfg.timeout_min, cpus_per_task=cpus,
                  mem_gb=mem_gb, slurm_array_parallelism=cfg.array_parallelism,
                  slurm_signal_delay_s=cfg.signal_delay_s, name="race-pilot")
    if cfg.partition:
        params["slurm_partition"] = cfg.partition
    if cfg.gpus_per_node:
        params["gpus_per_node"] = cfg.gpus_per_node
    if cfg.setup:
        params["slurm_setup"] = list(cfg.setup)
    if cfg.additional:
        params["slurm_additional_parameters"] = dict(cfg.additional)
    return params


SINFO_FORMAT = "%P|%c|%m|%G"  # partition (default marked *), CPUs, memory MB, generic resources


def parse_sinfo(text: str) -> dict[str, tuple[int, int, int, bool]]:
    """``sinfo -h -o "%P|%c|%m|%G"`` as partition -> (CPUs, memory MB, GPUs, default),
    the largest node of each partition (a partition may list several node kinds; ``+``
    marks a minimum, e.g. ``64+``).
    """
    partitions: dict[str, tuple[int, int, int, bool]] = {}
    for line in text.split():
        name, cpus, mem, gres = line.split("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        # gpu[:type]:count[(S:sockets)]: the count before any socket list
        gpus = sum(int(g.split("(")[0].split(":")[-1]) for g in gres.split(",")
                   if g.startswith("gpu"))
        node = (int(cpus.rstrip("+")), int(mem.rstrip("+")), gpus)
        seen = partitions.get(name)
        if seen is not None:
            node = tuple(max(a, b) for a, b in zip(node, seen[:3]))
            default = default or seen[3]
        partitions[name] = (*node, default)
    return partitions


def check_sbatch(key: str, *, fix: str) -> None:
    """Refuse a SLURM launch where SLURM is absent (no ``sbatch`` on PATH), before a
    launcher starts and fails deep inside submitit ("Could not detect srun").

    Raises UsageError naming ``key`` (the override that asked for SLURM) and ``fix``.
    """
    if shutil.which("sbatch") is None:
        raise UsageError(f"{key}: no SLURM here (sbatch not found on PATH); {fix}")


def check_slurm(cfg) -> None:
    """Refuse, before anything is submitted, a partition or a request the cluster lacks.

    Raises ValueError naming the key and the fix (the CLI's exit code 2).
    """
    try:
        out = subprocess.run(["sinfo", "-h", "-o", SINFO_FORMAT], capture_output=True,
                             text=True, timeout=30)
    except FileNotFoundError:
        raise UsageError("launcher=slurm: `sinfo` is not on PATH; run on a SLURM login node, "
                         "bring up the localhost cluster (bash launchers/slurm-localhost.sh "
                         "up), or use launcher=local") from None
    if out.returncode != 0:
        raise UsageError(f"launcher=slurm: sinfo failed ({out.stderr.strip()}); check "
                         f"SLURM_CONF and that slurmctld is up")
    partitions = parse_sinfo(out.stdout)
    name = cfg.partition or next((n for n, p in partitions.items() if p[3]), "")
    if name not in partitions:
        raise UsageError(f"launcher.partition={cfg.partition!r}: no such SLURM partition; "
                         f"valid: {', '.join(sorted(partitions))}")
    cpus, mem_mb, gpus, _ = partitions[name]
    want_cpus, want_gb = slurm_resources(cfg)
    for key, asked, has, unit in (("cpus_per_task", want_cpus, cpus, "CPUs"),
                                  ("mem_gb", want_gb * 1024, mem_mb, "MB"),
                                  ("gpus_per_node", cfg.gpus_per_node, gpus, "GPUs")):
        if asked > has:
            shown = want_gb if key == "mem_gb" else asked
            raise UsageError(f"launcher.{key}={shown}: larger than a node of partition "
                             f"{name!r} ({has} {unit}); request at most that")


def parse_squeue(text: str) -> dict[str, str]:
    """``squeue -h -r -o "%i %t"`` output as ``{job id: state code}`` (R, PD, CG, ...)."""
    return {parts[0]: parts[1] for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 2}


def _squeue() -> dict[str, str] | None:
    """This cluster's queue (:func:`parse_squeue`), or None when squeue does not answer."""
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %t"], capture_output=True,
                             text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return parse_squeue(out.stdout) if out.returncode == 0 else None


class SlurmWatcher:
    """One SLURM job array, one array task per task, watched through ``squeue``.

    A task has ended when submitit says its job is done. A job gone from the queue without
    a result (cancelled, out of requeues, node lost) for ``lost_after_s`` seconds is lost:
    submitit alone would need ``sacct`` to notice.
    """

    def __init__(self, executor, job, *, lost_after_s: float, max_requeues: int):
        """``max_requeues``: the executor's requeue limit, named in a lost job's error."""
        self.executor, self.job = executor, job
        self.lost_after_s, self.max_requeues = lost_after_s, max_requeues
        self.jobs: dict[str, Any] = {}  # cell folder -> its task's submitit job
        self.queue: dict[str, str] | None = {}  # the last squeue; None: it did not answer
        # cell folder -> time.monotonic() when its job was first seen gone from the queue
        self.missing_since_s: dict[str, float] = {}

    def start(self, tasks: list[Task]) -> None:
        subs = self.executor.map_array(self.job, [t.spec for t in tasks],
                                       [t.cell_dir for t in tasks])
        self.jobs = {t.cell_dir: AskedOnce(sub) for t, sub in zip(tasks, subs)}
        print(f"race sweep: submitted job array {subs[0].job_id.split('_')[0]} "
              f"({len(subs)} pilots) to SLURM", file=sys.stderr)

    def poll(self, pending: list[Task]) -> list[Ended]:
        self.queue = _squeue()
        ends = []
        for task in pending:
            sub = self.jobs[task.cell_dir]
            if sub.done():
                ends.append(Ended(task, sub))
                continue
            if self.queue is None or sub.job_id in self.queue:
                self.missing_since_s.pop(task.cell_dir, None)
                continue
            first_s = self.missing_since_s.setdefault(task.cell_dir, time.monotonic())
            if time.monotonic() - first_s >= self.lost_after_s:
                ends.append(Ended(task, sub, lost=(
                    f"job {sub.job_id} left the SLURM queue without a result (cancelled, "
                    f"timed out after {self.max_requeues} requeues, or its node failed); "
                    f"log: {sub.paths.stderr}")))
        return ends

    def running(self, pending: list[Task]) -> int:
        """Started and not ended (R, or CG: completing); all of them when squeue did not
        answer."""
        if self.queue is None:
            return len(pending)
        return sum(1 for t in pending
                   if self.queue.get(self.jobs[t.cell_dir].job_id) in ("R", "CG"))

    def stop(self) -> None:
        """Nothing: the jobs are SLURM's and run on, each writing its own summary
        (``scancel`` stops them)."""


class SlurmLauncher:
    """``launcher=slurm`` (:class:`~race.run.launch.launcher_base.Launcher`)."""

    name = "slurm"
    keys = ("partition", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min",
            "array_parallelism", "setup", "additional", "signal_delay_s", "max_requeues",
            "lost_after_s")
    in_process = False

    def check(self, cfg) -> None:
        check_slurm(cfg)

    def executor(self, cfg, folder: Path):
        import submitit

        ex = submitit.AutoExecutor(folder, cluster="slurm",
                                   slurm_max_num_timeout=cfg.max_requeues)
        ex.update_parameters(**slurm_parameters(cfg))
        return ex

    def watcher(self, cfg, executor, job) -> Watcher:
        return SlurmWatcher(executor, job, lost_after_s=cfg.lost_after_s,
                            max_requeues=cfg.max_requeues)

    def threads(self, cfg) -> int:
        """The CPUs each array task asks for (:func:`slurm_resources`)."""
        return slurm_resources(cfg)[0]



LAUNCHER = SlurmLauncher()
