"""Lab machines: systemd-nspawn containers over an overlay of the cached base.

Each machine is an overlayfs (lower: the base; upper and work: per machine under the state
dir), a network namespace joined to the lab bridge (see `slurm_lab.network`), and a detached
`systemd-nspawn -b` whose PID is recorded in the state file, so separate processes (the CLI,
test runs) see the same lab. Commands run inside with `nsenter` on the container's init.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from slurm_lab import mirror, network, programs, rootfs, vm, vmchannel, vmimage
from slurm_lab.errors import LabError
from slurm_lab.proc import run, run_resumed, start_time

__all__ = ["Lab", "LabError", "Machine"]

logger = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/slurm-lab")
MachineKind = Literal["container", "vm"]
"""A systemd-nspawn container (the default) or a qemu VM with its own kernel (`slurm_lab.vm`)."""
FaultKind = Literal["kill", "power", "network"]
"""How `Lab.fault` takes a machine down: SIGKILL a service, pull the plug, cut the link."""
SUBNET = "10.151.0"
FIRST_HOST = 2
LAST_HOST = 254
BOOT_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0
MACHINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,40}[a-z0-9]$|^[a-z]$")
SHARED_MOUNT = "/lab/shared"
CHARMS_MOUNT = "/lab/charms"
REBOOTED = 133
"""systemd-nspawn's exit status when the container rebooted (`reboot`, `systemctl reboot`)."""
REBOOT_OFF_SECONDS = 5
"""How long a rebooting machine stays off. A real reboot takes far longer; without a pause the
new boot time (now - uptime, whole seconds, as slurmd reports it) can fall before the reboot
request, and Slurm then takes the node for not rebooted yet."""
STATE_ENTRIES = (
    "machines",
    "shared",
    "charms",
    "juju",
    "suite",
    "mirror.log",
    "lab.json",
    "lab.lock",
)
"""What a lab keeps in its state dir: machines, the shared and charm dirs they mount, the Juju
backend's model and logs (`juju`), its suite, the mirror's log, the machine records and their
lock. `down` removes them all."""
BOOT_LOOP_NAME = "slurm-lab-boot"
"""The `$0` of a machine's power supply (`programs/boot-loop.sh`), which boots systemd-nspawn,
and boots it again when it reboots.

Each boot runs in a new time namespace whose CLOCK_BOOTTIME starts near 0, so the machine's
/proc/uptime and boot time are its own (a container's are otherwise the host's): slurmd
reports a new boot time after a reboot, as on a real machine. A reboot keeps the machine off
for `REBOOT_OFF_SECONDS`. A power-off (init killed) or nspawn's own stop ends the loop.
"""


@dataclass(frozen=True)
class Machine:
    """A running lab machine, addressed by name (also its hostname) on the lab bridge."""

    name: str
    address: str
    init_pid: int = 0
    init_start: int = 0
    """When the init started (`proc.start_time`): with the PID, it tells this boot's init from
    a process that got the PID after the init ended. For a VM: its kernel's boot time
    (`btime`, 0 while no boot answers), which a reboot changes."""
    kind: MachineKind = "container"
    channel: str = ""
    """A VM's command channel directory (`slurm_lab.vmchannel`)."""

    @staticmethod
    def _variables(env: Mapping[str, str] | None) -> dict[str, str]:
        variables = {"PATH": MACHINE_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
        variables.update(env or {})
        return variables

    def _init_runs(self) -> bool:
        """Whether this boot's init still runs (not gone, not exiting, not a reused PID)."""
        return bool(self.init_pid) and start_time(self.init_pid) == self.init_start

    def nsenter_argv(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """Return the host command line that runs argv inside this machine (for shell-likes)."""
        if self.kind == "vm":
            raise LabError(f"{self.name} is a VM: no host command line enters it; use exec")
        if not self._init_runs():
            raise LabError(f"machine {self.name} is not running")
        variables = self._variables(env)
        return [
            "nsenter",
            f"--target={self.init_pid}",
            "--all",
            "--root",
            "--wd",
            "--",
            "/usr/bin/env",
            "-i",
            *(f"{key}={value}" for key, value in variables.items()),
            *argv,
        ]

    def exec(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = 120,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the machine as root in /, with a clean environment plus env.

        Raises LabError on timeout, when the machine went down before the command ended, and
        with check on a non-zero exit (message has stderr).
        """
        if self.kind == "vm":
            data = (input or "").encode()
            code, out, err = self._vm_run(argv, data, timeout, env)
            result = subprocess.CompletedProcess(
                list(argv), code, out.decode(errors="replace"), err.decode(errors="replace")
            )
        else:
            result = run_resumed(self.nsenter_argv(argv, env), input=input, timeout=timeout)
            if result.returncode != 0 and not self._init_runs():
                # The machine went down meanwhile: whatever failed (the command, or nsenter
                # finding the init gone), no command ran to its end in a running machine.
                raise LabError(f"machine {self.name} went down during the command")
        if check and result.returncode != 0:
            raise LabError(
                f"{self.name}: {' '.join(argv)} exited {result.returncode}: "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    def _vm_run(
        self,
        argv: Sequence[str],
        data: bytes,
        timeout: float | None,
        env: Mapping[str, str] | None,
    ) -> tuple[int, bytes, bytes]:
        """Run argv in this VM through its command channel: (exit status, stdout, stderr)."""
        if not self.init_start:
            raise LabError(f"machine {self.name} is not running")
        variables = self._variables(env)
        return vmchannel.request(
            Path(self.channel), self.name, argv=argv, env=variables, stdin=data, timeout=timeout
        )

    def _exec_bytes(self, argv: Sequence[str], data: bytes, timeout: float | None = 300) -> None:
        if self.kind == "vm":
            code, _, stderr = self._vm_run(argv, data, timeout, None)
            if code != 0:
                message = stderr.decode(errors="replace").strip()
                raise LabError(f"{self.name}: {' '.join(argv)} failed: {message}")
            return
        try:
            result = subprocess.run(
                self.nsenter_argv(argv, None),
                input=data,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise LabError(f"{self.name}: timed out: {' '.join(argv)}") from e
        if result.returncode != 0:
            stderr = result.stderr.decode(errors="replace").strip()
            raise LabError(f"{self.name}: {' '.join(argv)} failed: {stderr}")

    def write_file(self, dest: str, content: str | bytes, mode: int = 0o644) -> None:
        """Write a file inside the machine atomically (parents created), owned by root."""
        data = content.encode() if isinstance(content, str) else content
        self._exec_bytes(programs.sh("write-file.sh", dest, f"{mode:o}"), data)

    def push(self, src: Path, dest: str) -> None:
        """Copy a host file to the path dest, or a host directory's content into dest."""
        src = Path(src)
        if src.is_file():
            self.write_file(dest, src.read_bytes(), src.stat().st_mode & 0o7777)
            return
        if not src.is_dir():
            raise LabError(f"push: no such file or directory: {src}")
        self.exec(["mkdir", "-p", dest], check=True)
        if self.kind == "vm":
            archive = subprocess.run(
                ["tar", "-C", str(src), "-cf", "-", "."], capture_output=True, check=True
            ).stdout
            self._exec_bytes(["tar", "-C", dest, "--no-same-owner", "-xf", "-"], archive, 600)
            return
        with subprocess.Popen(
            ["tar", "-C", str(src), "-cf", "-", "."], stdout=subprocess.PIPE
        ) as tar:
            extract = subprocess.run(
                self.nsenter_argv(["tar", "-C", dest, "--no-same-owner", "-xf", "-"], None),
                stdin=tar.stdout,
                capture_output=True,
                timeout=600,
                check=False,
            )
        if tar.returncode != 0 or extract.returncode != 0:
            stderr = extract.stderr.decode(errors="replace").strip()
            raise LabError(f"{self.name}: push {src} -> {dest} failed: {stderr}")

    def kill_service(self, service: str = "slurmctld") -> None:
        """Fault: SIGKILL every process of `service` and keep it down until `revive_service`.

        The unit is masked first, so neither `Restart=` nor a charm's start brings it back.
        """
        self.exec(["systemctl", "mask", f"{service}.service"], check=True, timeout=30)
        # `systemctl kill` signals the unit's cgroup, which on a cgroup v1 host is shared by
        # the same unit of every lab machine: signal the unit's main process and its children
        # by PID instead, which stays inside this machine's PID namespace.
        argv = programs.sh("kill-service.sh", f"{service}.service")
        self.exec(argv, check=True, timeout=30)
        deadline = time.monotonic() + 10
        while self.service_is_active(service) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.service_is_active(service):
            raise LabError(f"{self.name}: {service} still runs after SIGKILL")

    def revive_service(self, service: str = "slurmctld") -> None:
        """Undo `kill_service`: unmask the unit and start it."""
        self.exec(["systemctl", "unmask", f"{service}.service"], check=True, timeout=30)
        self.exec(["systemctl", "reset-failed", f"{service}.service"], timeout=30)
        self.exec(["systemctl", "start", f"{service}.service"], check=True, timeout=120)

    def service_is_active(self, service: str) -> bool:
        """Whether systemd in the machine reports `service` active."""
        return (
            self.exec(["systemctl", "is-active", "--quiet", service], timeout=30).returncode == 0
        )

    def journal(self, unit: str | None = None, lines: int = 500) -> str:
        """Return the newest `lines` lines of the machine's journal (or of one unit's)."""
        argv = ["journalctl", "--no-pager", "-o", "short-precise", "-n", str(lines)]
        if unit:
            argv += ["-u", unit]
        result = self.exec(argv, timeout=60)
        return result.stdout + (result.stderr if result.returncode else "")


INOTIFY_INSTANCES = 1024
_INOTIFY_INSTANCES_PATH = Path("/proc/sys/fs/inotify/max_user_instances")


def _raise_inotify_instances() -> None:
    """Let root hold enough inotify instances for many booted machines (a host setting).

    Every machine's systemd and its services take inotify instances from root's one budget
    (Debian's default is 128); past it, new machines fail to boot with "Too many open files".
    """
    current = int(_INOTIFY_INSTANCES_PATH.read_text())
    if current < INOTIFY_INSTANCES:
        _INOTIFY_INSTANCES_PATH.write_text(f"{INOTIFY_INSTANCES}\n")
        logger.info("raised fs.inotify.max_user_instances: %d -> %d", current, INOTIFY_INSTANCES)


@dataclass
class _Record:
    """What the state file keeps about one machine."""

    name: str
    address: str
    veth: str
    netns: str
    nspawn_pid: int = 0
    init_pid: int = 0
    init_start: int = 0
    kind: MachineKind = "container"
    """For a VM: `veth` is its tap, `nspawn_pid` its qemu, `init_start` qemu's start time."""
    broker_pid: int = 0
    channel: str = ""

    def init_runs(self) -> bool:
        """Whether the recorded init (a VM's qemu) still runs, not a process reusing its PID."""
        return bool(self.init_pid) and start_time(self.init_pid) == self.init_start

    def machine(self) -> Machine:
        """Return the machine as commands reach it: through its init, while that runs."""
        if self.kind == "vm":
            boot = vmchannel.read_boot(Path(self.channel)) if self.init_runs() else None
            btime = boot.get("btime") if boot else 0
            return Machine(
                self.name,
                self.address,
                self.init_pid if self.init_runs() else 0,
                btime if isinstance(btime, int) else 0,
                kind="vm",
                channel=self.channel,
            )
        if not self.init_runs():
            return Machine(self.name, self.address)
        return Machine(self.name, self.address, self.init_pid, self.init_start)


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not count)."""
    return start_time(pid) != 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _runs_systemd(pid: int) -> bool:
    """Whether process `pid` executes systemd (the init), not the program that forked it."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "systemd"
    except OSError:
        return False


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def _reap(pid: int) -> None:
    """Collect pid's exit status if it is our child (else its parent does)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _kill_and_wait(pid: int, sig: int, timeout: float) -> bool:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def _hosts_file(records: Sequence[_Record]) -> str:
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "# lab machines (rewritten by slurm-lab)",
        *(f"{record.address}\t{record.name}" for record in records),
    ]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, content: str, mode: int = 0o644) -> None:
    """Replace `path` by `content` in one step; safe from several threads at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".lab-tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        tmp.chmod(mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Lab:
    """All lab machines under one state dir; every method is safe to call from any process."""

    def __init__(self, state_dir: Path | None = None, *, suite: str | None = None) -> None:
        """Open the lab in `state_dir`.

        `suite` is the Debian suite its machines boot (`rootfs.SUITES`); without it, the
        suite the lab's machines already run, else `$SLURM_LAB_SUITE`, else trixie.
        """
        default = Path(os.environ.get("SLURM_LAB_STATE", DEFAULT_STATE_DIR))
        self.state_dir = Path(state_dir or default).resolve()
        self.cache_dir = rootfs.cache_dir()
        self._suite_file = self.state_dir / "suite"
        if suite:
            self.suite = rootfs.check_suite(suite)
        else:
            self.suite = self._recorded_suite() or rootfs.default_suite()
        self.shared_dir = self.state_dir / "shared"
        self.charms_dir = self.state_dir / "charms"
        self._machines_dir = self.state_dir / "machines"
        self._state_file = self.state_dir / "lab.json"
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:6]
        #: Names of this lab's network namespaces start with this (one lab per state dir).
        self.netns_prefix = f"slab{digest}-"
        self.lab_netns = f"{self.netns_prefix}bridge"
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._thread_lock = threading.Lock()

    # --- state -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, _Record]]:
        """Exclusive access to the state file; changes to the yielded dict are saved."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, (self.state_dir / "lab.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            records = self._load()
            yield records
            payload = {"machines": {name: asdict(rec) for name, rec in records.items()}}
            _write_atomic(self._state_file, json.dumps(payload, indent=2, sort_keys=True))

    def _load(self) -> dict[str, _Record]:
        try:
            data: dict[str, Any] = json.loads(self._state_file.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise LabError(f"corrupt lab state {self._state_file}: {e}") from e
        return {name: _Record(**fields) for name, fields in data.get("machines", {}).items()}

    def _machine_dir(self, name: str) -> Path:
        return self._machines_dir / name

    def _root(self, name: str) -> Path:
        return self._machine_dir(name) / "root"

    # --- public API ----------------------------------------------------------------------

    def ensure_base(self) -> Path:
        """Build or reuse the cached base root filesystem of the lab's suite."""
        return rootfs.ensure_base(self.cache_dir, self.suite)

    def python_version(self) -> str:
        """Return the machines' Python `major.minor`: the charms' dependencies are built for it."""
        return rootfs.python_version(self.ensure_base())

    def _recorded_suite(self) -> str | None:
        """Return the suite this lab's machines were created with, if any."""
        try:
            recorded = self._suite_file.read_text().strip()
        except FileNotFoundError:
            return None
        return recorded if recorded in rootfs.SUITES else None

    def _record_suite(self) -> None:
        """Record the lab's suite (one per lab: its machines all boot the same base)."""
        recorded = self._recorded_suite()
        if recorded and recorded != self.suite and self._load():
            raise LabError(
                f"this lab's machines run {recorded}: bring the lab down to use {self.suite}"
            )
        if recorded != self.suite:
            _write_atomic(self._suite_file, f"{self.suite}\n")

    def machines(self) -> list[Machine]:
        """Every recorded machine, by name."""
        return [
            self._after_reboot(rec).machine()
            for rec in sorted(self._load().values(), key=lambda r: r.name)
        ]

    def get(self, name: str) -> Machine:
        """Return the named machine; LabError if there is none."""
        record = self._load().get(name)
        if record is None:
            raise LabError(f"no lab machine named {name!r}")
        return self._after_reboot(record).machine()

    def _after_reboot(self, record: _Record) -> _Record:
        """Return the record with the init of the machine's current boot (a reboot starts one).

        During a reboot the old init is gone and the new one may not run yet: the record
        is returned as it is (commands in the machine fail until it is back).
        """
        if record.kind == "vm" or not record.nspawn_pid or record.init_runs():
            return record
        init_pid = self._find_init(record)
        if init_pid:
            init_start = start_time(init_pid)
            with self._locked() as records:
                if record.name in records:
                    records[record.name].init_pid = init_pid
                    records[record.name].init_start = init_start
            record.init_pid, record.init_start = init_pid, init_start
        return record

    def host_path(self, name: str, path: str) -> Path:
        """Where a path inside the named machine's filesystem is on the host (read or write).

        Only the machine itself can write there, unlike the shared mount every machine has.
        """
        record = self._load().get(name)
        if record is None:
            raise LabError(f"no lab machine named {name!r}")
        if record.kind == "vm":
            return self._vm_host_path(record, path)
        root = self._root(name).resolve()
        found = (root / path.lstrip("/")).resolve()
        if not found.is_relative_to(root):  # a symlink in the machine must not lead the host out
            raise LabError(f"{name}: {path} leads out of the machine")
        return found

    def _vm_host_path(self, record: _Record, path: str) -> Path:
        """Where a path of a VM is on the host: only under /var/lib/juju, its 9p share."""
        share = (self._machine_dir(record.name) / vm.SHARE_DIRS["labjuju"]).resolve()
        mountpoint = vmimage.SHARES["labjuju"][0]
        inside = Path("/" + path.lstrip("/"))
        if not inside.is_relative_to(mountpoint):
            raise LabError(f"{record.name} is a VM: only {mountpoint} is visible from the host")
        found = (share / inside.relative_to(mountpoint)).resolve()
        if not found.is_relative_to(share):
            raise LabError(f"{record.name}: {path} leads out of the machine")
        return found

    def create(self, name: str, kind: MachineKind = "container") -> Machine:
        """Create and boot a machine; returns once its systemd is running (or degraded)."""
        if not NAME_PATTERN.match(name):
            raise LabError(f"bad machine name {name!r}: use lowercase letters, digits and '-'")
        self._record_suite()
        base = self.ensure_base()
        _raise_inotify_instances()
        if kind == "vm":
            return self._create_vm(name, vmimage.ensure_image(base))
        record = self._reserve(name)
        started = time.monotonic()
        try:
            self._prepare_root(record, base)
            network.attach(self.lab_netns, record.netns, record.veth, record.address)
            record.nspawn_pid = self._start_nspawn(record)
            with self._locked() as records:
                records[name] = record
            record.init_pid = self._wait_for_init(record)
            record.init_start = start_time(record.init_pid)
            with self._locked() as records:
                records[name] = record
            machine = record.machine()
            self._wait_for_systemd(machine, record)
        except BaseException:
            self._teardown(record)
            with self._locked() as records:
                records.pop(name, None)
            raise
        logger.info("%s booted in %.1fs", name, time.monotonic() - started)
        self._update_hosts()
        return machine

    def _create_vm(self, name: str, image: Path) -> Machine:
        record = self._reserve(name, kind="vm")
        started = time.monotonic()
        try:
            machine_dir = self._machine_dir(name)
            if machine_dir.exists():
                shutil.rmtree(machine_dir)
            for share in vm.SHARE_DIRS.values():
                (machine_dir / share).mkdir(parents=True, exist_ok=True)
            for path in (self.shared_dir, self.charms_dir):
                path.mkdir(parents=True, exist_ok=True)
            others = [rec for rec in self._load().values() if rec.name != name]
            _write_atomic(machine_dir / "machine/hosts", _hosts_file([*others, record]))
            vm.make_disk(image, machine_dir)
            (machine_dir / "machine-id").write_text(uuid.uuid4().hex + "\n")
            (machine_dir / "image").write_text(str(image) + "\n")
            vm.attach_tap(self.lab_netns, record.veth)
            machine = self._boot_vm(record)
        except BaseException:
            self._teardown(record)
            with self._locked() as records:
                records.pop(name, None)
            raise
        logger.info("%s (VM) booted in %.1fs", name, time.monotonic() - started)
        self._update_hosts()
        return machine

    def _boot_vm(self, record: _Record) -> Machine:
        """Start the VM's qemu and broker and wait for its systemd to be up."""
        machine_dir = self._machine_dir(record.name)
        image = Path((machine_dir / "image").read_text().strip())
        argv = vm.qemu_argv(
            name=record.name,
            address=record.address,
            machine_id=(machine_dir / "machine-id").read_text().strip(),
            image=image,
            machine_dir=machine_dir,
            channel=Path(record.channel),
            charms_dir=self.charms_dir,
            shared_dir=self.shared_dir,
        )
        if not shutil.which(vm.QEMU):
            raise LabError(f"{vm.QEMU} not found: install qemu-system-x86")
        _write_atomic(machine_dir / "machine/agent.py", vmimage.agent_source())
        qemu_pid, broker_pid = vm.start(argv, self.lab_netns, machine_dir, Path(record.channel))
        record.nspawn_pid = record.init_pid = qemu_pid
        record.init_start = start_time(qemu_pid)
        record.broker_pid = broker_pid
        with self._locked() as records:
            records[record.name] = record
        deadline = time.monotonic() + vm.BOOT_TIMEOUT
        state = ""
        while time.monotonic() < deadline:
            if not record.init_runs():
                raise LabError(f"{record.name}: qemu exited:\n{self._qemu_log(record.name)}")
            machine = record.machine()
            if machine.init_start:
                with contextlib.suppress(LabError):
                    result = machine.exec(["systemctl", "is-system-running"], timeout=10)
                    state = result.stdout.strip()
                    if state in ("running", "degraded"):
                        return machine
            time.sleep(0.5)
        raise LabError(
            f"{record.name}: VM not up after {vm.BOOT_TIMEOUT}s (systemd {state!r}):\n"
            f"{self.console_log(record.name)}"
        )

    def _qemu_log(self, name: str) -> str:
        path = self._machine_dir(name) / "qemu.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def _stop_vm(self, record: _Record, sig: signal.Signals = signal.SIGKILL) -> None:
        """Power the VM off at once (qemu and its broker killed); its disk stays."""
        if record.init_runs():
            _kill_and_wait(record.init_pid, sig, STOP_TIMEOUT)
        if record.broker_pid and vm.is_broker_of(record.broker_pid, self._channel_root()):
            _kill_and_wait(record.broker_pid, signal.SIGKILL, 5)
        for pid in (record.init_pid, record.broker_pid):
            process = self._children.pop(pid, None)
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=1)
        if record.channel:
            (Path(record.channel) / vmchannel.BOOT_FILE).unlink(missing_ok=True)

    def _channel_root(self) -> Path:
        return vm.channel_dir(self.state_dir, "x").parent

    def destroy(self, name: str) -> None:
        """Stop a machine and remove everything it had (processes, mount, network, files)."""
        record = self._load().get(name)
        if record is None:
            raise LabError(f"no lab machine named {name!r}")
        self._teardown(record)
        with self._locked() as records:
            records.pop(name, None)
        self._update_hosts()

    def down(self) -> None:
        """Remove every machine, the lab network and the state dir; leave no process or mount."""
        records = list(self._load().values())
        errors: list[str] = []
        with ThreadPoolExecutor(max_workers=max(1, len(records))) as pool:
            # Every container powers off before any leaves the network. A daemon shutting down
            # whose peer's address is gone waits on TCP until its stop times out (slurmdbd,
            # slurmd: past STOP_TIMEOUT, so they were killed); a peer that is off but still on
            # the bridge refuses at once, and every daemon stops within a second.
            containers = [r for r in records if r.kind == "container"]
            for record, future in [(r, pool.submit(self._stop, r)) for r in containers]:
                if (error := future.exception()) is not None:
                    errors.append(f"{record.name}: {error}")
            for record, future in [(r, pool.submit(self._teardown, r)) for r in records]:
                if (error := future.exception()) is not None:
                    errors.append(f"{record.name}: {error}")
        self._sweep()
        if self._state_file.exists():
            with self._locked() as state:
                state.clear()
        if leftovers := rootfs.mounts_under(self.state_dir):
            errors.append(f"still mounted: {leftovers}")
        else:
            self._remove_state()
        if errors:
            raise LabError("lab teardown incomplete: " + "; ".join(errors))

    def _remove_state(self) -> None:
        """Remove what the lab keeps in its state dir, then the dir itself if nothing else is.

        Only the lab's own entries go (`STATE_ENTRIES`): `--state-dir` may name a directory
        that holds other files. The caches (`rootfs.cache_dir()`) stay.
        """
        for name in STATE_ENTRIES:
            path = self.state_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: someone else's files
            self.state_dir.rmdir()

    def serve_mirror(self) -> str:
        """Serve the newer Slurm's apt mirror on the lab bridge; return its apt source line.

        See `slurm_lab.mirror`; `down` stops the server.
        """
        network.ensure_bridge(self.lab_netns)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return mirror.serve(self.lab_netns, self.state_dir / "mirror.log")

    # --- faults --------------------------------------------------------------------------

    def power_off(self, name: str) -> None:
        """Fault: pull the plug: SIGKILL the container's init and take its link down.

        The machine's network namespace would otherwise still answer pings and refuse TCP
        connections at once, which a powered-off machine does not. It keeps its record,
        files (overlay) and address; `power_on` boots it again.
        """
        record = self._after_reboot(self._record(name))
        if record.kind == "vm":
            self._stop_vm(record)
            network.set_link(self.lab_netns, record.veth, up=False)
            with self._locked() as records:
                records[name].nspawn_pid = records[name].init_pid = 0
                records[name].init_start = records[name].broker_pid = 0
            logger.info("%s powered off", name)
            return
        if record.init_runs():
            _kill_and_wait(record.init_pid, signal.SIGKILL, 10)
        pid = record.nspawn_pid  # nspawn exits once its container is gone; else it is stopped
        if pid and self._is_ours(pid) and not _kill_and_wait(pid, signal.SIGTERM, STOP_TIMEOUT):
            _kill_and_wait(pid, signal.SIGKILL, 5)
        process = self._children.pop(record.nspawn_pid, None)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)
        network.set_link(self.lab_netns, record.veth, up=False)
        with self._locked() as records:
            records[name].nspawn_pid = records[name].init_pid = records[name].init_start = 0
        logger.info("%s powered off", name)

    def power_on(self, name: str) -> Machine:
        """Boot a powered-off machine again: same name, address, overlay and network namespace.

        Its cable is plugged in again (a `cut_network` before the power cut is undone too).
        """
        record = self._record(name)
        if record.kind == "vm":
            if record.init_runs():
                raise LabError(f"lab machine {name!r} is already running")
            if record.veth in network.lab_links(self.lab_netns):
                network.set_link(self.lab_netns, record.veth, up=True)
            else:
                vm.attach_tap(self.lab_netns, record.veth)
            started = time.monotonic()
            machine = self._boot_vm(record)
            logger.info("%s powered on in %.1fs", name, time.monotonic() - started)
            return machine
        if record.nspawn_pid and _alive(record.nspawn_pid):
            raise LabError(f"lab machine {name!r} is already running")
        root = self._root(name)
        if not os.path.ismount(root):
            upper, work = self._machine_dir(name) / "upper", self._machine_dir(name) / "work"
            options = f"lowerdir={self.ensure_base()},upperdir={upper},workdir={work}"
            run(["mount", "-t", "overlay", "overlay", "-o", options, str(root)])
        if record.veth in network.lab_links(self.lab_netns):
            network.set_link(self.lab_netns, record.veth, up=True)  # same NIC, same MAC
        else:
            network.attach(self.lab_netns, record.netns, record.veth, record.address)
        started = time.monotonic()
        record.nspawn_pid = self._start_nspawn(record)
        with self._locked() as records:
            records[name] = record
        record.init_pid = self._wait_for_init(record)
        record.init_start = start_time(record.init_pid)
        with self._locked() as records:
            records[name] = record
        machine = record.machine()
        self._wait_for_systemd(machine, record)
        logger.info("%s powered on in %.1fs", name, time.monotonic() - started)
        return machine

    def is_running(self, name: str) -> bool:
        """Whether the machine is powered on (its container init runs; a VM's boot answers)."""
        record = self._record(name)
        if record.kind == "vm":
            return bool(record.machine().init_start)
        return self._after_reboot(record).init_runs()

    def cut_network(self, name: str) -> None:
        """Fault: take the machine's link to the lab bridge down (its veth, in the lab netns).

        On a real cloud the shared filesystem (NFS, CephFS) goes with the network, but the
        lab's is a bind mount from the host: it is made read-only too, so the machine can no
        longer write to it (slurmctld's heartbeat in the shared state, for example).
        """
        network.set_link(self.lab_netns, self._record(name).veth, up=False)
        self._remount_shared(name, "ro")

    def restore_network(self, name: str) -> None:
        """Undo `cut_network`."""
        self._remount_shared(name, "rw")
        network.set_link(self.lab_netns, self._record(name).veth, up=True)

    def fault(self, kind: FaultKind, name: str, service: str = "slurmctld") -> None:
        """Take machine `name` down one way: `kill` its service, `power` off, `network` cut."""
        if kind == "kill":
            self.get(name).kill_service(service)
        elif kind == "power":
            self.power_off(name)
        else:
            self.cut_network(name)

    def repair(self, kind: FaultKind, name: str, service: str = "slurmctld") -> None:
        """Undo `fault`."""
        if kind == "kill":
            self.get(name).revive_service(service)
        elif kind == "power":
            self.power_on(name)
        else:
            self.restore_network(name)

    def _remount_shared(self, name: str, mode: str) -> None:
        """Remount the machine's lab shared filesystems (filesystem-client stand-in) `mode`."""
        if not self.is_running(name):
            return
        argv = programs.sh("remount-shared.sh", mode)
        self.get(name).exec(argv, check=True, timeout=30)

    def network_is_up(self, name: str) -> bool:
        """Whether the machine's link to the lab bridge is up."""
        return network.link_is_up(self.lab_netns, self._record(name).veth)

    def _record(self, name: str) -> _Record:
        record = self._load().get(name)
        if record is None:
            raise LabError(f"no lab machine named {name!r}")
        return record

    # --- create steps --------------------------------------------------------------------

    def _reserve(self, name: str, kind: MachineKind = "container") -> _Record:
        """Record the machine with a free address and make sure the bridge exists (locked)."""
        with self._locked() as records:
            if name in records:
                raise LabError(f"lab machine {name!r} already exists")
            used = {rec.address for rec in records.values()}
            free = (f"{SUBNET}.{n}" for n in range(FIRST_HOST, LAST_HOST + 1))
            address = next((a for a in free if a not in used), None)
            if address is None:
                raise LabError("the lab subnet is full")
            host = address.rsplit(".", 1)[1]
            record = _Record(name, address, f"veth{host}", f"{self.netns_prefix}{name}")
            if kind == "vm":
                record.kind, record.veth = "vm", vm.tap_name(address)
                record.netns, record.channel = "", str(vm.channel_dir(self.state_dir, name))
            records[name] = record
            network.ensure_bridge(self.lab_netns)
        return record

    def _prepare_root(self, record: _Record, base: Path) -> None:
        """Mount the machine's overlay and write its identity and hosts file."""
        machine_dir = self._machine_dir(record.name)
        if machine_dir.exists():
            rootfs.unmount_under(machine_dir)
            shutil.rmtree(machine_dir)
        upper, work, root = machine_dir / "upper", machine_dir / "work", machine_dir / "root"
        for path in (upper, work, root, self.shared_dir, self.charms_dir):
            path.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={base},upperdir={upper},workdir={work}"
        run(["mount", "-t", "overlay", "overlay", "-o", options, str(root)])
        (root / "etc/hostname").write_text(f"{record.name}\n")
        (root / "etc/machine-id").write_text(f"{uuid.uuid4().hex}\n")
        others = [rec for rec in self._load().values() if rec.name != record.name]
        (root / "etc/hosts").write_text(_hosts_file([*others, record]))
        _name_no_unreachable_archive(root)
        for mountpoint in (SHARED_MOUNT, CHARMS_MOUNT):
            (root / mountpoint.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def _start_nspawn(self, record: _Record) -> int:
        """Start the machine's boot loop detached, its console going to a log file; its PID.

        The loop (`programs/boot-loop.sh`) runs systemd-nspawn, again after each reboot.
        """
        argv = [
            "sh",
            "-c",
            programs.text("boot-loop.sh"),
            BOOT_LOOP_NAME,
            str(REBOOTED),
            str(REBOOT_OFF_SECONDS),
            "--boot",
            f"--directory={self._root(record.name)}",
            f"--machine={record.name}",
            "--register=no",
            "--keep-unit",
            f"--network-namespace-path={network.netns_path(record.netns)}",
            f"--bind={self.shared_dir}:{SHARED_MOUNT}",
            f"--bind-ro={self.charms_dir}:{CHARMS_MOUNT}",
            "--resolv-conf=off",
            "--timezone=off",
            "--link-journal=no",
            "--console=read-only",
        ]
        if not shutil.which("systemd-nspawn"):
            raise LabError("systemd-nspawn not found: install systemd-container")
        env = {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        log = (self._machine_dir(record.name) / "console.log").open("ab")
        with log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._children[process.pid] = process
        return process.pid

    def console_log(self, name: str, lines: int = 50) -> str:
        """Return the tail of a machine's console output (nspawn and early boot messages)."""
        path = self._machine_dir(name) / "console.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _wait_for_init(self, record: _Record) -> int:
        """Find the container's init: the child of systemd-nspawn in a new PID namespace."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if not _alive(record.nspawn_pid):
                raise LabError(
                    f"systemd-nspawn for {record.name} exited:\n{self.console_log(record.name)}"
                )
            if init_pid := self._find_init(record):
                return init_pid
            time.sleep(0.05)
        raise LabError(f"{record.name}: no container init after {BOOT_TIMEOUT}s")

    def _find_init(self, record: _Record) -> int:
        """Return the container's init (its boot loop's nspawn's child in a new PID ns), or 0.

        That child is systemd-nspawn's own until it has set the container up (its mounts, the
        charms' among them) and executes systemd: only then is it the machine's init. A
        command entering it earlier would see a root without its mounts (CI: an exec right
        after a reboot found no /lab/charms).
        """
        for nspawn in _children(record.nspawn_pid):
            for child in _children(nspawn):
                if self._in_own_pid_ns(child) and _runs_systemd(child):
                    return child
        return 0

    @staticmethod
    def _in_own_pid_ns(pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        except OSError:
            return False

    def _wait_for_systemd(self, machine: Machine, record: _Record) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        state = ""
        while time.monotonic() < deadline:
            if not _alive(record.nspawn_pid):
                break
            with contextlib.suppress(LabError):
                state = machine.exec(["systemctl", "is-system-running"], timeout=10).stdout
                if state.strip() in ("running", "degraded"):
                    return
            time.sleep(0.2)
        raise LabError(
            f"{record.name}: systemd not running (state {state.strip()!r}):\n"
            f"{self.console_log(record.name)}"
        )

    def _update_hosts(self) -> None:
        """Rewrite /etc/hosts in every machine to list every machine."""
        with self._locked() as records:
            content = _hosts_file(sorted(records.values(), key=lambda r: r.name))
            for record in records.values():
                if record.kind == "vm":
                    share = self._machine_dir(record.name) / vm.SHARE_DIRS["labmachine"]
                    if share.is_dir():
                        _write_atomic(share / "hosts", content)
                    continue
                root = self._root(record.name)
                if (root / "etc").is_dir():
                    _write_atomic(root / "etc/hosts", content)

    # --- teardown ------------------------------------------------------------------------

    def _is_ours(self, pid: int) -> bool:
        cmdline = _cmdline(pid)
        is_nspawn = bool(cmdline) and "systemd-nspawn" in Path(cmdline[0]).name
        is_boot_loop = len(cmdline) > 3 and cmdline[3] == BOOT_LOOP_NAME
        return (is_nspawn or is_boot_loop) and any(
            arg.startswith(f"--directory={self._machines_dir}/") for arg in cmdline
        )

    def _stop(self, record: _Record) -> None:
        """Power the container off (SIGTERM to nspawn), killing it if that takes too long."""
        record = self._after_reboot(record)
        pid = record.nspawn_pid
        stopping = bool(pid) and _alive(pid) and self._is_ours(pid)
        if stopping and not _kill_and_wait(pid, signal.SIGTERM, STOP_TIMEOUT):
            logger.warning("%s: nspawn did not stop; killing", record.name)
            if record.init_runs():
                _kill_and_wait(record.init_pid, signal.SIGKILL, 5)
            _kill_and_wait(pid, signal.SIGKILL, 5)
        process = self._children.pop(pid, None)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)

    def _teardown(self, record: _Record) -> None:
        if record.kind == "vm":
            self._stop_vm(record)
            if network.netns_exists(self.lab_netns):
                run(["ip", "-n", self.lab_netns, "link", "del", record.veth], check=False)
            if record.channel:
                shutil.rmtree(record.channel, ignore_errors=True)
            shutil.rmtree(self._machine_dir(record.name), ignore_errors=True)
            return
        self._stop(record)
        machine_dir = self._machine_dir(record.name)
        rootfs.unmount_under(machine_dir)
        network.detach(self.lab_netns, record.netns, record.veth)
        if rootfs.mounts_under(machine_dir):
            raise LabError(f"{record.name}: still mounted: {rootfs.mounts_under(machine_dir)}")
        shutil.rmtree(machine_dir, ignore_errors=True)

    def _sweep(self) -> None:
        """Remove leftovers no record names: stray nspawns, mounts, namespaces, the bridge."""
        channel_root = self._channel_root()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if (
                self._is_ours(pid)
                or vm.is_qemu_of(pid, self._machines_dir)
                or vm.is_broker_of(pid, channel_root)
            ):
                _kill_and_wait(pid, signal.SIGKILL, 5)
        shutil.rmtree(channel_root, ignore_errors=True)
        for pid in network.pids_in(self.lab_netns):  # the mirror's server (`serve_mirror`)
            _kill_and_wait(pid, signal.SIGKILL, 5)
        for lab_dir in (self._machines_dir, self.shared_dir, self.charms_dir):
            rootfs.unmount_under(lab_dir)
        for name in network.list_netns(self.netns_prefix):
            network.delete_netns(name)


def _name_no_unreachable_archive(root: Path) -> None:
    """Leave the machine no apt source outside the lab, which it could never reach.

    The base names the Debian archive it was built from; a machine reaches only the lab
    (`network`), as an air-gapped site's machine reaches only its own mirrors, which are
    all its apt sources name. The charms' `apt-get update` fails on any source it cannot
    fetch (`hpc_libs.machine.apt.ERROR_ON_ANY`), as it must on a real site; the Slurm the
    machines run is in the base already, and a newer one comes from the lab's mirror.
    """
    (root / "etc/apt/sources.list").write_text(
        "# A lab machine reaches only the lab: no archive outside it (slurm_lab.machines).\n"
    )
