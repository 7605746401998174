"""The lab's apt mirror of the newer Slurm: its Debian archive indexes, as apt reads them.

No root and no network: a tiny package is built with dpkg-deb; the download is not run.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from slurm_lab import mirror

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def _package(pool: Path, name: str, version: str) -> Path:
    tree = pool.parent / f"build-{name}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: lab <lab@example.org>\nDescription: test package\n"
    )
    deb = pool / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", str(tree), str(deb)], check=True, capture_output=True)
    shutil.rmtree(tree)
    return deb


def _fields(stanza: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)


def test_indexes_name_every_package_with_its_hashes(tmp_path: Path):
    pool = tmp_path / "debian/pool/main"
    pool.mkdir(parents=True)
    debs = [_package(pool, "slurmd", "26.05.5-1"), _package(pool, "libhwloc15", "2.15.0-2")]

    mirror._write_indexes(tmp_path / "debian")  # pyright: ignore[reportPrivateUsage]

    dist = tmp_path / "debian/dists/forky"
    packages = (dist / "main/binary-amd64/Packages").read_text()
    stanzas = {f["Package"]: f for f in map(_fields, packages.split("\n\n"))}
    assert set(stanzas) == {"slurmd", "libhwloc15"}
    for deb in debs:
        fields = stanzas[deb.name.split("_")[0]]
        assert fields["Filename"] == f"pool/main/{deb.name}"
        assert fields["Size"] == str(deb.stat().st_size)
        assert fields["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
    release = _fields((dist / "Release").read_text())
    assert release["Codename"] == "forky"  # what a `release n=forky` pin matches
    assert release["Components"] == "main"
    digest = hashlib.sha256(packages.encode()).hexdigest()
    assert (
        f" {digest} {len(packages.encode())} main/binary-amd64/Packages"
        in (dist / "Release").read_text()
    )


def test_source_line_names_the_served_tree():
    assert mirror.source_line() == "deb [trusted=yes] http://10.151.0.1/debian forky main"


def test_the_download_program_asks_apt_for_the_suite_and_component_the_mirror_serves():
    assert f' {mirror.SUITE} {mirror.COMPONENT}" ' in mirror._DOWNLOAD
    assert f"-t {mirror.SUITE} " in mirror._DOWNLOAD
