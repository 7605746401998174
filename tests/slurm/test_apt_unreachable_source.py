"""An unreachable apt source fails an upgrade on Debian 13: in the charms and the RebootProgram.

`apt-get update` only warns about a source it cannot fetch and exits 0, so an upgrade against
an unreachable mirror would install nothing new and succeed. The charms' apt path
(`hpc_libs.machine.apt.update`) and slurmd's RebootProgram run it with `--error-on=any`:
here a compute machine names a source on the lab bridge where nothing listens.

The RebootProgram runs with stand-ins for `squeue` (its rebuild job asks for an upgrade),
`scontrol` and `systemctl` (logged, so the machine never reboots); apt is the machine's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from incluster import Cluster
from slurm_lab.machines import Machine
from slurm_lab.mirror import MIRROR_ADDRESS

pytestmark = pytest.mark.lab

PROGRAM = Path(__file__).parents[2] / "charms/slurmd/src/programs/reboot-program.sh"
NODE = "compute-0"
SOURCE = "/etc/apt/sources.list.d/lab-unreachable.list"
UNREACHABLE = f"deb [trusted=yes] http://{MIRROR_ADDRESS}:9/debian forky main\n"
"""The lab bridge's address, on a port where nothing listens: refused at once."""
WORK = "/root/reboot-program-test"
STUB = '#!/bin/sh\necho "{name} $*" >> {work}/log\n{answer}\n'


@pytest.fixture
def unreachable(cluster: Cluster) -> Iterator[Machine]:
    """A compute machine whose apt names the unreachable source (removed afterwards)."""
    machine = cluster.computes[NODE]
    machine.write_file(SOURCE, UNREACHABLE)
    try:
        yield machine
    finally:
        machine.exec(["rm", "-rf", SOURCE, WORK])


def test_apt_alone_only_warns_but_the_charms_update_fails(cluster: Cluster, unreachable: Machine):
    plain = unreachable.exec(["apt-get", "-q", "update"], timeout=60)
    assert plain.returncode == 0, plain.stderr  # why --error-on=any is needed

    outcome = cluster.py(
        unreachable,
        """
        from hpc_libs.errors import PackageError
        from hpc_libs.machine import apt
        try:
            apt.update(["slurmd"])
            result = {"status": "updated", "stderr": ""}
        except PackageError as e:
            result = {"status": e.status_message(), "stderr": e.stderr}
        """,
    )

    assert outcome["status"].startswith("cannot install slurmd"), outcome
    assert f"{MIRROR_ADDRESS}:9" in outcome["stderr"], outcome


def test_the_reboot_program_sets_the_node_down_and_does_not_reboot(unreachable: Machine):
    answers = {
        "squeue": f"echo rebuild:compute:1:upgrade:{NODE}",
        "scontrol": "",
        "systemctl": "",
    }
    for name, answer in answers.items():
        stub = STUB.format(name=name, work=WORK, answer=answer)
        unreachable.write_file(f"{WORK}/bin/{name}", stub, mode=0o755)
    unreachable.write_file(f"{WORK}/settings", f"NODE_NAME={NODE}\n")
    unreachable.write_file(f"{WORK}/program", PROGRAM.read_bytes(), mode=0o755)

    run = unreachable.exec(
        ["sh", f"{WORK}/program"],
        env={
            "PATH": f"{WORK}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SLURMD_CHARM_REBOOT": "detached",
            "SLURMD_CHARM_REBOOT_SETTINGS": f"{WORK}/settings",
        },
        timeout=90,
    )
    log = unreachable.exec(["cat", f"{WORK}/log"]).stdout.splitlines()

    assert run.returncode == 1, (run.stdout, run.stderr)
    reason = "rebuild: apt-get update failed"
    assert f"scontrol update nodename={NODE} state=down reason={reason}" in log, log
    assert not any(line.startswith("systemctl") for line in log), log
