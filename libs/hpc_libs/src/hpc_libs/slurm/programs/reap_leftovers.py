#!/usr/bin/python3
"""Kill the daemon processes a stopped unit left behind: `reap_leftovers.py EXECUTABLE`.

Run by systemd as the `ExecStopPost=` of slurmd's unit (`hpc_libs.slurm.slurmd`), as root,
in the unit's own control group. A standalone program: the system's python3, no hpc_libs.

Why: on reconfigure slurmd forks, the new slurmd is its grandchild, and the old one tells
systemd the new main PID before it exits (`MAINPID=`). When the old one never gets there
(its fork child hung on its way out, seen on the lab: Slurm 24.11.5), or a stop comes in
the middle, systemd keeps the old process as the main one, and the new slurmd runs on
untracked. The packaged `KillMode=process` (job steps must outlive slurmd) then stops the
old process alone, and the next start fails: "Unable to bind listen port (6818): Address
already in use". So once the unit stopped, this kills every process of it still running
`EXECUTABLE` as root: those are daemons, never job steps (slurmstepd) and never the
charm's `slurmd -C` (it runs in the Juju agent's control group).
"""

import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
"""Where the unified (v2) hierarchy is mounted: alone, or beside v1 (hybrid)."""
V1_SYSTEMD_ROOT = Path("/sys/fs/cgroup/systemd")
"""systemd's own v1 hierarchy (a legacy host)."""
CONTROL = ".control"
"""The sub-group systemd runs a delegated unit's Exec*Pre/Post programs in."""
GONE_WAIT_S = 5.0
"""How long to wait for the killed processes to be gone (their port free again)."""


def unit_groups(self_cgroup: str) -> list[Path]:
    """Return the unit's control group directories, from this process's `/proc/self/cgroup`."""
    found: list[Path] = []
    for line in self_cgroup.splitlines():
        hierarchy, controllers, group = [*line.split(":", 2), "", ""][:3]
        group = group.removesuffix("/" + CONTROL)
        if hierarchy == "0" and not controllers:
            found += [root / group.lstrip("/") for root in CGROUP_ROOTS]
        elif controllers == "name=systemd":
            found.append(V1_SYSTEMD_ROOT / group.lstrip("/"))
    return [group for group in found if group.name.endswith(".service") and group.is_dir()]


def member_pids(group: Path) -> Iterator[int]:
    """Yield the pid of every process in `group` and the groups below it."""
    for directory, _, _ in os.walk(group):
        try:
            text = (Path(directory) / "cgroup.procs").read_text()
        except OSError:
            continue
        yield from (int(pid) for pid in text.split())


def images(executable: str) -> set[str]:
    """Return what /proc shows as a process's program when it runs `executable`.

    Links resolved (Debian's /usr/sbin/slurmd is an alternative for slurmd-wlm), and with
    ` (deleted)` once a package upgrade replaced the file.
    """
    paths = {executable, os.path.realpath(executable)}
    return paths | {f"{path} (deleted)" for path in paths}


def runs(pid: int, wanted: set[str]) -> bool:
    """Whether process `pid` is root's and runs one of the `wanted` images."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        image = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return owner == 0 and image in wanted


def reap(executable: str, self_cgroup: str) -> list[int]:
    """Kill the unit's processes running `executable`; return their pids once they are gone.

    Each process is held by a pidfd before it is looked at: a pid reused meanwhile makes the
    kill fail, never hit another process.
    """
    wanted = images(executable)
    killed: list[int] = []
    handles: list[int] = []
    pids = {pid for group in unit_groups(self_cgroup) for pid in member_pids(group)}
    for pid in sorted(pids - {0, os.getpid()}):  # 0: a process outside our pid namespace
        try:
            handle = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if runs(pid, wanted):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
                killed.append(pid)
                handles.append(handle)
                continue
        except OSError:
            pass
        os.close(handle)
    wait_gone(handles)
    return killed


def wait_gone(handles: list[int]) -> None:
    """Wait until every pidfd's process exited (a pidfd reads ready then), at most a bound."""
    deadline = time.monotonic() + GONE_WAIT_S
    pending: list[int] = list(handles)
    while pending and (left := deadline - time.monotonic()) > 0:
        ready: list[int] = select.select(pending, [], [], left)[0]
        pending = [handle for handle in pending if handle not in ready]
    for handle in handles:
        os.close(handle)


def main() -> int:
    """Reap the unit's leftovers of the executable named by the first argument."""
    executable = sys.argv[1]
    killed = reap(executable, Path("/proc/self/cgroup").read_text())
    for pid in killed:
        print(f"killed {executable} process {pid}, left running after the unit stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
