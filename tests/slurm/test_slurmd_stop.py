"""A slurmd the charms start stops promptly, whatever it is doing (issue 41, item 5).

systemd stops slurmd with SIGTERM and waits `TimeoutStopSec` (90 s by default) before
SIGKILL. slurmd acts on SIGTERM only once the requests it serves end (a health check, a
prolog): such a stop cost every stop and reboot of its machine up to those 90 s, and in a
`rebuild-nodes` rollout a node was out 186 s instead of 6 s. Each test brings the node's
slurmd to a state the charms bring it to, then stops it as a shutdown does.

The last two leave a daemon systemd lost track of (a reconfigure whose old process hangs,
injected) and show the stop ends it, so that the next start binds: slurmd and sackd.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from incluster import Cluster, wait_for
from slurm_lab.machines import Machine

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

REREGISTER = Path(__file__).resolve().parents[2] / "charms/slurmd/src/programs/reregister.sh"
PROMPT_STOP_S = 20.0
"""A prompt stop: the drop-in's bound (10 s) and a loaded host's slowness, far below 90 s."""
HEALTH_PROGRAM = "/usr/local/sbin/slow-health-check"
HEALTH_SECONDS = 50
"""How long the health check takes: a check of a mount that hangs (the charm's own program
allows itself 42 s, slurmd kills a program after 60 s)."""


def main_pid(cluster: Cluster, machine: Machine) -> str:
    pid = cluster.sh(machine, "systemctl", "show", "--value", "-p", "MainPID", "slurmd").strip()
    assert pid not in ("", "0"), f"slurmd is not running on {machine.name}"
    return pid


def assert_acts_on_sigterm(cluster: Cluster, machine: Machine, pid: str) -> None:
    """No thread of process `pid` blocks or ignores SIGTERM, and slurmd catches it."""
    sigterm = 1 << (15 - 1)
    for task in cluster.sh(machine, "ls", f"/proc/{pid}/task").split():
        status = cluster.sh(machine, "cat", f"/proc/{pid}/task/{task}/status")
        masks = dict(line.split(":\t", 1) for line in status.split("\n") if ":\t" in line)
        assert not int(masks["SigBlk"], 16) & sigterm, f"thread {task} blocks SIGTERM"
        assert not int(masks["SigIgn"], 16) & sigterm, f"thread {task} ignores SIGTERM"
        assert int(masks["SigCgt"], 16) & sigterm, f"thread {task} does not catch SIGTERM"


def timed_stop_and_start(cluster: Cluster, machine: Machine) -> float:
    """Stop slurmd as a shutdown does (`systemctl stop`), start it again; the stop's seconds."""
    started = time.monotonic()
    cluster.sh(machine, "systemctl", "stop", "slurmd", timeout=200)
    stopped = time.monotonic() - started
    cluster.sh(machine, "systemctl", "start", "slurmd", timeout=200)
    return stopped


def reregister(cluster: Cluster, node: str) -> None:
    """Re-register `node` as the slurmd charm does: drain, then its program in a transient unit."""
    machine = cluster.computes[node]
    cluster.sh(
        cluster.controller, "scontrol", "update", f"nodename={node}", "state=drain", "reason=rereg"
    )
    cluster.py(
        machine,
        """
        from hpc_libs.machine import systemd
        systemd.run_transient(args["unit"], args["argv"], "re-register the node")
        result = True
        """,
        unit=f"slurmd-reregister-{node}",
        argv=["/bin/sh", "-c", REREGISTER.read_text(), "reregister", node],
    )
    wait_for(
        "the re-registration's transient unit to end",
        lambda: machine.exec(["systemctl", "is-active", f"slurmd-reregister-{node}"]).stdout,
        lambda state: state.strip() in ("inactive", "failed"),
        timeout=120,
    )
    cluster.wait_for_node_state(node, "IDLE", timeout=60)


def started_by_the_charm(cluster: Cluster, node: str) -> str:
    """The slurmd the charm started: its main process."""
    return main_pid(cluster, cluster.computes[node])


def restarted_by_a_reregistration(cluster: Cluster, node: str) -> str:
    """The slurmd a re-registration restarted."""
    reregister(cluster, node)
    return main_pid(cluster, cluster.computes[node])


def reexecuted_on_reconfigure(cluster: Cluster, node: str) -> str:
    """The slurmd that re-executed itself on `scontrol reconfigure`."""
    machine = cluster.computes[node]
    before = main_pid(cluster, machine)
    asked = cluster.controller.exec(["scontrol", "reconfigure"], timeout=60)
    # On a busy host scontrol may give up on the answer of a slurmctld that re-executes all
    # the same (CI46); whether it did is what the wait below shows.
    assert asked.returncode == 0 or "Socket timed out" in asked.stderr, asked.stderr
    return wait_for(
        "slurmd to re-execute itself on reconfigure",
        lambda: main_pid(cluster, machine),
        lambda pid: pid != before,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("how", "node"),
    [
        (started_by_the_charm, "compute-0"),
        (restarted_by_a_reregistration, "compute-1"),
        (reexecuted_on_reconfigure, "compute-0"),
    ],
    ids=["started-by-the-charm", "restarted-by-a-reregistration", "reconfigured-by-slurmctld"],
)
def test_a_slurmd_stops_promptly(cluster: Cluster, how: Callable[[Cluster, str], str], node: str):
    machine = cluster.computes[node]
    assert_acts_on_sigterm(cluster, machine, how(cluster, node))

    stopped = timed_stop_and_start(cluster, machine)

    cluster.wait_for_node_state(node, "IDLE", timeout=60)
    assert stopped < PROMPT_STOP_S, machine.journal("slurmd", 30)


HEALTH_CHECK = """
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.scontrol import Scontrol
manager = SlurmctldManager()
conf = manager.config.load()
if args["program"]:
    conf.health_check_program = args["program"]
    conf.health_check_interval = args["interval"]
else:
    del conf.health_check_program
    del conf.health_check_interval
result = manager.config.write(conf)
Scontrol().reconfigure()
"""


def test_slurmd_running_its_health_check_stops_promptly(cluster: Cluster):
    """slurmd runs HealthCheckProgram at start: stopped meanwhile, it waits for the program."""
    node = "compute-0"
    machine = cluster.computes[node]
    machine.write_file(HEALTH_PROGRAM, f"#!/bin/sh\nsleep {HEALTH_SECONDS}\n", mode=0o755)
    try:
        cluster.py(cluster.controller, HEALTH_CHECK, program=HEALTH_PROGRAM, interval=3600)
        cluster.wait_for_node_state(node, "IDLE", timeout=60)
        cluster.sh(machine, "systemctl", "restart", "slurmd", timeout=200)
        wait_for(
            "slurmd to run its health check",
            lambda: machine.exec(["pgrep", "-f", HEALTH_PROGRAM]).returncode,
            lambda status: status == 0,
        )

        started = time.monotonic()
        cluster.sh(machine, "systemctl", "stop", "slurmd", timeout=200)
        stopped = time.monotonic() - started
        print(f"\nslurmd stopped in {stopped:.1f} s during its health check")
    finally:
        machine.exec(["pkill", "-f", HEALTH_PROGRAM])
        cluster.py(cluster.controller, HEALTH_CHECK, program=None, interval=None)
        cluster.sh(machine, "systemctl", "start", "slurmd", timeout=200)
    cluster.wait_for_node_state(node, "IDLE", timeout=60)
    assert stopped < PROMPT_STOP_S, machine.journal("slurmd", 30)


HANG_SOURCE = Path(__file__).with_name("hang_forked_exit.c")
HANG_LIBRARY = "/usr/local/lib/hang-forked-exit.so"
HANG_DROP_IN = "99-test-hang-forked-exit.conf"


def hang_library(tmp_path: Path) -> bytes:
    """The fault, built on this host (the machines run a newer glibc: it loads there)."""
    built = tmp_path / "hang.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(built), str(HANG_SOURCE)], check=True
    )
    return built.read_bytes()


def daemons(machine: Machine, daemon: str) -> list[str]:
    """The processes of `daemon` (a hung fork child runs its program under a thread name)."""
    found = machine.exec(["pgrep", "-f", f"^/usr/sbin/{daemon} "]).stdout.split()
    return sorted(found, key=int)


def tracked(cluster: Cluster, machine: Machine, daemon: str) -> str:
    return cluster.sh(machine, "systemctl", "show", "--value", "-p", "MainPID", daemon).strip()


def lose_track_on_reconfigure(
    cluster: Cluster,
    machine: Machine,
    daemon: str,
    reconfigure: Callable[[], object],
    fault: bytes,
) -> None:
    """Reconfigure `daemon` with its fork child hung on its way out, as the CI saw slurmd's:
    the old process waits for that child forever and never tells systemd the new one's pid."""
    drop_in = f"/etc/systemd/system/{daemon}.service.d/{HANG_DROP_IN}"
    machine.write_file(HANG_LIBRARY, fault, mode=0o755)
    machine.write_file(drop_in, f"[Service]\nEnvironment=LD_PRELOAD={HANG_LIBRARY}\n")
    try:
        cluster.sh(machine, "systemctl", "daemon-reload")
        cluster.sh(machine, "systemctl", "restart", daemon, timeout=200)
        stuck = tracked(cluster, machine, daemon)
        reconfigure()
        wait_for(
            f"a new {daemon} beside the old one and its hung fork child",
            lambda: daemons(machine, daemon),
            lambda pids: len(pids) >= 3,
        )
        time.sleep(2)  # the old process would have told systemd by now
        assert tracked(cluster, machine, daemon) == stuck, "the fault did not hold the old one"
    finally:
        machine.exec(["rm", "-f", drop_in])
        cluster.sh(machine, "systemctl", "daemon-reload")


def test_a_slurmd_systemd_lost_track_of_is_gone_with_the_unit_and_the_next_start_binds(
    cluster: Cluster, tmp_path: Path
):
    """CI: a re-registration's restart of slurmd failed, and every start after it: "Unable to
    bind listen port (6818): Address already in use". A reconfigure had left the old slurmd
    waiting for its fork child, which hung on its way out, so systemd was never told the new
    slurmd's pid; the stop killed the old process alone (KillMode=process) and the new one
    held the port. The drop-in's reaper must end the untracked slurmd with the unit."""
    node = "compute-0"
    machine = cluster.computes[node]

    def reconfigure() -> None:
        cluster.wait_for_node_state(node, "IDLE", timeout=60)
        asked = cluster.controller.exec(["scontrol", "reconfigure"], timeout=60)
        assert asked.returncode == 0 or "Socket timed out" in asked.stderr, asked.stderr

    lose_track_on_reconfigure(cluster, machine, "slurmd", reconfigure, hang_library(tmp_path))
    restarted = machine.exec(["systemctl", "restart", "slurmd"], timeout=200)

    journal = machine.journal("slurmd", 60)
    assert restarted.returncode == 0, journal
    cluster.wait_for_node_state(node, "IDLE", timeout=60)
    assert daemons(machine, "slurmd") == [tracked(cluster, machine, "slurmd")], journal
    reaped = [line for line in journal.splitlines() if "killed /usr/sbin/slurmd process" in line]
    print("\n" + "\n".join(reaped))
    assert len(reaped) == 2, journal  # the new slurmd and the old one's hung fork child


def test_a_sackd_systemd_lost_track_of_is_gone_with_the_unit(
    cluster: Cluster, login: Machine, tmp_path: Path
):
    """The same on a login node: sackd's drop-in makes a stop end all of the unit, within a
    bound (the packaged KillMode=process and 90 s kept the untracked sackd running)."""
    lose_track_on_reconfigure(
        cluster,
        login,
        "sackd",
        lambda: cluster.sh(login, "systemctl", "reload", "sackd"),  # SIGHUP: reconfigure
        hang_library(tmp_path),
    )

    started = time.monotonic()
    cluster.sh(login, "systemctl", "restart", "sackd", timeout=200)
    restarted_in = time.monotonic() - started

    print(f"\nsackd restarted in {restarted_in:.1f} s")
    assert daemons(login, "sackd") == [tracked(cluster, login, "sackd")], login.journal("sackd")
    assert restarted_in < PROMPT_STOP_S, login.journal("sackd", 30)
    cluster.sh(login, "sinfo", timeout=60)  # the new sackd serves the login node
