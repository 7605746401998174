"""A major jump Slurm forbids is refused on a real machine, with real apt, before anything moves.

The lab has no Slurm four majors ahead of its own (24.11 -> 26.11), so a repository on the
machine offers a stand-in: an index that lists `slurmctld` at that version (apt reads the
offer from the index alone; the refusal comes before any download). hpc_libs then does what
`MajorUpgrade.check` and `plan` do in the charm's hook: name the source, pin Slurm at the
running major, read the offer (`apt-get update`, `apt-cache madison`) and judge the jump. The
refusal names the path; the installed slurmctld and apt's candidate for it stay the running
release.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator

import pytest
from incluster import run_python
from slurm_lab.machines import Lab, Machine

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

MACHINE = "upgrade-ref"
REPO_DIR = "/srv/stand-in/debian"
PORT = 8765
SOURCE = f"deb [trusted=yes] http://127.0.0.1:{PORT}/debian stand-in main"
AHEAD = {"24.11": "26.11"}
"""Four majors after the lab's release, one more than Slurm allows (this tier's hpc_libs
dependencies are built for trixie's Python 3.13: it runs on trixie's 24.11)."""

CHECK = """
from hpc_libs.slurm import upgrade
from hpc_libs.slurm.slurmctld import SlurmctldManager

manager = SlurmctldManager()
running = upgrade.major(manager.version())
manager.name_source(upgrade.parse_source(args["source"]))
manager.hold(running)
offered = manager.offered_majors()
result = {
    "running": running,
    "offered": offered,
    "refused": upgrade.refusal(running, offered, ""),
    "installed": manager.version(),
}
"""


def packages_index(version: str) -> str:
    return (
        "Package: slurmctld\n"
        f"Version: {version}\n"
        "Architecture: amd64\n"
        "Maintainer: lab <lab@example.invalid>\n"
        "Filename: pool/slurmctld.deb\n"
        "Size: 1\n"
        f"SHA256: {hashlib.sha256(b'x').hexdigest()}\n"
        "Description: stand-in for a Slurm release the lab does not have\n"
    )


def release_file(packages: str) -> str:
    data = packages.encode()
    return (
        "Suite: stand-in\nCodename: stand-in\nArchitectures: amd64\nComponents: main\n"
        f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} main/binary-amd64/Packages\n"
    )


@pytest.fixture(scope="module")
def machine(lab: Lab) -> Iterator[Machine]:
    machine = lab.create(MACHINE)
    try:
        yield machine
    finally:
        lab.destroy(MACHINE)


def test_a_jump_of_four_majors_is_refused_naming_the_path_and_nothing_moves(
    machine: Machine, hpc_libs_deps: str
) -> None:
    installed = machine.exec(["dpkg-query", "-W", "-f=${Version}", "slurmctld"], check=True)
    before = installed.stdout.strip()
    running = ".".join(before.split(":")[-1].split(".")[:2])
    ahead = AHEAD[running]
    packages = packages_index(f"{ahead}.0-1")
    machine.write_file(f"{REPO_DIR}/dists/stand-in/main/binary-amd64/Packages", packages)
    machine.write_file(f"{REPO_DIR}/dists/stand-in/Release", release_file(packages))
    serve = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", "/srv/stand-in"]
    unit = ["systemd-run", "--quiet", "--unit", "stand-in-repo"]
    machine.exec([*unit, *serve, str(PORT)], check=True)

    result = run_python(machine, CHECK, hpc_libs_deps, source=SOURCE)

    assert result["offered"][-1] == ahead  # The lab's machines have no archive source.
    assert result["refused"].startswith(
        f"Slurm {ahead} cannot upgrade {running} directly (at most 3 majors at once): "
        f"upgrade {running} -> "
    )
    assert f" -> {ahead}, setting slurm-major=" in result["refused"]
    assert result["installed"] == before
    policy = machine.exec(["apt-cache", "policy", "slurmctld"], check=True).stdout
    candidate = next(line for line in policy.split("\n") if "Candidate:" in line)
    assert candidate.split()[-1] == before, policy
