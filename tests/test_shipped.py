"""The shipped warm starts: the default recipes install the weights the docs ran from,
checked by sha256; a differing cached folder is never used silently; other recipes build."""

import json

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
