"""Pilots and sweeps in the experiment trackers people watch runs in (``report.tracker``).

One small protocol, one class per tracker, a registry by name (:data:`TRACKER_RUNS`,
keyed like :data:`race.core.specs.TRACKERS`, which also names each one's package)::

    run = open_run("wandb", name=cell_id, group=sweep, config=knobs, project="race",
                   folder=sweep_dir)
    run.log(step, {"charged_flops": 1.2e9, ...})   # a scalar per key, at a GRPO step
    run.text("leaderboard", markdown)              # where the tracker keeps text
    run.finish()

W&B and trackio share an API (``init``/``log``/``finish``: trackio mirrors W&B), so one
class serves both with the module swapped. MLflow goes through ``MlflowClient`` (no
global active run; ``MLFLOW_TRACKING_URI`` says where), TensorBoard writes event files
under ``<sweep>/tensorboard/<name>/`` with torch's ``SummaryWriter``. Offline stores
follow each tracker's own settings (``WANDB_MODE=offline``, ``WANDB_DIR``,
``TRACKIO_DIR``, ``MLFLOW_TRACKING_URI=file:...``).

Logging never fails a pilot: :class:`SafeRun` catches any tracker exception, prints one
warning and stops logging for the rest of that run. Each tracker's package is imported
only when its run opens.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from race.core.specs import TRACKERS, RunSpec


class TrackerRun(Protocol):
    """One run in a tracker."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def text(self, key: str, text: str) -> None: ...

    def finish(self) -> None: ...


class WandbRun:
    """A W&B run, or a trackio run (``module="trackio"``: the same API)."""

    def __init__(self, module: str, name: str, group: str, config: dict, *, project: str,
                 folder: Path):
        self.module = importlib.import_module(module)
        self.run = self.module.init(project=project, name=name, group=group, config=config)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def text(self, key: str, text: str) -> None:
        if hasattr(self.module, "Markdown"):  # trackio
            self.run.log({key: self.module.Markdown(text)})
        else:
            self.run.summary[key] = text

    def finish(self) -> None:
        self.run.finish()


class MlflowRun:
    """An MLflow run in experiment ``project``; the knobs as params, the group as a tag."""

    def __init__(self, name: str, group: str, config: dict, *, project: str, folder: Path):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        found = self.client.get_experiment_by_name(project)
        experiment = found.experiment_id if found else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment, run_name=name,
                                             tags={"group": group}).info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in config.items()]
        for i in range(0, len(params), 100):  # MLflow takes up to 100 params a batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step)
                                                    for k, v in metrics.items()])

    def text(self, key: str, text: str) -> None:
        self.client.log_text(self.run_id, text, f"{key}.md")

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


class TensorBoardRun:
    """Event files under ``<folder>/tensorboard/<name>/``; the knobs as text."""

    def __init__(self, name: str, group: str, config: dict, *, project: str, folder: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(folder) / "tensorboard" / name))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), step)

    def text(self, key: str, text: str) -> None:
        self.writer.add_text(key, text)

    def finish(self) -> None:
        self.writer.close()


def _wandb_like(module: str) -> Callable[..., TrackerRun]:
    def opener(name, group, config, *, project, folder):
        return WandbRun(module, name, group, config, project=project, folder=folder)
    return opener


# tracker name -> its run's opener (name, group, config, *, project, folder)
TRACKER_RUNS: dict[str, Callable[..., TrackerRun]] = {
    "wandb": _wandb_like("wandb"), "trackio": _wandb_like("trackio"),
    "mlflow": MlflowRun, "tensorboard": TensorBoardRun,
}
assert set(TRACKER_RUNS) | {"none"} == set(TRACKERS)


class SafeRun:
    """A tracker run that never raises: the first exception (opening included) prints one
    warning and turns every later call into nothing."""

    def __init__(self, tracker: str, name: str, group: str, config: dict, *, project: str,
                 folder: Path):
        self.tracker, self.name, self.run = tracker, name, None
        self._call(lambda: setattr(self, "run", TRACKER_RUNS[tracker](
            name, group, config, project=project, folder=folder)))

    def _call(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except Exception as exc:  # a tracker's failure is never the pilot's
            print(f"race: report.tracker={self.tracker}: {type(exc).__name__}: {exc}; "
                  f"{self.name} logs to it no more", file=sys.stderr, flush=True)
            self.run = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.run is not None and metrics:
            self._call(lambda: self.run.log(step, metrics))

    def text(self, key: str, text: str) -> None:
        if self.run is not None:
            self._call(lambda: self.run.text(key, text))

    def finish(self) -> None:
        if self.run is not None:
            self._call(self.run.finish)
            self.run = None


def open_run(tracker: str, name: str, group: str, config: Mapping[str, Any], *,
             project: str = "race", folder: Path | str = ".") -> SafeRun | None:
    """A run in ``tracker`` (None for ``none``) that never raises."""
    if tracker == "none":
        return None
    return SafeRun(tracker, name, group, flat_config(config), project=project,
                   folder=Path(folder))


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings flattened to dotted keys (``reward.name``); lists as tuples."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat |= flat_config(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class PilotFeed:
    """``run_pilot``'s ``log``: each metrics row as the run's scalars.

    A step row: ``charged_flops``, ``flops/<phase>`` (cumulative, in the spec's
    convention), ``train_reward``, ``train_accuracy``, ``completion_tokens`` and
    ``wall_s/<phase>`` (cumulative seconds). An eval row: ``eval/<target>/accuracy`` and
    ``eval/<target>/mean_reward``, at the step it followed (0: the warm start).
    """

    def __init__(self, run: SafeRun, convention: str):
        self.run, self.convention, self.step = run, convention, 0

    def finish(self) -> None:
        self.run.finish()

    def __call__(self, row: dict) -> None:
        if self.run.run is not None:  # a row it cannot read is the tracker's failure too
            self.run._call(lambda: self._feed(row))

    def _feed(self, row: dict) -> None:
        kind = row.get("kind")
        if kind == "step":
            self.step = row["step"]
            metrics = {"charged_flops": row["charged_flops"]}
            metrics |= {f"flops/{p}": v for p, v in row["flops"][self.convention].items()}
            metrics |= {k: row[k] for k in ("train_reward", "train_accuracy",
                                            "completion_tokens") if k in row}
            metrics |= {f"wall_s/{p}": v for p, v in row.get("wall_s", {}).items()}
            self.run.log(self.step, metrics)
        elif kind == "eval":
            target = row["target"]
            self.run.log(self.step, {f"eval/{target}/accuracy": row["accuracy"],
                                     f"eval/{target}/mean_reward": row["mean_reward"]})


def pilot_feed(spec: RunSpec, cell_dir: Path) -> PilotFeed | None:
    """``run_pilot``'s ``log`` for the pilot of ``spec`` in ``cell_dir``
    (``<sweep>/cells/<id>/``): a run named by its cell id, grouped by its sweep's folder
    name, its knobs as the config (None: ``tracker=none``). Finish it after the pilot."""
    if spec.tracker == "none":
        return None
    sweep = Path(cell_dir).resolve().parent.parent
    knobs = {k: v for k, v in spec.to_dict().items()
             if k not in ("policy", "reward_model", "tracker", "tracker_project")}
    return PilotFeed(open_run(spec.tracker, spec.cell_id, sweep.name, knobs,
                              project=spec.tracker_project, folder=sweep), spec.convention)


def log_sweep(tracker: str, project: str, sweep_dir: Path, written: dict) -> None:
    """The sweep's pick as one run named ``sweep`` in the sweep's group: the pick's ids and
    scores as its config and scalars, ``leaderboard.md`` as text. Never raises."""
    if tracker == "none":
        return
    sweep_dir = Path(sweep_dir)
    pick = (written.get("selected") or [{}])[0]
    config = {"target": written.get("target"), "pick": pick.get("config_id"),
              "pick_cells": ",".join(pick.get("cell_ids", []))}
    run = open_run(tracker, "sweep", sweep_dir.resolve().name, config, project=project,
                   folder=sweep_dir)
    scores = {f"pick/{k}": v for k, v in pick.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    run.log(0, scores)
    board = Path(written.get("paths", {}).get("leaderboard_md", sweep_dir / "leaderboard.md"))
    if board.is_file():
        run.text("leaderboard", board.read_text())
    run.finish()
