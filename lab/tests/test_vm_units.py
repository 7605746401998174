"""Lab VMs' pure parts, without qemu: the command channel, qemu's line, the constraint.

The channel runs here for real: the guest agent (`vmagent`) serves on one end of a unix
socket standing for qemu's serial port, the broker (`vmchannel`) holds the other, and
`vmchannel.request` is what `Machine.exec` sends. test_vm.py proves the whole on real VMs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jubilant
import pytest
from slurm_lab import vm, vmagent, vmchannel, vmimage
from slurm_lab.errors import LabError
from slurm_lab.juju import runner
from slurm_lab.juju.backend import _app_constraints
from slurm_lab.machines import Lab, _Record
from slurm_lab.proc import run

ENV = {"PATH": "/usr/bin:/bin"}


@dataclass
class Channel:
    """A broker and an agent joined by a socket that stands for the VM's serial port."""

    directory: Path
    guest: socket.socket

    # Generous bounds: CI runs these beside a VM under emulation and four labs (load 10-20);
    # a test that means "at once" compares against this timeout, not against wall-clock luck.
    def request(self, argv: list[str], stdin: bytes = b"", timeout: float | None = 60):
        return vmchannel.request(
            self.directory, "vm", argv=argv, env=ENV, stdin=stdin, timeout=timeout
        )

    def boot(self) -> dict[str, object] | None:
        return vmchannel.read_boot(self.directory)


def _wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _serve_agent(agent: vmagent.Agent) -> None:
    with contextlib.suppress(OSError):
        agent.serve()


@pytest.fixture
def channel() -> Iterator[Channel]:
    directory = Path(tempfile.mkdtemp(prefix="vmch", dir="/tmp"))  # a short socket path
    port = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    port.bind(str(directory / vmchannel.CHARDEV))
    port.listen(1)
    broker = vmchannel.Broker(directory)
    threading.Thread(target=broker.serve, daemon=True).start()
    guest, _ = port.accept()
    agent = vmagent.Agent(guest.fileno())
    serving = threading.Thread(target=_serve_agent, args=(agent,), daemon=True)
    serving.start()
    _wait_for(lambda: vmchannel.read_boot(directory) is not None)
    ready = Channel(directory, guest)
    # The broker greets the agent as it connects, and the agent answers with a second hello.
    # One command's round trip comes after that answer (the agent handles its lines in order),
    # so no late hello can undo what a test then says as the guest (a `bye`, a new boot).
    assert ready.request(["true"])[0] == 0
    try:
        yield ready
    finally:
        # The agent stops before its port is closed: the port's number is the next pipe's,
        # and an agent still reading it took lines from another test's `subprocess.run`.
        agent.stop()
        guest.shutdown(socket.SHUT_RDWR)  # qemu exits: the broker sees the port close
        serving.join(timeout=10)
        assert not serving.is_alive(), "the agent still reads its closed port"
        guest.close()
        port.close()
        _wait_for(lambda: not (directory / vmchannel.EXEC_SOCKET).exists())
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def test_a_command_gets_its_input_env_and_exit_status(channel: Channel):
    code, out, err = channel.request(
        ["sh", "-c", 'cat; echo "$PATH"; echo e >&2; exit 7'], b"in\n"
    )

    assert (code, out, err) == (7, b"in\n/usr/bin:/bin\n", b"e\n")


def test_binary_output_and_many_commands_at_once(channel: Channel):
    results: list[tuple[int, bytes, bytes]] = []

    def one(n: int) -> None:
        results.append(channel.request(["sh", "-c", f"sleep 0.2; printf '\\377{n}'"]))

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(out for _, out, _ in results) == [b"\xff%d" % n for n in range(8)]


def test_a_command_past_its_timeout_is_killed_and_reported(channel: Channel, tmp_path: Path):
    marker = tmp_path / "still-ran"

    with pytest.raises(LabError, match="timed out"):
        channel.request(["sh", "-c", f"sleep 2; touch {marker}"], timeout=0.5)

    time.sleep(2.5)
    assert not marker.exists()


def test_a_missing_program_is_exit_127(channel: Channel):
    code, _, err = channel.request(["/nonexistent/program"])

    assert code == 127
    assert b"No such file" in err


def test_the_boot_answering_is_recorded_and_a_new_boot_fails_what_was_running(
    channel: Channel, tmp_path: Path
):
    first = channel.boot()
    assert first is not None
    assert first["btime"] == int(
        next(
            line for line in Path("/proc/stat").read_text().split("\n") if "btime" in line
        ).split()[1]
    )
    failures: list[str] = []

    running = tmp_path / "running"

    def waiting() -> None:
        try:
            channel.request(["sh", "-c", f"touch {running}; sleep 5"])
        except LabError as e:
            failures.append(str(e))

    thread = threading.Thread(target=waiting)
    thread.start()
    _wait_for(running.exists)  # the command is in flight, whatever the host's load
    hello = {"op": "hello", "boot_id": "another-boot", "btime": 42}
    channel.guest.sendall(b"\n" + json.dumps(hello).encode() + b"\n")  # a rebooted agent
    thread.join(timeout=30)

    assert failures == ["vm: the machine rebooted"]
    assert channel.boot() == {"boot_id": "another-boot", "btime": 42}


def test_a_shutting_down_agent_makes_requests_fail_at_once(channel: Channel):
    channel.guest.sendall(b'\n{"op": "bye"}\n')
    _wait_for(lambda: channel.boot() is None)

    started = time.monotonic()
    with pytest.raises(LabError, match="not running"):
        channel.request(["true"])
    assert time.monotonic() - started < 5  # not the request's 60 s timeout


def test_no_broker_means_not_running(tmp_path: Path):
    with pytest.raises(LabError, match="not running"):
        vmchannel.request(tmp_path, "vm", argv=["true"], env=ENV, stdin=b"", timeout=1)


# qemu's line and the VM's place on the host.


def test_qemu_runs_tcg_on_q35_with_one_overlay_the_tap_and_the_shares(tmp_path: Path):
    argv = vm.qemu_argv(
        name="vm-a",
        address="10.151.0.7",
        machine_id="0" * 32,
        image=tmp_path / "image",
        machine_dir=tmp_path / "m",
        channel=tmp_path / "ch",
        charms_dir=tmp_path / "charms",
        shared_dir=tmp_path / "shared",
    )
    line = " ".join(argv)

    assert "-M q35 -accel tcg,thread=single,tb-size=128" in line
    assert f"file={tmp_path}/m/disk.qcow2,if=virtio,format=qcow2" in line
    assert "tap,id=net0,ifname=tap7,script=no,downscript=no" in line
    assert "lab.address=10.151.0.7/24" in line
    assert "-enable-kvm" not in argv
    for tag in vmimage.SHARES:
        assert f"mount_tag={tag}" in line
    assert f"path={tmp_path}/charms,security_model=passthrough,readonly=on" in line


def test_only_a_vms_juju_dir_is_visible_from_the_host(tmp_path: Path):
    lab = Lab(tmp_path / "state")
    with lab._locked() as records:
        records["vm-a"] = _Record("vm-a", "10.151.0.2", "tap2", "", kind="vm", channel="/x")
    share = (lab.state_dir / "machines/vm-a/juju").resolve()

    assert lab.host_path("vm-a", "/var/lib/juju/agents/u/f") == share / "agents/u/f"
    with pytest.raises(LabError, match="only /var/lib/juju"):
        lab.host_path("vm-a", "/etc/hosts")
    with pytest.raises(LabError, match="leads out"):
        lab.host_path("vm-a", "/var/lib/juju/../../etc/shadow")


def test_a_vm_is_not_running_while_no_boot_answers(tmp_path: Path):
    lab = Lab(tmp_path / "state")
    with lab._locked() as records:
        records["vm-a"] = _Record(
            "vm-a", "10.151.0.2", "tap2", "", init_pid=os.getpid(), kind="vm", channel="/none"
        )
    assert lab._load()["vm-a"].machine().init_start == 0
    with pytest.raises(LabError, match="not running"):
        lab.get("vm-a").exec(["true"])
    with pytest.raises(LabError, match="is a VM"):
        lab.get("vm-a").nsenter_argv(["true"])


# Juju's constraint.


def test_virt_type_is_kept_and_a_bad_one_is_refused_as_juju_does():
    assert _app_constraints({"virt-type": "virtual-machine"}) == {"virt-type": "virtual-machine"}
    assert _app_constraints(None) == {}
    with pytest.raises(jubilant.CLIError, match='invalid value "kvm" for "virt-type"'):
        _app_constraints({"virt-type": "kvm"})


def test_the_vm_units_run_the_network_script_and_the_agent_the_image_holds():
    assert f"ExecStart={vmimage.NETWORK_SCRIPT}\n" in vmimage._NETWORK_UNIT
    assert f"ExecStart=/usr/bin/python3 {vmimage.AGENT_PATH}\n" in vmimage._AGENT_UNIT


def test_a_vm_unpacks_its_charm_from_one_tar_onto_its_own_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A VM reads /lab/charms over 9p: the charm ships as one tar too (its 1200 files one by
    # one took two minutes), with the modes and links the .charm holds.
    packed = tmp_path / "app_trixie.charm"
    with zipfile.ZipFile(packed, "w") as archive:
        dispatch = zipfile.ZipInfo("dispatch")
        dispatch.external_attr = (stat.S_IFREG | 0o755) << 16
        archive.writestr(dispatch, "#!/bin/sh\n")
        archive.writestr("src/charm.py", "import ops\n")
        link = zipfile.ZipInfo("venv/lib/python")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "python3.13")
    monkeypatch.setattr(runner.charms, "packed_charm", lambda path, suite: packed)
    charms_dir = tmp_path / "charms"

    runner.charm_source(tmp_path / "app", "app", charms_dir, "trixie")

    with tarfile.open(charms_dir / f"app{runner.TAR_SUFFIX}") as archive:
        members = {member.name: member for member in archive.getmembers()}
    assert members["./dispatch"].mode & 0o777 == 0o755
    assert members["./src/charm.py"].isfile()
    assert members["./venv/lib/python"].issym()
    # In the VM the hook's shell binds a directory of its disk over the charm dir and unpacks
    # the tar there; in a container (no 9p /var/lib/juju) it copies the unpacked charm as before.
    shell = runner.prelude("app/0", "app", "/lab/charms")
    assert ' /var/lib/juju 9p " /proc/mounts' in shell
    assert 'mount --bind "$on_disk" "$charm"' in shell
    assert f"on_disk={runner.LOCAL_CHARMS_DIR}/unit-app-0" in shell
    assert 'tar -xf "$source.tar" -C "$charm"' in shell


def test_the_vm_image_offers_the_packages_it_lacks_from_a_repository_of_its_own(tmp_path: Path):
    # The image lacks the system bus (vmimage.WITHOUT), as Ubuntu's minimal images do; the
    # slurmd charm installs it with apt, which reaches no archive from a lab machine.
    root = tmp_path / "root"
    repository = root / vmimage.LOCAL_REPOSITORY.lstrip("/")
    repository.mkdir(parents=True)
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    for name in vmimage.WITHOUT:
        package = tmp_path / name
        (package / "DEBIAN").mkdir(parents=True)
        (package / "DEBIAN/control").write_text(
            f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: lab <lab@lab>\n"
            "Description: stand-in\n"
        )
        run(["dpkg-deb", "--build", str(package), str(repository / f"{name}_1.0_all.deb")])

    vmimage._write_local_repository(root)

    stanzas = (repository / "Packages").read_text().split("\n\n")
    names = [s.split("\n", 1)[0].removeprefix("Package: ") for s in stanzas]
    assert sorted(names) == sorted(vmimage.WITHOUT)
    assert all(f"Filename: ./{n}_1.0_all.deb" in s for n, s in zip(names, stanzas, strict=True))
    assert "Packages\n" in (repository / "Release").read_text()
    source = (root / "etc/apt/sources.list.d/slurm-lab-local.list").read_text()
    assert source == f"deb [trusted=yes] file:{vmimage.LOCAL_REPOSITORY} ./\n"


def test_the_prelude_leaves_the_charm_alone_without_its_source_and_redoes_a_cut_copy(
    tmp_path: Path,
):
    """CI23: a `juju exec` as the machine went down saw no /lab/charms, took the charm for
    changed, and was killed while it removed the old copy: half a charm dir, its stamp still
    current, so no hook after the boot could run."""
    charms, unit = tmp_path / "charms", "app/0"
    charm = tmp_path / runner.charm_dir(unit).lstrip("/")
    charm.mkdir(parents=True)
    (charm / "dispatch").write_text("old\n")
    Path(f"{charm}{runner.REVISION_SUFFIX}").write_text("1\n")
    tools = tmp_path / runner.tools_dir(unit).lstrip("/")
    shell = (
        runner.prelude(unit, "app", str(charms))
        .replace(runner.charm_dir(unit), str(charm))
        .replace(runner.tools_dir(unit), str(tools))
    )

    gone = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=False)

    assert gone.returncode != 0 and "the charms' mount is gone" in gone.stderr
    assert (charm / "dispatch").read_text() == "old\n"
    (charms / "app").mkdir(parents=True)
    (charms / "app" / "dispatch").write_text("new\n")
    Path(f"{charms / 'app'}{runner.REVISION_SUFFIX}").write_text("2\n")
    cut = shell.replace('cp -R --preserve=mode,timestamps "$source/." "$charm/"', "exit 9")

    assert subprocess.run(["bash", "-c", cut], check=False).returncode == 9  # cut mid-copy
    assert not Path(f"{charm}{runner.REVISION_SUFFIX}").exists()  # so the next hook copies
