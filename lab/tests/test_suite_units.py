"""The lab's suite option: which Debian (and so which Slurm) a lab's machines boot.

No root needed: debootstrap and the machines are replaced by fakes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_lab import cli, rootfs
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab


@pytest.fixture(autouse=True)
def _no_suite_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_LAB_SUITE", raising=False)


def _fake_builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, str]]:
    builds: list[tuple[Path, str]] = []

    def fake_build(target: Path, mirror: str, suite: str = rootfs.DEFAULT_SUITE) -> None:
        (target / "etc").mkdir(parents=True)
        builds.append((target, suite))

    monkeypatch.setattr(rootfs, "_build", fake_build)
    monkeypatch.setenv("SLURM_LAB_MIRROR", "http://mirror.example.org/debian")
    return builds


def test_known_suites_only(monkeypatch: pytest.MonkeyPatch):
    assert rootfs.check_suite("forky") == "forky"
    with pytest.raises(LabError, match="unknown lab suite 'bookworm'"):
        rootfs.check_suite("bookworm")
    assert rootfs.default_suite() == "trixie"
    monkeypatch.setenv("SLURM_LAB_SUITE", "forky")
    assert rootfs.default_suite() == "forky"
    monkeypatch.setenv("SLURM_LAB_SUITE", "sid")
    with pytest.raises(LabError, match="unknown lab suite 'sid'"):
        rootfs.default_suite()


def test_each_suite_has_its_own_cache_key():
    assert rootfs.recipe("forky")["suite"] == "forky"
    assert rootfs.recipe_hash("forky") != rootfs.recipe_hash("trixie")
    # The trixie key is the one of the recipe before suites existed: no rebuild for it.
    assert rootfs.recipe_hash() == rootfs.recipe_hash("trixie")


def test_one_cached_base_per_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    builds = _fake_builds(monkeypatch)
    (tmp_path / "base-0ld").mkdir()  # cached before suites: a trixie base
    forky = rootfs.ensure_base(tmp_path, "forky")
    assert forky == tmp_path / f"base-{rootfs.recipe_hash('forky')}"
    assert builds[-1][1] == "forky"
    assert rootfs.base_suite(forky) == "forky"
    recorded = tmp_path / "recipes" / f"{forky.name}.json"
    assert json.loads(recorded.read_text()) == rootfs.recipe("forky")
    assert (tmp_path / "base-0ld").is_dir(), "a forky build pruned a trixie base"

    trixie = rootfs.ensure_base(tmp_path, "trixie")
    assert rootfs.base_suite(trixie) == "trixie" and builds[-1][1] == "trixie"
    assert not (tmp_path / "base-0ld").exists()
    assert forky.is_dir(), "a trixie build pruned the forky base"
    assert rootfs.ensure_base(tmp_path, "forky") == forky and len(builds) == 2

    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "vim"))
    newer_forky = rootfs.ensure_base(tmp_path, "forky")
    assert newer_forky != forky and not forky.exists()
    assert not (tmp_path / "recipes" / f"{forky.name}.json").exists()
    assert trixie.is_dir()


def test_the_environment_chooses_the_suite_of_ensure_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    builds = _fake_builds(monkeypatch)
    monkeypatch.setenv("SLURM_LAB_SUITE", "forky")
    assert rootfs.ensure_base(tmp_path) == tmp_path / f"base-{rootfs.recipe_hash('forky')}"
    assert builds == [(builds[0][0], "forky")]


def test_debootstrap_gets_the_suite_and_a_script_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "sid").write_text("")
    (scripts / "trixie").symlink_to("sid")
    monkeypatch.setattr(rootfs, "DEBOOTSTRAP_SCRIPTS", scripts)
    assert rootfs.debootstrap_script("trixie") == str(scripts / "trixie")
    assert rootfs.debootstrap_script("forky") == str(scripts / "sid")

    argvs: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: object) -> None:
        del kwargs
        argvs.append(argv)

    monkeypatch.setattr(rootfs, "run", fake_run)
    monkeypatch.setattr(rootfs, "_verify", lambda target: None)
    monkeypatch.setattr(rootfs, "_configure", lambda target: None)
    rootfs._build(tmp_path / "target", "http://mirror.example.org/debian", "forky")
    assert argvs[0][-4:] == [
        "forky",
        str(tmp_path / "target"),
        "http://mirror.example.org/debian",
        str(scripts / "sid"),
    ]


def test_a_lab_keeps_its_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert Lab(tmp_path / "plain").suite == "trixie"
    monkeypatch.setenv("SLURM_LAB_SUITE", "forky")
    assert Lab(tmp_path / "env").suite == "forky"
    assert Lab(tmp_path / "explicit", suite="trixie").suite == "trixie"
    with pytest.raises(LabError, match="unknown lab suite"):
        Lab(tmp_path / "bad", suite="buster")

    lab = Lab(tmp_path / "kept", suite="forky")
    lab._record_suite()
    monkeypatch.delenv("SLURM_LAB_SUITE")
    assert Lab(tmp_path / "kept").suite == "forky", "reopening the lab changed its suite"


def test_a_lab_with_machines_refuses_another_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    lab = Lab(tmp_path, suite="forky")
    lab._record_suite()
    other = Lab(tmp_path, suite="trixie")
    other._record_suite()  # no machines yet: the lab may change its suite
    assert Lab(tmp_path).suite == "trixie"
    monkeypatch.setattr(Lab, "_load", lambda self: {"m": object()})
    with pytest.raises(LabError, match="machines run trixie: bring the lab down to use forky"):
        lab._record_suite()
    with pytest.raises(LabError, match="machines run trixie"):
        lab.create("m2")


def test_cli_up_takes_a_suite():
    parser = cli.build_parser()
    assert parser.parse_args(["up", "--suite", "forky"]).suite == "forky"
    assert parser.parse_args(["up"]).suite is None
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--suite", "bookworm"])
    args = parser.parse_args(["--state-dir", "/nonexistent/lab", "up", "--suite", "forky"])
    assert cli._lab(args).suite == "forky"


def test_the_python_of_a_base_is_read_from_its_python3_link(tmp_path: Path):
    bin_dir = tmp_path / "usr/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to("python3.14")
    assert rootfs.python_version(tmp_path) == "3.14"
    (bin_dir / "python3").unlink()
    (bin_dir / "python3").symlink_to("/usr/bin/pypy3")
    with pytest.raises(LabError, match="cannot tell the Python version"):
        rootfs.python_version(tmp_path)
