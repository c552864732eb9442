"""A real install: the wheel built from this checkout ships the config groups inside
``race/`` and no top-level ``bench`` (or any other generic package), and installed without
``-e`` into a fresh venv, run from a folder outside the checkout, ``race plan``, ``race
flops`` and a tiny ``race sweep`` work (the shipped warm start included).

Offline: the wheel builds with ``--no-build-isolation`` from the setuptools already
installed, and the fresh venv reuses the installed dependencies through a ``.pth`` line
naming this interpreter's site-packages (a plain path: the editable install's finder
there is not run, so ``race`` comes from the wheel alone).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the build reads: the package, its metadata and the readme pyproject.toml names
SOURCES = ("race", "pyproject.toml", "README.md")
# a tiny sweep: 1 cell of the shipped tiny-s warm start, a few GRPO steps, in-process
SWEEP = ["model=tiny-s", "reward=rule", "grid.prompts_per_step=2", "grid.group_size=2",
         "grid.max_new_tokens=12", "grid.update_epochs=1", "grid.lora_rank=4",
         "pilot.eval_examples=4", "pilot.eval_targets=[test]", "budget=1e10",
         "selection.policy=flat", "launcher=inline"]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env,
                         timeout=timeout)
    assert out.returncode == 0, f"{args[:3]}: exit {out.returncode}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of the checkout (the build's files stay out of the checkout)."""
    pytest.importorskip("setuptools", reason="the wheel builds with the installed setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(dist), str(src)], cwd=src)
    (built,) = dist.glob("race_rl-*.whl")
    return built


def test_the_wheel_ships_the_configs_inside_race_and_no_generic_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"race"}, tops
    shipped = {n for n in names if n.startswith("race/conf/")}
    expected = {f"race/{p.relative_to(ROOT / 'race')}"
                for p in (ROOT / "race" / "conf").rglob("*.yaml")}
    assert expected and shipped == expected, expected ^ shipped
    assert "race/conf/model/tiny-s.yaml" in shipped
    assert {f"race/warmstart/weights/{p.name}"
            for p in (ROOT / "race" / "warmstart" / "weights").glob("*.tar.gz")} <= set(names)


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (no ``-e``) and this interpreter's packages
    (torch, transformers, hydra, ...) on its path; its ``bin/``."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    python = root / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=root).stdout.strip()
    Path(purelib, "_race_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "-q", str(wheel)], cwd=root)
    return root / "bin"


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RACE_CONF_DIR", "VIRTUAL_ENV")}
    return env | {"RACE_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1",
                  "HF_HUB_CACHE": str(tmp / "hub")}


def test_the_installed_race_runs_from_outside_the_checkout(venv, tmp_path):
    env = _env(tmp_path)
    where = _run([str(venv / "python"), "-c", "import race.catalog as c; "
                  "print(c.__file__); print(c.conf_dir())"], cwd=tmp_path, env=env).stdout
    module, conf = where.split()
    assert not Path(module).is_relative_to(ROOT) and Path(conf).is_dir(), where
    assert Path(conf) == Path(module).parent / "conf"
    race = str(venv / "race")
    plan = _run([race, "plan", "budget=2e12,8e12", "model=tiny-s,tiny-m"], cwd=tmp_path,
                env=env)
    assert "tiny-m" in plan.stdout + plan.stderr
    flops = _run([race, "flops", "model=qwen2.5-0.5b", "budget=1e17"], cwd=tmp_path, env=env)
    assert "qwen2.5-0.5b" in flops.stdout
    sweep = _run([race, "sweep", *SWEEP, f"sweep.out_dir={tmp_path / 'results'}",
                  "sweep.name=s"], cwd=tmp_path, env=env, timeout=600)
    assert (tmp_path / "results" / "s" / "pilots.csv").is_file(), sweep.stderr[-2000:]
    assert not (tmp_path / "conf").exists()


def test_race_conf_dir_still_overrides_the_package_configs(venv, tmp_path):
    env = _env(tmp_path)
    conf = tmp_path / "myconf"
    shutil.copytree(ROOT / "race" / "conf", conf)
    (conf / "model" / "tiny-s.yaml").rename(conf / "model" / "my-tiny.yaml")
    text = (conf / "model" / "my-tiny.yaml").read_text().replace("name: tiny-s", "name: my-tiny")
    (conf / "model" / "my-tiny.yaml").write_text(text)
    out = _run([str(venv / "race"), "flops", "model=my-tiny", "budget=1e12"], cwd=tmp_path,
               env=env | {"RACE_CONF_DIR": str(conf)})
    assert "my-tiny" in out.stdout
