"""The shipped warm starts: the default recipes install the weights the docs ran from,
checked by sha256; a differing cached folder is never used silently; other recipes build."""

import json
from pathlib import Path

import pytest

from race.errors import UsageError
from race.warmstart import shipped
from race.warmstart.policies import build_tiny_policy, warm_start_recipe
from race.warmstart.prm import family_prm


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_shipped_archive_matches_its_recorded_checksums(tmp_path):
    for archive in shipped.ARCHIVES:
        assert shipped._sha256(archive.path) == archive.sha256, archive.file
        for name in archive.folders:  # each folder installs and checks clean
            folder = shipped.install(name, tmp_path / name)
            assert not shipped.differing(folder, name)
            assert (folder / "build_info.json").is_file() and (folder / "config.json").is_file()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_recipes_install_the_shipped_weights_instead_of_training(empty_cache, seed,
                                                                         capsys):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m",
                                                                  warmstart={"seed": seed}))
    name = f"policies/{folder.name}"
    assert shipped.archive_of(name) is shipped.ARCHIVES[seed]
    assert not shipped.differing(folder, name)
    prm = family_prm("prm-tiny-s", warmstart={"seed": seed})
    assert shipped.archive_of(f"prms/{prm.name}") is shipped.ARCHIVES[seed]
    assert "built on this machine" not in capsys.readouterr().err


def test_a_cached_warm_start_with_other_weights_is_refused(empty_cache):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    (folder / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(UsageError, match=r"not the one RACE ships.*rm -r"):
        build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    # the fix the message gives works
    import shutil

    shutil.rmtree(folder)
    again = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    assert not shipped.differing(again, f"policies/{again.name}")


def test_a_local_build_of_a_shipped_recipe_is_used_with_a_warning(empty_cache, capsys):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    info = json.loads((folder / "build_info.json").read_text())
    (folder / "build_info.json").write_text(json.dumps(info | {"local_build": True}))
    (folder / "model.safetensors").write_bytes(b"rebuilt here")
    assert build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m")) == folder
    assert "a local build, not the weights RACE ships" in capsys.readouterr().err


def test_another_recipe_is_built_here_and_says_its_results_differ(empty_cache, capsys):
    from bench.common import quick_recipe

    folder = build_tiny_policy("tiny-s", recipe=quick_recipe("tiny-s"))
    assert shipped.archive_of(f"policies/{folder.name}") is None
    assert "not a warm start RACE ships" in capsys.readouterr().err
    assert (folder / "model.safetensors").is_file()


# issue 62, item 3: every file of a shipped warm start is checked, and each damage is one
# refusal with its fix ("remove it (rm -r ...) and RACE installs the shipped weights")
REFUSED = r"RACE_CACHE_DIR: .* remove it \(rm -r (\S+)\) and RACE installs the shipped weights"


def _edit_json(path, **changes):
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


DAMAGES = {
    "config-deleted": lambda f: (f / "config.json").unlink(),
    "config-hidden-doubled": lambda f: _edit_json(
        f / "config.json", hidden_size=2 * json.loads((f / "config.json").read_text())[
            "hidden_size"]),
    "config-rope-and-eps": lambda f: _edit_json(f / "config.json", rope_theta=50000.0,
                                                rms_norm_eps=1e-2),
    "tokenizer-garbage": lambda f: (f / "tokenizer.json").write_text("garbage{"),
    "tokenizer-config-deleted": lambda f: (f / "tokenizer_config.json").unlink(),
    "build-info-deleted": lambda f: (f / "build_info.json").unlink(),
    "build-info-garbage": lambda f: (f / "build_info.json").write_text("garbage{"),
    "build-info-not-an-object": lambda f: (f / "build_info.json").write_text("[1, 2]"),
    "an-extra-file": lambda f: (f / "special_tokens_map.json").write_text("{}"),
    "weights-a-folder": lambda f: ((f / "model.safetensors").unlink(),
                                   (f / "model.safetensors").mkdir()),
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_any_damaged_file_of_a_cached_warm_start_is_refused(empty_cache, damage):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    damage(folder)
    with pytest.raises(UsageError, match=REFUSED) as refused:
        build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    assert "\n" not in str(refused.value) and str(folder) in str(refused.value)
    import shutil

    shutil.rmtree(folder)  # the fix the line gives works
    again = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    assert not shipped.differing(again, f"policies/{again.name}")


@pytest.mark.parametrize("where", ["folder", "policies"])
def test_a_file_where_the_warm_start_or_its_policies_folder_goes_is_refused(empty_cache,
                                                                            where):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    import shutil

    blocked = folder if where == "folder" else folder.parent
    shutil.rmtree(blocked)
    blocked.write_text("not a folder")
    with pytest.raises(UsageError, match=REFUSED) as refused:
        build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    assert refused.match(rf"rm -r {blocked}\)")
    blocked.unlink()
    assert build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m")) == folder


def test_the_table_holds_every_file_of_every_archive():
    import hashlib
    import tarfile

    for archive in shipped.ARCHIVES:
        found = {}
        with tarfile.open(archive.path) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    _, kind, name, file = member.name.split("/")
                    found.setdefault(f"{kind}/{name}", {})[file] = hashlib.sha256(
                        tar.extractfile(member).read()).hexdigest()
        assert found == archive.folders, archive.file


def test_a_staging_folder_left_by_a_killed_install_is_removed(empty_cache):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    import shutil
    import tempfile

    shutil.rmtree(folder)  # as a kill -9 mid-install leaves it: a staging folder, no folder
    stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    (stale / "model.safetensors").write_bytes(b"half")
    assert build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m")) == folder
    assert not stale.exists()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no lock file either


def test_a_local_build_with_another_config_keeps_its_warning(empty_cache, capsys):
    folder = build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m"))
    _edit_json(folder / "build_info.json", local_build=True)
    _edit_json(folder / "config.json", rope_theta=50000.0)
    assert build_tiny_policy("tiny-m", recipe=warm_start_recipe("tiny-m")) == folder
    assert "a local build, not the weights RACE ships" in capsys.readouterr().err


B = ["model=tiny-s", "reward=rule", "grid.group_size=4", "grid.update_epochs=1", "budget=1e12",
     "selection.policy=flat", "pilot.select_examples=64", "pilot.eval_examples=16"]


@pytest.mark.parametrize("damage", ["config-deleted", "build-info-garbage",
                                    "build-info-deleted", "policies-a-file"])
def test_race_sweep_and_race_pilot_refuse_a_damaged_warm_start_before_anything(
        empty_cache, tmp_path, damage):
    """Both commands refuse before any cell or sweep.json (exit 2, one line): ``race
    pilot`` runs the warm-start check ``race sweep`` runs (issue 62, item 5)."""
    from conftest import race_in_process  # tests/conftest.py

    folder = build_tiny_policy("tiny-s", recipe=warm_start_recipe("tiny-s"))
    if damage == "policies-a-file":
        import shutil

        shutil.rmtree(folder.parent)
        folder.parent.write_text("not a folder")
    else:
        DAMAGES[damage](folder)
    for command, out in (("sweep", f"sweep.out_dir={tmp_path / 'results'}"),
                         ("pilot", f"pilot.out_dir={tmp_path / 'results'}")):
        done = race_in_process([command, *B, out], tmp_path)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"race {command}: RACE_CACHE_DIR: ")
        assert "and RACE installs the shipped weights" in lines[0]
        assert not (tmp_path / "results").exists()
