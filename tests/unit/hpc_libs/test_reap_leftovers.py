"""The program slurmd's stop ends with: it kills the unit's leftover daemons, nothing else.

Real processes stand in for a unit's: a control group directory in `tmp_path` lists them,
as /sys/fs/cgroup lists a unit's, and the program kills what runs the daemon's executable.
"""

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hpc_libs.slurm.programs import reap_leftovers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the program kills root's processes")

SLEEP = os.path.realpath(shutil.which("sleep") or "/bin/sleep")
"""The stand-in daemon's executable (as /proc shows it: links resolved)."""


@pytest.fixture
def cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/sys/fs/cgroup in `tmp_path`: the program looks there for the unit's groups."""
    monkeypatch.setattr(reap_leftovers, "CGROUP_ROOTS", (tmp_path / "v2", tmp_path / "unified"))
    monkeypatch.setattr(reap_leftovers, "V1_SYSTEMD_ROOT", tmp_path / "v1")
    return tmp_path


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def unit_group(root: Path, *procs: subprocess.Popen[bytes] | int, below: str = "") -> None:
    """Make `root/system.slice/slurmd.service[/below]` list the processes."""
    group = root / "system.slice/slurmd.service" / below
    group.mkdir(parents=True, exist_ok=True)
    pids = [p if isinstance(p, int) else p.pid for p in procs]
    (group / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))


def start(processes: list[subprocess.Popen[bytes]], *argv: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(argv)
    processes.append(process)
    return process


def test_the_daemon_left_in_the_unit_is_killed_and_its_job_steps_are_not(
    cgroups: Path, processes: list[subprocess.Popen[bytes]]
):
    """The unit names the daemon by a link (Debian's /usr/sbin/slurmd -> slurmd-wlm)."""
    named = cgroups / "sbin/slurmd"
    named.parent.mkdir()
    named.symlink_to(SLEEP)
    daemon = start(processes, SLEEP, "300")
    job_step = start(processes, sys.executable, "-c", "import time; time.sleep(300)")
    stuck_fork_child = start(processes, SLEEP, "301")  # a v2 unit's delegated sub-group
    # 0: a process of another pid namespace; 4194304: no such process
    unit_group(cgroups / "v2", daemon, job_step, os.getpid(), 0, 4194304)
    unit_group(cgroups / "v2", stuck_fork_child, below="slurmd")

    killed = reap_leftovers.reap(str(named), "0::/system.slice/slurmd.service/.control\n")

    assert sorted(killed) == sorted([daemon.pid, stuck_fork_child.pid])
    assert daemon.poll() is not None, "reap returns once the killed processes are gone"
    assert stuck_fork_child.poll() is not None
    assert job_step.poll() is None, "a process running another program lives on"


def test_a_v1_host_names_the_unit_in_systemds_own_hierarchy(
    cgroups: Path, processes: list[subprocess.Popen[bytes]]
):
    daemon = start(processes, SLEEP, "300")
    unit_group(cgroups / "v1", daemon)
    self_cgroup = (
        "12:memory:/system.slice/slurmd.service\n1:name=systemd:/system.slice/slurmd.service\n"
    )

    assert reap_leftovers.reap(SLEEP, self_cgroup) == [daemon.pid]


def test_a_process_outside_the_unit_lives_on(
    cgroups: Path, processes: list[subprocess.Popen[bytes]]
):
    """The charm's own `slurmd -C` runs in the Juju agent's group, never in slurmd's."""
    elsewhere = start(processes, SLEEP, "300")
    unit_group(cgroups / "v2")

    assert reap_leftovers.reap(SLEEP, "0::/system.slice/slurmd.service\n") == []
    assert elsewhere.poll() is None


@pytest.mark.parametrize(
    "self_cgroup",
    ["0::/user.slice/session-1.scope\n", "0::/\n", "garbage\n", ""],
    ids=["not-a-service", "the-root-group", "unreadable", "empty"],
)
def test_the_program_run_outside_a_service_kills_nothing(
    cgroups: Path, processes: list[subprocess.Popen[bytes]], self_cgroup: str
):
    daemon = start(processes, SLEEP, "300")
    unit_group(cgroups / "v2", daemon)
    (cgroups / "v2/cgroup.procs").write_text(f"{daemon.pid}\n")

    assert reap_leftovers.reap(SLEEP, self_cgroup) == []
    assert daemon.poll() is None
