"""Lab VMs on this host: their own kernel, exec, the lab network both ways, reboots, teardown.

Needs root, qemu-system-x86, qemu-utils and the container base (`slurm-lab host-requirements`).
The VM image is built from the base (or taken from the cache) once per session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_lab import rootfs, vm, vmimage
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab, Machine

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0
        or not shutil.which("debootstrap")
        or not shutil.which("systemd-nspawn")
        or not shutil.which(vm.QEMU)
        or not shutil.which("qemu-img"),
        reason="lab VMs need root, debootstrap, systemd-nspawn, qemu-system-x86 and qemu-utils",
    ),
]


def _report_time(what: str, seconds: float) -> None:
    print(f"\n[lab timing] {what}: {seconds:.1f}s")


def _host_links() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=False
    ).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _lab_processes(lab: Lab) -> list[str]:
    out = subprocess.run(
        ["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    channel_root = str(vm.channel_dir(lab.state_dir, "x").parent)
    return [
        line
        for line in out.split("\n")
        if line
        and not line.startswith("Z")
        and (str(lab.state_dir) in line or channel_root in line)
    ]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    started = time.monotonic()
    vmimage.ensure_image(rootfs.ensure_base())
    _report_time("VM image (build or cache)", time.monotonic() - started)
    lab = Lab(tmp_path_factory.mktemp("vmlab") / "state")
    links = _host_links()
    try:
        yield lab
    finally:
        lab.down()
    assert rootfs.mounts_under(lab.state_dir) == []
    assert not Path(vm.channel_dir(lab.state_dir, "x").parent).exists()
    assert _host_links() <= links, "a link appeared in the host namespace"
    assert _lab_processes(lab) == [], "a qemu or a broker outlived the lab"


@pytest.fixture(scope="module")
def pair(lab: Lab) -> tuple[Machine, Machine]:
    started = time.monotonic()
    guest = lab.create("vm-a", "vm")
    _report_time("VM boot (create to systemd up)", time.monotonic() - started)
    container = lab.create("ct-b")
    return guest, container


def _btime(machine: Machine) -> int:
    stat = machine.exec(["cat", "/proc/stat"], check=True).stdout
    return int(next(line for line in stat.split("\n") if line.startswith("btime ")).split()[1])


def _wait_up(lab: Lab, name: str, timeout: float = vm.BOOT_TIMEOUT) -> Machine:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        machine = lab.get(name)
        if machine.init_start:
            try:
                state = machine.exec(["systemctl", "is-system-running"], timeout=10).stdout
            except LabError:
                state = ""
            if state.strip() in ("running", "degraded"):
                return machine
        time.sleep(1)
    raise AssertionError(f"{name} did not come back:\n{lab.console_log(name)}")


def test_a_vm_boots_its_own_kernel_with_cgroup_v2(pair: tuple[Machine, Machine]):
    guest, _ = pair
    assert guest.kind == "vm"
    assert guest.exec(["hostname"], check=True).stdout.strip() == guest.name
    assert guest.exec(["uname", "-r"], check=True).stdout.strip() != os.uname().release
    fstype = guest.exec(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], check=True).stdout
    assert fstype.strip() == "cgroup2fs"
    controllers = guest.exec(["cat", "/sys/fs/cgroup/cgroup.controllers"], check=True).stdout
    assert {"cpu", "cpuset", "memory", "pids"} <= set(controllers.split())
    # No system bus (as on Ubuntu's minimal images): the slurmd charm installs it, from the
    # image's own repository (vmimage.WITHOUT, vmimage.LOCAL_REPOSITORY).
    assert guest.exec(["dpkg-query", "-W", "dbus"]).returncode != 0
    guest.exec(["apt-get", "update", "-q", "--error-on=any"], check=True, timeout=300)
    offered = guest.exec(["apt-cache", "show", "--no-all-versions", "dbus"], check=True).stdout
    assert "Filename: ./dbus_" in offered


def test_exec_in_a_vm_passes_input_env_and_exit_status(pair: tuple[Machine, Machine], tmp_path):
    guest, _ = pair
    result = guest.exec(
        ["sh", "-c", 'cat; echo "$GREETING"; exit 3'], input="in\n", env={"GREETING": "hello"}
    )
    assert (result.returncode, result.stdout) == (3, "in\nhello\n")
    with pytest.raises(LabError, match="exited 3"):
        guest.exec(["sh", "-c", "echo oops >&2; exit 3"], check=True)
    with pytest.raises(LabError, match="timed out"):
        guest.exec(["sleep", "30"], timeout=1)
    guest.write_file("/opt/lab/file", b"\x00\xffdata", 0o600)
    assert guest.exec(["stat", "-c", "%a", "/opt/lab/file"], check=True).stdout.strip() == "600"
    (tmp_path / "tree/sub").mkdir(parents=True)
    (tmp_path / "tree/sub/x").write_text("x")
    guest.push(tmp_path / "tree", "/opt/tree")
    assert guest.exec(["cat", "/opt/tree/sub/x"], check=True).stdout == "x"
    assert guest.journal(lines=5)


def test_vms_and_containers_reach_each_other_and_nothing_else(pair: tuple[Machine, Machine]):
    guest, container = pair
    for source, target in ((guest, container), (container, guest)):
        result = source.exec(["ping", "-c", "1", "-W", "5", target.name])
        assert result.returncode == 0, result.stdout + result.stderr
        assert target.address in result.stdout
    assert "default" not in guest.exec(["ip", "route", "show"], check=True).stdout


def test_a_vm_sees_the_lab_shares_as_a_container_does(lab: Lab, pair: tuple[Machine, Machine]):
    guest, container = pair
    container.exec(["sh", "-c", "echo from-ct > /lab/shared/note"], check=True)
    assert guest.exec(["cat", "/lab/shared/note"], check=True).stdout == "from-ct\n"
    (lab.charms_dir / "probe").write_text("charm")
    assert guest.exec(["cat", "/lab/charms/probe"], check=True).stdout == "charm"
    assert guest.exec(["touch", "/lab/charms/x"]).returncode != 0
    guest.write_file("/var/lib/juju/probe", "agent")
    assert lab.host_path(guest.name, "/var/lib/juju/probe").read_text() == "agent"
    with pytest.raises(LabError):
        lab.host_path(guest.name, "/etc/hostname")


def test_a_reboot_in_a_vm_boots_a_new_kernel(lab: Lab, pair: tuple[Machine, Machine]):
    guest, _ = pair
    before = _btime(guest)
    boot_id = guest.exec(["cat", "/proc/sys/kernel/random/boot_id"], check=True).stdout
    started = time.monotonic()
    guest.exec(["systemctl", "reboot"], timeout=30)
    time.sleep(2)
    again = _wait_up(lab, guest.name)
    _report_time("VM reboot (request to systemd up)", time.monotonic() - started)
    assert _btime(again) > before
    assert again.init_start == _btime(again)
    assert again.exec(["cat", "/proc/sys/kernel/random/boot_id"]).stdout != boot_id


def test_a_power_cycle_keeps_the_disk_and_boots_again(lab: Lab, pair: tuple[Machine, Machine]):
    guest = lab.get(pair[0].name)
    guest.write_file("/root/kept", "yes")
    guest.exec(["sync"], check=True)
    before = _btime(guest)
    lab.power_off(guest.name)
    assert not lab.is_running(guest.name)
    with pytest.raises(LabError, match="not running"):
        lab.get(guest.name).exec(["true"])
    started = time.monotonic()
    again = lab.power_on(guest.name)
    _report_time("VM power on (to systemd up)", time.monotonic() - started)
    assert again.exec(["cat", "/root/kept"], check=True).stdout == "yes"
    assert _btime(again) > before


def test_a_cut_network_isolates_a_vm_until_restored(lab: Lab, pair: tuple[Machine, Machine]):
    guest, container = lab.get(pair[0].name), pair[1]
    lab.cut_network(guest.name)
    assert not lab.network_is_up(guest.name)
    assert container.exec(["ping", "-c", "1", "-W", "2", guest.name]).returncode != 0
    assert guest.exec(["true"]).returncode == 0  # the command channel is not the network
    lab.restore_network(guest.name)
    deadline = time.monotonic() + 30
    while container.exec(["ping", "-c", "1", "-W", "2", guest.name]).returncode != 0:
        assert time.monotonic() < deadline, "the VM's network did not come back"


def test_destroying_a_vm_leaves_nothing(lab: Lab, pair: tuple[Machine, Machine]):
    extra = lab.create("vm-c", "vm")
    channel = Path(lab._load()["vm-c"].channel)
    assert (channel / "exec.sock").exists()
    lab.destroy(extra.name)
    assert not channel.exists()
    assert not (lab.state_dir / "machines/vm-c").exists()
    assert all("vm-c" not in line for line in _lab_processes(lab))
    with pytest.raises(LabError):
        lab.get("vm-c")
