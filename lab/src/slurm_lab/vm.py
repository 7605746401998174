"""Lab machines that boot their own kernel: qemu, software emulation, on the lab network.

A VM boots the cached VM image (`slurm_lab.vmimage`) from a qcow2 overlay of its own
(`disk.qcow2` in the machine's directory; a few MB), with:

* **qemu's line**: `-M q35 -accel tcg,thread=single,tb-size=128`, 2 vCPUs, 1 GiB. KVM does not
  work on the hosts this lab runs on (nested PVM); TCG does. `thread=single` runs as fast as
  multi-threaded TCG here and takes one host core; `tb-size=128` halves qemu's memory (411
  against 740 MiB) and makes a reboot after Slurm ran no slower than the first boot;
* **the network**: a tap created in the lab's namespace and enslaved to its bridge; qemu runs
  in that namespace (`ip netns exec`), so the VM reaches the lab's machines, containers and
  VMs, and nothing else. Cutting the network takes the tap down;
* **files the host shares** (9p, `vmimage.SHARES`): the charms read-only at /lab/charms as in
  a container, the lab's shared dir at /lab/shared, /var/lib/juju (the unit agents' dirs and the
  juju-exec spool, which the controller reads and writes from the host as it does in a
  container's overlay), and /lab/machine (its /etc/hosts, which the lab rewrites);
* **the command channel**: a virtio serial port, brokered on the host (`slurm_lab.vmchannel`).

A reboot in the guest is a real kernel reboot (qemu resets the VM and keeps running); a power
cycle kills qemu and starts it again on the same overlay.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from slurm_lab import network, vmimage
from slurm_lab.proc import run

MEMORY_MB = 1024
CPUS = 2
BOOT_TIMEOUT = 300.0
"""Seconds a VM has to boot: 18-34 s measured alone, several at once on 2 loaded cores."""
DISK = "disk.qcow2"
SHARE_DIRS = {"labjuju": "juju", "labmachine": "machine"}
"""The 9p shares each VM has a host directory of its own for (in its machine directory)."""
QEMU = "qemu-system-x86_64"


def host_requirements() -> list[str]:
    """Debian packages the host needs for VMs (qemu, qemu-img, mkfs.ext4 -d)."""
    return ["qemu-system-x86", "qemu-utils", "e2fsprogs"]


def channel_dir(state_dir: Path, name: str) -> Path:
    """Where a VM's channel sockets live: short paths under /run (a socket path has 108 bytes)."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:8]
    return Path("/run/slurm-lab") / digest / name


def tap_name(address: str) -> str:
    """Return the VM's tap in the lab namespace (its end of the cable), from its address."""
    return f"tap{address.rsplit('.', 1)[1]}"


def mac_address(address: str) -> str:
    """Return a stable MAC for the VM's NIC: the same across power cycles."""
    host = int(address.rsplit(".", 1)[1])
    return f"52:54:00:97:00:{host:02x}"


def make_disk(image: Path, machine_dir: Path) -> Path:
    """Create the VM's qcow2 overlay on the image's raw disk."""
    disk = machine_dir / DISK
    run(
        [
            *("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw"),
            *("-b", str(image / "root.raw"), str(disk)),
        ]
    )
    return disk


def attach_tap(lab_ns: str, tap: str) -> None:
    """Create the VM's tap in the lab namespace, on the bridge, up."""
    run(["ip", "-n", lab_ns, "link", "del", tap], check=False)
    run(["ip", "-n", lab_ns, "tuntap", "add", "dev", tap, "mode", "tap"])
    run(["ip", "-n", lab_ns, "link", "set", tap, "master", network.BRIDGE, "up"])


def qemu_argv(
    *,
    name: str,
    address: str,
    machine_id: str,
    image: Path,
    machine_dir: Path,
    channel: Path,
    charms_dir: Path,
    shared_dir: Path,
) -> list[str]:
    """Return qemu's command line for the VM (see the module docstring for the choices)."""
    cmdline = " ".join(
        [
            "console=ttyS0",
            "quiet",
            "root=/dev/vda",
            "rw",
            "panic=-1",
            f"lab.address={address}/{network.PREFIX_LEN}",
            f"systemd.hostname={name}",
            f"systemd.machine_id={machine_id}",
        ]
    )
    shares = {
        "labcharms": (charms_dir, True),
        "labshared": (shared_dir, False),
        "labjuju": (machine_dir / SHARE_DIRS["labjuju"], False),
        "labmachine": (machine_dir / SHARE_DIRS["labmachine"], True),
    }
    argv = [
        QEMU,
        *("-name", f"{name},process=slurm-lab-vm"),
        *("-M", "q35", "-accel", "tcg,thread=single,tb-size=128"),
        *("-smp", str(CPUS), "-m", str(MEMORY_MB)),
        *("-nodefaults", "-nographic", "-no-user-config"),
        *("-serial", f"file:{machine_dir / 'console.log'}"),
        *("-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.cpio")),
        *("-append", cmdline),
        *("-drive", f"file={machine_dir / DISK},if=virtio,format=qcow2,discard=unmap"),
        *("-netdev", f"tap,id=net0,ifname={tap_name(address)},script=no,downscript=no"),
        *("-device", f"virtio-net-pci,netdev=net0,mac={mac_address(address)},romfile="),
        *("-device", "virtio-rng-pci"),
        *("-device", "virtio-serial-pci"),
        *("-chardev", f"socket,id=lab0,path={channel / 'chardev.sock'},server=on,wait=off"),
        *("-device", "virtserialport,chardev=lab0,name=lab.0"),
    ]
    for index, (tag, (path, readonly)) in enumerate(shares.items()):
        assert tag in vmimage.SHARES
        options = f"local,id=fs{index},path={path},security_model=passthrough"
        argv += ["-fsdev", options + (",readonly=on" if readonly else "")]
        argv += ["-device", f"virtio-9p-pci,fsdev=fs{index},mount_tag={tag}"]
    return argv


def start(argv: list[str], lab_ns: str, machine_dir: Path, channel: Path) -> tuple[int, int]:
    """Start qemu in the lab's namespace and the VM's channel broker; their PIDs."""
    channel.mkdir(parents=True, exist_ok=True, mode=0o700)
    (channel / "chardev.sock").unlink(missing_ok=True)
    with (machine_dir / "qemu.log").open("ab") as log:
        qemu = subprocess.Popen(
            ["ip", "netns", "exec", lab_ns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        broker = subprocess.Popen(
            [sys.executable, "-m", "slurm_lab.vmchannel", str(channel)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return qemu.pid, broker.pid


def is_qemu_of(pid: int, machines_dir: Path) -> bool:
    """Whether pid is a VM qemu of this lab (its disk lies under machines_dir)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    prefix = f"file={machines_dir}/".encode()
    return (
        bool(cmdline)
        and cmdline[0].endswith(QEMU.encode())
        and any(arg.startswith(prefix) for arg in cmdline)
    )


def is_broker_of(pid: int, channel_root: Path) -> bool:
    """Whether pid is the channel broker of one of this lab's VMs."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        b"slurm_lab.vmchannel" in cmdline
        and len(cmdline) > 3
        and cmdline[3].startswith(f"{channel_root}/".encode())
    )
