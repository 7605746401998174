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
