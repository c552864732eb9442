"""The local launcher's scheduling: slots, GPU pinning with CUDA_VISIBLE_DEVICES, and
lost jobs recorded as failed cells. Jobs here are stand-ins that record their
environment instead of training (the pilots themselves are tested elsewhere)."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

cloudpickle = pytest.importorskip("cloudpickle", reason="submitit pickles jobs with it")
pytest.importorskip("submitit", reason="launchers go through submitit")

from race.config import compose_config, to_run_spec  # noqa: E402
from race.run.launch.job import threads  # noqa: E402
from race.run.launch.launcher_base import Counts, Ended, Task  # noqa: E402
from race.run.launch.local import slots  # noqa: E402
from race.run.launch.watch import as_completed, launch  # noqa: E402

# the stand-in jobs travel by value: this test module is not importable in a job process
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class EnvJob:
    """Writes the summary a pilot would, plus what the job saw."""

    def __call__(self, spec, cell_dir):
        start = time.time()
        time.sleep(1.0)
        Path(cell_dir).mkdir(parents=True, exist_ok=True)
        (Path(cell_dir) / "summary.json").write_text(json.dumps({
            "status": "ok", "error": None, "total_flops": 0.0, "steps": 0,
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "pid": os.getpid(),
            "end": time.time()}))
        return {}


class CrashJob:
    """Dies without writing anything, as a killed process would (its slot dies too)."""

    def __call__(self, spec, cell_dir):
        os._exit(3)


def tasks(tmp_path, n):
    out = []
    for seed in range(n):
        cfg = compose_config(["model=tiny-s", "reward=rule", "budget=1e12",
                              f"pilot.seed={seed}"])
        spec = to_run_spec(cfg, 1e12 * cfg.pilot.fraction)
        out.append(Task(spec, str(tmp_path / "cells" / spec.cell_id)))
    return out


def test_one_pilot_per_gpu_pinned_and_never_more_at_once(tmp_path):
    cfg = compose_config(["launcher.gpus=[0,1]", "launcher.poll_s=0.1"]).launcher
    assert slots(cfg) == 2
    counts = launch(tasks(tmp_path, 4), cfg, tmp_path / "submitit", job=EnvJob())
    assert counts.done == 4 and counts.failed == 0
    runs = [json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*/summary.json")]
    assert {r["cuda"] for r in runs} == {"0", "1"}  # both GPUs used, each pilot pinned
    for gpu in ("0", "1"):  # each GPU runs one pilot at a time
        spans = sorted((r["start"], r["end"]) for r in runs if r["cuda"] == gpu)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_slot_runs_its_pilots_in_one_process_one_after_another(tmp_path):
    cfg = compose_config(["launcher.slots=1", "launcher.poll_s=0.1"]).launcher
    counts = launch(tasks(tmp_path, 3), cfg, tmp_path / "submitit", job=EnvJob())
    assert counts.done == 3
    runs = [json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*/summary.json")]
    assert len({r["pid"] for r in runs}) == 1  # imports paid once per slot
    spans = sorted((r["start"], r["end"]) for r in runs)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_slots_default_to_one_per_core_with_threads_split():
    cfg = compose_config([]).launcher
    assert cfg.slots == 0 and slots(cfg) == (len(os.sched_getaffinity(0)))
    assert threads(cfg) == 1
    two = compose_config(["launcher.slots=1"]).launcher
    assert threads(two) == len(os.sched_getaffinity(0))


@pytest.fixture
def dead_jobs_answer_in_1s(monkeypatch):
    """submitit waits up to 15 s for a late result file (a slow shared filesystem) each
    time a dead job is asked for its result; here the job is known dead, so 1 s is enough."""
    from submitit.local.local import LocalJob

    monkeypatch.setattr(LocalJob, "_results_timeout_s", 1)
    return LocalJob


def test_a_job_that_dies_without_output_is_recorded_as_failed(tmp_path, dead_jobs_answer_in_1s):
    cfg = compose_config(["launcher.slots=2", "launcher.poll_s=0.1"]).launcher
    (task,) = tasks(tmp_path, 1)
    counts = launch([task], cfg, tmp_path / "submitit", job=CrashJob())
    assert counts.failed == 1 and counts.done == 0
    summary = json.loads((Path(task.cell_dir) / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["cell_id"] == task.spec.cell_id
    assert summary["error"].startswith("job ")
    assert json.loads((Path(task.cell_dir) / "spec.json").read_text())["cell_id"] \
        == task.spec.cell_id


def test_a_dead_slot_is_asked_for_its_result_once(tmp_path, monkeypatch, dead_jobs_answer_in_1s):
    """submitit waits for a dead job's result file on every ``result()``: the watcher asks
    once, however many polls and reasons follow (else each poll stalls that long)."""
    LocalJob = dead_jobs_answer_in_1s
    asked = []
    result = LocalJob.result
    monkeypatch.setattr(LocalJob, "result", lambda job: asked.append(job.job_id) or result(job))
    cfg = compose_config(["launcher.slots=2", "launcher.poll_s=0.1"]).launcher
    counts = launch(tasks(tmp_path, 2), cfg, tmp_path / "submitit", job=CrashJob())
    assert counts.failed == 2
    assert len(asked) == 2 and len(set(asked)) == 2, asked  # two slots, one ask each


class DeadJob:
    """A submission whose job died without a result (what a killed process leaves)."""

    job_id = "7"

    def result(self):
        raise RuntimeError("killed")


class ScriptedWatcher:
    """A launcher without processes: poll ``i`` ends the tasks ``script[i]`` names, by
    index and how: "ok" or "failed" (the job writes that summary), "dead" (its job died
    without one), "lost" (it can never finish). Every pending task counts as running."""

    def __init__(self, tasks, script):
        self.tasks, self.script = tasks, script
        self.polls, self.started, self.stopped = 0, False, False
        self.dead = DeadJob()

    def start(self, tasks):
        self.started = True

    def poll(self, pending):
        step = self.script[self.polls]
        self.polls += 1
        ends = []
        for index, how in step:
            task = self.tasks[index]
            if how == "lost":
                ends.append(Ended(task, lost="its worker died"))
            elif how == "dead":
                ends.append(Ended(task, submission=self.dead))
            else:
                Path(task.cell_dir).mkdir(parents=True, exist_ok=True)
                (Path(task.cell_dir) / "summary.json").write_text(json.dumps(
                    {"status": how, "error": None, "total_flops": 0.0, "steps": 0}))
                ends.append(Ended(task, submission=f"job-{index}"))
        return ends

    def running(self, pending):
        return len(pending)

    def stop(self):
        self.stopped = True


def test_as_completed_yields_tasks_as_they_end_and_records_the_lost(tmp_path):
    four = tasks(tmp_path, 4)
    script = [[], [(3, "ok")], [(1, "failed"), (0, "dead"), (2, "lost")]]
    watcher = ScriptedWatcher(four, script)
    counts, seen, ended = Counts(total=4), [], []
    for task, submission in as_completed(
            watcher, four, counts=counts, poll_s=0.0,
            on_change=lambda c: seen.append((c.done, c.failed, c.running))):
        ended.append((task, submission, counts.done + counts.failed))
    assert watcher.started and watcher.polls == 3 and not watcher.stopped
    # in the order the polls ended them, each counted before it is yielded
    assert [(four.index(t), s, n) for t, s, n in ended] == [
        (3, "job-3", 1), (1, "job-1", 2), (0, watcher.dead, 3), (2, None, 4)]
    # (done, failed, running): started; poll 1 ends nothing; poll 2 ends task 3; poll 3
    # ends the other three (running drops to 0 before they are counted)
    assert seen == [(0, 0, 4), (0, 0, 4), (1, 0, 3), (1, 0, 3), (1, 1, 0), (1, 2, 0),
                    (1, 3, 0), (1, 3, 0)]
    assert (counts.done, counts.failed, counts.running) == (1, 3, 0)
    summaries = [json.loads((Path(t.cell_dir) / "summary.json").read_text()) for t in four]
    assert summaries[1]["status"] == "failed" and summaries[1]["error"] is None  # its own
    assert summaries[0]["status"] == "failed"
    assert summaries[0]["error"].startswith("job 7 ended without a result (killed)")
    assert summaries[2]["status"] == "failed" and summaries[2]["error"] == "its worker died"
    assert summaries[2]["cell_id"] == four[2].spec.cell_id


def test_as_completed_stops_the_watcher_when_interrupted_or_closed(tmp_path):
    two = tasks(tmp_path, 2)
    watcher = ScriptedWatcher(two, [[], [], []])

    def interrupt(counts):  # Ctrl-C while the display updates after the second poll
        if watcher.polls == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        list(as_completed(watcher, two, counts=Counts(total=2), poll_s=0.0,
                          on_change=interrupt))
    assert watcher.stopped and watcher.polls == 2
    closed = ScriptedWatcher(two, [[(0, "ok")], []])
    ends = as_completed(closed, two, counts=Counts(total=2), poll_s=0.0)
    assert next(ends)[0] == two[0] and not closed.stopped
    ends.close()  # the caller gave up on the rest
    assert closed.stopped


STAND_IN = '''
import os, sys, time
from pathlib import Path

import cloudpickle

from race.config import compose_config, to_run_spec
from race.run.launch.launcher_base import Task
from race.run.launch.watch import launch


class SleepJob:
    """Records its pid, then runs far longer than the test waits."""

    def __call__(self, spec, cell_dir):
        Path(cell_dir).mkdir(parents=True, exist_ok=True)
        (Path(cell_dir) / "pid").write_text(str(os.getpid()))
        time.sleep(600)


cloudpickle.register_pickle_by_value(sys.modules[__name__])
folder = Path(sys.argv[1])
tasks = []
for seed in range(2):
    cfg = compose_config(["model=tiny-s", "reward=rule", "budget=1e12", f"pilot.seed={seed}"])
    spec = to_run_spec(cfg, 1e12 * cfg.pilot.fraction)
    tasks.append(Task(spec, str(folder / "cells" / spec.cell_id)))
cfg = compose_config(["launcher.slots=2", "launcher.poll_s=0.1"]).launcher
launch(tasks, cfg, folder / "submitit", job=SleepJob())
'''


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (those of every thread)."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in children.read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping is left


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_stops_every_local_pilot(tmp_path, signum):
    """Ctrl-C (SIGINT) or ``kill`` (SIGTERM) of the sweep process leaves no pilot running:
    the local launcher kills its workers' process trees on the way out."""
    import signal
    import subprocess

    script = tmp_path / "sweep_stand_in.py"
    script.write_text(STAND_IN)
    # a sweep started from a terminal; a shell without job control (`cmd &` in a script)
    # would hand it SIGINT ignored, and Ctrl-C could not reach it
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    pids = []
    while len(pids) < 2 and time.monotonic() < deadline and proc.poll() is None:
        pids = [int(p.read_text()) for p in (tmp_path / "cells").glob("*/pid")
                if p.read_text()]
        time.sleep(0.2)
    assert len(pids) == 2, proc.communicate(timeout=30)
    assert all(_alive(pid) for pid in pids)
    controllers = _children(proc.pid)  # submitit's local controllers, one per slot
    assert len(controllers) == 2, controllers
    proc.send_signal(getattr(signal, signum))
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the sweep process did not exit within 60 s of {signum}; still alive: "
                    f"pilots {[p for p in pids if _alive(p)]}, controllers "
                    f"{[c for c in controllers if _alive(c)]} of {controllers}")
    assert proc.returncode != 0
    stop = time.monotonic() + 10
    everything = pids + controllers
    while any(_alive(pid) for pid in everything) and time.monotonic() < stop:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in everything), [p for p in everything if _alive(p)]
    proc.communicate(timeout=10)  # every holder of its pipes has exited


def test_parse_squeue_reads_job_ids_and_states():
    from race.run.launch.slurm import parse_squeue

    stored = "17_0 R\n17_1 PD\n18 CG\n\nmalformed\n"  # `squeue -h -r -o "%i %t"`
    assert parse_squeue(stored) == {"17_0": "R", "17_1": "PD", "18": "CG"}
    assert parse_squeue("") == {}


LATE_SIGNAL = '''
import os, signal, sys
from race.run.launch import job
from race.config import compose_config, to_run_spec

signum = getattr(signal, sys.argv[1])

def pilot_that_finishes_after_a_signal(spec, cell_dir, **kw):
    os.kill(os.getpid(), signum)  # arrives during the "final evaluation": noted, not acted on
    return {"status": "ok", "error": None, "steps": 3, "total_flops": 1.0}

job.run_pilot = pilot_that_finishes_after_a_signal
cfg = compose_config(["model=tiny-s", "reward=rule", "budget=1e12"])
pilot_job = job.PilotJob(1, 0)
result = pilot_job(to_run_spec(cfg, 1e12 * cfg.pilot.fraction), sys.argv[2])
print("returned", result["status"], [(int(a), int(b)) for a, b in pilot_job.unanswered],
      flush=True)
'''


@pytest.mark.parametrize("name", ["SIGUSR2", "SIGTERM"])
def test_a_signal_during_a_pilots_last_evaluation_is_not_lost(tmp_path, name):
    """The pilot finished, so nothing is left to save: a time-limit warning waits for the
    slot worker (which requeues before its next pilot); SIGTERM ends the process."""
    import signal
    import subprocess

    out = subprocess.run([sys.executable, "-c", LATE_SIGNAL, name, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    if name == "SIGUSR2":
        assert out.returncode == 0, out.stderr
        assert f"returned ok [({int(signal.SIGUSR2)}, {int(signal.SIGUSR2)})]" in out.stdout
    else:
        assert out.returncode == -signal.SIGTERM and "returned" not in out.stdout


# stored `sinfo -h -o "%P|%c|%m|%G"` outputs
SINFO_LOCALHOST = "debug*|2|23000|(null)\n"
SINFO_GPU_CLUSTER = """cpu*|64+|256000|(null)
gpu|32|512000|gpu:a100:8(S:0-1)
gpu|48|1024000|gpu:h100:4(S:0-1),gpu:a100:2
short|8|32000|gpu:2
"""


def test_sinfo_is_parsed_from_stored_outputs():
    from race.run.launch.slurm import parse_sinfo

    assert parse_sinfo(SINFO_LOCALHOST) == {"debug": (2, 23000, 0, True)}
    parsed = parse_sinfo(SINFO_GPU_CLUSTER)
    assert parsed["cpu"] == (64, 256000, 0, True)  # "64+": at least 64
    # two node kinds in one partition: its largest CPUs, memory and GPUs (4 + 2 = 6 < 8)
    assert parsed["gpu"] == (48, 1024000, 8, False)
    assert parsed["short"] == (8, 32000, 2, False)
    assert parse_sinfo("") == {}


def test_gpu_pilots_get_their_share_of_cores_and_slurm_gpu_defaults(monkeypatch):
    from types import SimpleNamespace

    from race.run.launch import job, local
    from race.run.launch.slurm import slurm_resources

    monkeypatch.setattr(local, "cores", lambda: 16)
    gpus = SimpleNamespace(name="local", threads_per_pilot=0, gpus=[0, 1, 2, 3], slots=0)
    assert local.slots(gpus) == 4 and job.threads(gpus) == 4  # cores // gpus
    slurm = SimpleNamespace(name="slurm", threads_per_pilot=0, gpus_per_node=0,
                            cpus_per_task=None, mem_gb=None)
    assert slurm_resources(slurm) == (1, 4)
    gpu = SimpleNamespace(**vars(slurm) | {"gpus_per_node": 2})
    assert slurm_resources(gpu) == (16, 64) and job.threads(gpu) == 16
    given = SimpleNamespace(**vars(gpu) | {"cpus_per_task": 4, "mem_gb": 20})
    assert slurm_resources(given) == (4, 20)


def test_kill_tree_reaches_children_started_from_any_thread(tmp_path):
    """A pilot's helper threads start processes too; killing its tree must reach them."""
    import subprocess

    from race.run.launch.local import _kill_tree

    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, threading, time\n"
        "def spawn():\n"
        "    child = subprocess.Popen(['sleep', '60'])\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(60)  # the thread lives on: the child stays its own\n"
        "threading.Thread(target=spawn, daemon=True).start()\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    _kill_tree(parent.pid)
    assert parent.wait(timeout=10) == -9
    for _ in range(100):  # the orphan is reaped by init once killed
        state = Path(f"/proc/{child}/stat")
        if not state.exists() or state.read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"child {child}, started from a thread, survived _kill_tree")


def test_a_job_that_stopped_on_a_full_disk_is_named_before_any_summary_is_written():
    """A SLURM job's pilot that hit a full disk returns NO_SPACE and writes nothing: the
    sweep must end naming that file, not write a failed summary (and fail on spec.json)."""
    from race.errors import NoSpace
    from race.run.launch.launcher_base import NO_SPACE, raise_no_space

    class Job:
        def __init__(self, outcome):
            self.outcome = outcome

        def done(self):
            return True

        def result(self):
            return self.outcome

    with pytest.raises(NoSpace, match="cells/abc/summary.json"):
        raise_no_space(Job({"status": NO_SPACE, "path": "cells/abc/summary.json"}))
    raise_no_space(Job({"status": "ok"}))  # anything else: nothing to say
    raise_no_space(None)


def test_a_log_file_gets_a_progress_line_while_a_long_pilot_runs(tmp_path, monkeypatch,
                                                                capsys):
    """Not a terminal: a line per finished pilot, and between them one per LOG_EVERY_S in
    which the running pilot's charged FLOPs moved (none while they stand still)."""
    from race.run import cells
    from race.store.cell import CellDir

    metrics = CellDir.of(tmp_path, "a").metrics
    metrics.parent.mkdir(parents=True)
    clock = [0.0]
    monkeypatch.setattr(cells.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    progress = cells.SweepProgress(tmp_path, ["a"], 1e12, done_before=0)

    def step(flops: float, at: float) -> None:
        with open(metrics, "a") as f:
            f.write(json.dumps({"kind": "step", "charged_flops": flops}) + "\n")
        clock[0] = at
        progress(Counts(total=1, running=1))

    step(1e11, 1.0)     # the first call: a line
    step(2e11, 60.0)    # within LOG_EVERY_S of it: none
    step(3e11, 1 + cells.LOG_EVERY_S)  # a period later, FLOPs moved: a line
    clock[0] = 2 + 2 * cells.LOG_EVERY_S
    progress(Counts(total=1, running=1))  # a period later, FLOPs still: none
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[sweep] 0/1 done, 1 running, 0 failed; FLOPs spent 1.00e+11 of "
                     "1.00e+12; 0m01s",
                     "[sweep] 0/1 done, 1 running, 0 failed; FLOPs spent 3.00e+11 of "
                     f"1.00e+12; {int(1 + cells.LOG_EVERY_S) // 60}m01s"]
