"""The launcher registry: one backend per module of race/run/launch/, looked up by name;
its names are race/conf/launcher/'s; a miss says "did you mean"; and a new launcher is two
files (its module and its YAML), shown here with a stand-in written to tmp_path."""

import json
import shutil
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from race import catalog
from race.config import LauncherConfig, compose_config, validate
from race.core.specs import RunSpec
from race.errors import UnknownName, UsageError
from race.run.bounds import uses_gpus
from race.run.launch import launcher_base
from race.run.launch.launcher_base import SHARED_KEYS, Task, launcher_for, launchers


def test_every_launcher_yaml_has_a_registered_module_and_back():
    assert list(launchers()) == catalog.names("launcher") == ["inline", "local", "slurm"]
    for name, launcher in launchers().items():
        assert launcher_for(name) is launcher and launcher.name == name


def test_each_launcher_declares_the_keys_its_yaml_sets():
    schema = {f.name for f in fields(LauncherConfig)}
    for name, launcher in launchers().items():
        assert set(launcher.keys) <= schema, name
        assert set(catalog.load_entry("launcher", name)) <= {*SHARED_KEYS, *launcher.keys}


def test_a_registry_miss_lists_the_names_and_the_closest():
    with pytest.raises(UnknownName, match=r"launcher=slrum: .*valid names: inline, local, "
                                          r"slurm; did you mean launcher=slurm\?"):
        launcher_for("slrum")


def test_config_knows_the_launchers_by_their_yaml_files():
    cfg = compose_config(["launcher.name=slrum"])
    with pytest.raises(UsageError, match="launcher.name='slrum': use launcher=inline, local "
                                         "or slurm"):
        validate(cfg)
    with pytest.raises(UnknownName, match="did you mean launcher=slurm"):
        compose_config(["launcher=slrum"])


@pytest.mark.parametrize("overrides, gpus", [
    ([], False), (["launcher.gpus=[0]"], True), (["launcher=slurm"], False),
    (["launcher=slurm", "launcher.gpus_per_node=1"], True),
    (["launcher=inline"], False), (["launcher.gpus_per_node=1"], True)])
def test_a_plan_with_gpu_keys_is_planned_for_gpus(overrides, gpus):
    assert uses_gpus(compose_config(overrides)) is gpus


DRYRUN = '''"""A stand-in launcher: records every pilot as not run."""

from race.run.launch.launcher_base import Ended


class DryRunWatcher:
    def start(self, tasks):
        pass

    def poll(self, pending):
        return [Ended(t, lost="dry run: " + self.reason) for t in pending]

    def running(self, pending):
        return 0

    def stop(self):
        pass


class DryRunLauncher:
    name = "dryrun"
    keys = ("options",)
    in_process = True

    def check(self, cfg):
        pass

    def executor(self, cfg, folder):
        return None

    def watcher(self, cfg, executor, job):
        watcher = DryRunWatcher()
        watcher.reason = cfg.options["reason"]
        return watcher

    def threads(self, cfg):
        return 1


LAUNCHER = DryRunLauncher()
'''


@pytest.fixture
def dryrun(tmp_path, monkeypatch):
    """A launcher of two files: ``dryrun.py`` (on the package's path) and
    ``race/conf/launcher/dryrun.yaml`` (in a copy of race/conf/)."""
    package = sys.modules["race.run.launch"]
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "dryrun.py").write_text(DRYRUN)
    conf = tmp_path / "conf"
    shutil.copytree(catalog.conf_dir(), conf)
    (conf / "launcher" / "dryrun.yaml").write_text(
        "name: dryrun\noptions:\n  reason: not launched\n")
    monkeypatch.setenv("RACE_CONF_DIR", str(conf))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path / "modules")])
    launcher_base.launchers.cache_clear()
    yield
    launcher_base.launchers.cache_clear()
    sys.modules.pop("race.run.launch.dryrun", None)


def test_a_new_launcher_is_its_module_and_its_yaml(dryrun, tmp_path):
    from race.run.launch.watch import launch

    assert "dryrun" in launchers() and catalog.names("launcher")[0] == "dryrun"
    cfg = compose_config(["launcher=dryrun", "launcher.options.reason=just looking"])
    validate(cfg)
    spec = RunSpec(model="tiny-s", reward=(("name", "rule"),), task=(("name", "arith"),),
                   budget_flops=1e10)
    task = Task(spec, str(tmp_path / "cells" / spec.cell_id))
    counts = launch([task], cfg.launcher, tmp_path / "submitit")
    assert counts.failed == 1 and counts.done == 0
    summary = json.loads((Path(task.cell_dir) / "summary.json").read_text())
    assert summary["error"] == "dry run: just looking"
