"""unpack_charm: a .charm unpacked as Juju unpacks a unit's charm; a build machine's failure
(no root needed)."""

from __future__ import annotations

import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from slurm_lab import builder
from slurm_lab.errors import LabError
from slurm_lab.juju import charms


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    return info


def _charm(path: Path, *entries: tuple[zipfile.ZipInfo, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return path


def test_unpack_keeps_modes_and_links_and_leaves_other_files(tmp_path: Path):
    charm = _charm(
        tmp_path / "c.charm",
        (_entry("dispatch", stat.S_IFREG | 0o755), b"#!/bin/sh\n"),
        (_entry("src/charm.py", stat.S_IFREG | 0o644), b"import ops\n"),
        (_entry("venv/lib64", stat.S_IFLNK | 0o777), b"lib"),
    )
    dest = tmp_path / "unit-a-0" / "charm"
    dest.mkdir(parents=True)
    (dest / ".unit-state.db").write_text("kept")
    (dest / "dispatch").write_text("old")

    charms.unpack_charm(charm, dest)

    assert (dest / "dispatch").read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE((dest / "dispatch").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "src" / "charm.py").stat().st_mode) == 0o644
    assert (dest / "venv" / "lib64").is_symlink()
    assert (dest / "venv" / "lib64").readlink() == Path("lib")
    assert (dest / ".unit-state.db").read_text() == "kept"


def test_unpack_refuses_an_entry_leading_out(tmp_path: Path):
    charm = _charm(tmp_path / "c.charm", (_entry("../evil", stat.S_IFREG | 0o644), b"x"))

    with pytest.raises(LabError, match="leads out"):
        charms.unpack_charm(charm, tmp_path / "charm")
    assert not (tmp_path / "evil").exists()


def test_a_failed_build_machine_command_raises_with_its_exit_and_output_tail():
    ok = subprocess.CompletedProcess(["sh"], 0, stdout="fine", stderr="")
    failed = subprocess.CompletedProcess(["sh"], 3, stdout="x" * 5000, stderr="E: no such package")

    assert builder.succeeded(ok, "cannot download") is ok
    with pytest.raises(LabError) as caught:
        builder.succeeded(failed, "cannot download")
    message = str(caught.value)
    assert message.startswith("cannot download (exit 3):\n")
    assert message.endswith("x" * 3982 + "E: no such package")


def _base(root: Path, debian_version: str, python: str) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text(debian_version + "\n")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3").symlink_to(python)
    return root


def test_a_lab_build_names_its_debian_and_python(tmp_path: Path):
    trixie = charms.lab_build(_base(tmp_path / "trixie", "13.8", "python3.13"))
    forky = charms.lab_build(_base(tmp_path / "forky", "forky/sid", "python3.14"))

    assert trixie.note == "lab: Debian 13, Python 3.13, not for Ubuntu"
    assert trixie.file_tag == "lab-debian13-python3.13-not-for-ubuntu"
    assert forky.note == "lab: Debian forky, Python 3.14, not for Ubuntu"


def test_a_lab_pack_says_in_its_manifest_it_is_not_for_ubuntu(tmp_path: Path):
    manifest = b"charmcraft-version: 4.5.0\nbases:\n- name: ubuntu\n  channel: '24.04'\n"
    charm = _charm(
        tmp_path / "c.charm",
        (_entry("manifest.yaml", stat.S_IFREG | 0o644), manifest),
        (_entry("dispatch", stat.S_IFREG | 0o755), b"#!/bin/sh\n"),
    )

    charms.mark_lab_build(charm, charms.LabBuild("13", "3.13"))

    with zipfile.ZipFile(charm) as archive:
        marked = archive.read("manifest.yaml")
        modes = {entry.filename: entry.external_attr >> 16 for entry in archive.infolist()}
    assert marked == b"# lab: Debian 13, Python 3.13, not for Ubuntu\n" + manifest
    assert modes["dispatch"] == stat.S_IFREG | 0o755
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.charm"]


def test_the_builder_program_installs_charmcraft_where_the_lab_runs_it():
    assert f"--system-site-packages {builder.CHARMCRAFT_DIR}/venv\n" in builder._SETUP
    assert f"cat > {builder.CHARMCRAFT_LAB} <<" in builder._SETUP


def test_a_cached_build_runs_once_replaces_older_trees_and_leaves_nothing_when_it_fails(
    tmp_path: Path,
):
    builds: list[Path] = []

    def build(scratch: Path) -> Path:
        builds.append(scratch)
        tree = scratch / "tree"
        tree.mkdir()
        (tree / "made").write_text("whole")
        return tree

    (tmp_path / "debs-old0").mkdir()  # an older key's tree
    (tmp_path / "other-kept").mkdir()  # another cache's tree
    first = builder.cached_build(tmp_path, "debs", builder.content_key("1", "a"), build)
    again = builder.cached_build(tmp_path, "debs", builder.content_key("1", "a"), build)
    assert first == again == tmp_path / f"debs-{builder.content_key('1', 'a')}"
    assert len(builds) == 1 and not builds[0].exists()  # the scratch dir went
    assert (first / "made").read_text() == "whole"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        [first.name, "other-kept"]
    )
    assert builder.content_key("1", "a") != builder.content_key("1a")

    def failing(scratch: Path) -> Path:
        (scratch / "half").mkdir()
        raise LabError("download failed")

    with pytest.raises(LabError, match="download failed"):
        builder.cached_build(tmp_path, "debs", builder.content_key("2"), failing)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".debs-")] == []
    assert (first / "made").exists()  # a failed build removes no older tree
