"""The VM variant of the lab base: a kernel, a small initramfs and an ext4 disk image.

Built once per container base (`rootfs.ensure_base`) and cached next to it as
`vm-<key>/{vmlinuz,initrd.cpio,root.raw}`, the key hashing the base's recipe and this recipe.
The disk is the container base copied, with Debian's kernel package (`linux-image-amd64`) and
`busybox-static` installed from the same Debian archive, pruned for a fast boot (units a test
VM never uses are masked), and laid out with `mkfs.ext4 -d` (no loop device, no mount). Each
VM boots from a qcow2 overlay of it (`slurm_lab.vm`).

The initramfs is not Debian's (12-20 s under TCG here) but a few kilobytes of shell run by
the image's own busybox: it loads the modules the root disk needs (virtio_blk, ext4 and what
they depend on, uncompressed from the image's modules), mounts /dev/vda and switches to it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import os
import shutil
import stat
from collections.abc import Iterator
from email.utils import formatdate
from importlib import resources
from pathlib import Path

from slurm_lab import programs, rootfs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

logger = logging.getLogger(__name__)

#: Bump when the image's recipe changes in a way that must rebuild cached images.
RECIPE_VERSION = 3
PACKAGES = ("linux-image-amd64", "busybox-static")
WITHOUT = (
    "dbus",
    "dbus-bin",
    "dbus-daemon",
    "dbus-session-bus-common",
    "dbus-system-bus-common",
)
"""Packages of the container base the VM image lacks: the system bus, as on Ubuntu's minimal
and some cloud images. Under cgroup v2 slurmd needs it (it asks systemd for slurmstepd's scope
over it), so the slurmd charm installs it: from `LOCAL_REPOSITORY`, the machines reaching no
archive. A charm that stopped installing it fails on a VM, as it would on such an image."""
LOCAL_REPOSITORY = "/var/lib/slurm-lab/debs"
"""A flat apt repository in the image holding the `WITHOUT` packages, named by the image's
apt sources (`[trusted=yes]`, as the lab's other mirrors)."""
#: Units a test VM does not need; masked, they cost no boot time (measured: 41-58 s of
#: userspace unpruned, 11-24 s pruned, under TCG here).
PRUNED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "fstrim.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "logrotate.timer",
    "man-db.timer",
    "systemd-tmpfiles-clean.timer",
    "getty@tty1.service",
    "serial-getty@ttyS0.service",
    "console-getty.service",
    "systemd-networkd-wait-online.service",
    "systemd-pstore.service",
    "systemd-logind.service",
    "systemd-firstboot.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-binfmt.service",
    "systemd-hwdb-update.service",
    "remote-fs.target",
    # udev comes with the kernel package (initramfs-tools needs it); the VM has no hardware
    # to wait for: its modules are loaded by name (BOOT_MODULES) and /dev is devtmpfs.
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    # First-boot and cache work the image did at build time, and kernel interfaces no test
    # uses: measured 5-13 s each under TCG on a loaded host.
    "ldconfig.service",
    "systemd-update-done.service",
    "systemd-journal-catalog-update.service",
    "systemd-sysusers.service",
    "kmod-static-nodes.service",
    "systemd-random-seed.service",
    "modprobe@configfs.service",
    "modprobe@fuse.service",
    "modprobe@dm_mod.service",
    "modprobe@loop.service",
    "modprobe@drm.service",
    "modprobe@efi_pstore.service",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "sys-kernel-config.mount",
)
#: Modules systemd-modules-load loads at boot (the VM has no udev to load them on demand).
BOOT_MODULES = ("virtio_net", "virtio_console", "9p", "9pnet_virtio", "virtio_rng")
#: Modules the initramfs loads, in this order, to mount the root disk (their own dependencies
#: are added from the image's modules.dep).
ROOT_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4")
"""ext4 asks the crypto API for crc32c at mount: no module lists it as a dependency."""
IMAGE_SIZE = 6 * 1024**3
"""The root disk's size: sparse, the base takes about 1.2 GB of it."""
SHARES = {
    "labcharms": ("/lab/charms", "ro"),
    "labshared": ("/lab/shared", "rw"),
    "labjuju": ("/var/lib/juju", "rw"),
    "labmachine": ("/lab/machine", "ro"),
}
"""9p shares every VM mounts (tag: mount point, mode); `slurm_lab.vm` exports them."""
AGENT_PATH = "/lab/machine/agent.py"
"""The command agent (`slurm_lab.vmagent`), which the lab puts in the VM's machine share at
each boot: the lab's current agent, whatever image the VM boots."""
NETWORK_SCRIPT = "/usr/local/lib/slurm-lab/network"

_INIT = programs.text("vm-init.sh")
"""The initramfs' /init: load the root disk's modules, mount it, hand over to systemd."""

_NETWORK = """#!/bin/sh
# Give eth0 the lab address named on the kernel command line (lab.address=A.B.C.D/N).
set -e
for word in $(cat /proc/cmdline); do
    case "$word" in lab.address=*) address=${word#lab.address=} ;; esac
done
[ -n "$address" ] || exit 0
ip link set lo up
ip addr add "$address" dev eth0 2>/dev/null || true
ip link set eth0 up
"""

_NETWORK_UNIT = programs.text("lab-network.service")
"""Runs NETWORK_SCRIPT (`_NETWORK`) before the network is up."""
_AGENT_UNIT = programs.text("lab-agent.service")
"""Runs the command agent (AGENT_PATH) from early boot to shutdown."""


def recipe() -> dict[str, object]:
    """Everything that decides the image's content, on top of the container base's recipe."""
    return {
        "version": RECIPE_VERSION,
        "packages": sorted(PACKAGES),
        "without": sorted(WITHOUT),
        "pruned": sorted(PRUNED_UNITS),
        "boot_modules": list(BOOT_MODULES),
        "root_modules": list(ROOT_MODULES),
        "shares": SHARES,
        "files": hashlib.sha256(
            (_INIT + _NETWORK + _NETWORK_UNIT + _AGENT_UNIT).encode()
        ).hexdigest(),
    }


def image_dir(base: Path) -> Path:
    """Where the VM variant of `base` is cached (beside it)."""
    key = json.dumps({"base": base.name, "vm": recipe()}, sort_keys=True)
    return base.parent / f"vm-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def ensure_image(base: Path) -> Path:
    """Return the cached VM variant of the container base `base`, building it if needed."""
    target = image_dir(base)
    if (target / "root.raw").is_file():
        return target
    with rootfs.locked(base.parent / ".lock-vm"):
        if (target / "root.raw").is_file():
            return target
        tmp = base.parent / f".build-{target.name}-{os.getpid()}"
        try:
            _build(base, tmp)
            tmp.rename(target)
        finally:
            if tmp.exists():
                rootfs.unmount_under(tmp)
                shutil.rmtree(tmp, ignore_errors=True)
        _prune_unused(base.parent, keep=target)
    return target


def _prune_unused(cache: Path, keep: Path) -> None:
    """Remove other VM images no running VM uses (qemu holds the files open: skip those)."""
    for old in cache.glob("vm-*"):
        if old != keep and old.is_dir() and not _in_use(old):
            logger.info("removing the outdated VM image %s", old)
            shutil.rmtree(old, ignore_errors=True)


def _in_use(image: Path) -> bool:
    raw = str((image / "root.raw").resolve())
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == raw for fd in fd_dir.iterdir()):
                return True
        except OSError:
            continue
    return False


def _chroot(root: Path, script: str) -> None:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
    }
    run(["chroot", str(root), "sh", "-ec", script], env=env, timeout=rootfs.BUILD_TIMEOUT)


def _build(base: Path, out: Path) -> None:
    root = out / "root"
    out.mkdir(parents=True)
    logger.info("building the VM image of %s in %s", base, out)
    run(["cp", "-a", "--reflink=auto", f"{base}/.", str(root)], timeout=rootfs.BUILD_TIMEOUT)
    resolv = root / "etc/resolv.conf"
    lab_resolv = resolv.read_text()
    shutil.copyfile("/etc/resolv.conf", resolv)  # apt resolves the archive as the host does
    run(["mount", "-t", "proc", "proc", str(root / "proc")])
    try:
        # Debian's initramfs is not used (see the module docstring): skip building it.
        _chroot(
            root,
            "dpkg-divert --local --rename --divert /usr/sbin/update-initramfs.debian "
            "--add /usr/sbin/update-initramfs\n"
            "printf '#!/bin/sh\\nexit 0\\n' > /usr/sbin/update-initramfs\n"
            "chmod 755 /usr/sbin/update-initramfs\n"
            "apt-get update -q\n"
            f"apt-get install -y -q --no-install-recommends {' '.join(PACKAGES)}\n"
            f"mkdir -p {LOCAL_REPOSITORY}\ncd {LOCAL_REPOSITORY}\n"
            f"apt-get download -q {' '.join(WITHOUT)}\ncd /\n"
            f"dpkg --purge {' '.join(WITHOUT)}\n"
            "apt-get clean\nrm -rf /var/lib/apt/lists/*\n",
        )
    finally:
        rootfs.unmount_under(root / "proc")
        resolv.write_text(lab_resolv)
    _configure(root)
    _write_local_repository(root)
    kernel = _kernel_version(root)
    _unpack_boot_modules(root, kernel)
    shutil.copyfile(root / f"boot/vmlinuz-{kernel}", out / "vmlinuz")
    _write_initramfs(root, kernel, out / "initrd.cpio")
    run(["truncate", "-s", str(IMAGE_SIZE), str(out / "root.raw")])
    run(
        ["mkfs.ext4", "-q", "-L", "labroot", "-d", str(root), str(out / "root.raw")],
        timeout=rootfs.BUILD_TIMEOUT,
    )
    (out / "kernel-version").write_text(kernel + "\n")
    (out / "recipe.json").write_text(json.dumps(recipe(), sort_keys=True) + "\n")
    run(["rm", "-rf", str(root)], timeout=rootfs.BUILD_TIMEOUT)


def _configure(root: Path) -> None:
    """Prune the boot, mount the 9p shares, set up the address and the command channel."""
    for unit in PRUNED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    for wants in (root / "etc/systemd/system").glob("*.wants"):
        for entry in wants.iterdir():
            if entry.name in PRUNED_UNITS:
                entry.unlink()
    fstab = ["/dev/vda / ext4 rw,noatime 0 0"]
    for tag, (mountpoint, mode) in SHARES.items():
        # After the modules load: a mount tried before 9pnet_virtio registered the share's
        # channel fails ("no channels available for device labjuju", a CI's VM), and nofail
        # lets the boot go on without it, a machine without its agent directory.
        options = (
            f"trans=virtio,version=9p2000.L,{mode},cache=mmap,msize=262144,nofail,"
            "x-systemd.after=systemd-modules-load.service"
        )
        fstab.append(f"{tag} {mountpoint} 9p {options} 0 0")
        (root / mountpoint.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "etc/fstab").write_text("\n".join(fstab) + "\n")
    (root / "etc/modules-load.d/slurm-lab.conf").write_text("\n".join(BOOT_MODULES) + "\n")
    hosts = root / "etc/hosts"
    hosts.unlink(missing_ok=True)
    hosts.symlink_to("/lab/machine/hosts")
    (root / "etc/apt/sources.list").write_text(
        "# A lab machine reaches only the lab: no archive outside it (slurm_lab.machines).\n"
    )
    network = root / NETWORK_SCRIPT.lstrip("/")
    network.parent.mkdir(parents=True, exist_ok=True)
    network.write_text(_NETWORK)
    network.chmod(0o755)
    units = root / "etc/systemd/system"
    (units / "lab-network.service").write_text(_NETWORK_UNIT)
    (units / "lab-agent.service").write_text(_AGENT_UNIT)
    for unit, target in (
        ("lab-network.service", "multi-user.target"),
        ("lab-agent.service", "sysinit.target"),
    ):
        wants = units / f"{target}.wants"
        wants.mkdir(exist_ok=True)
        (wants / unit).unlink(missing_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    # journald keeps its journal in memory: the VM's disk is a throwaway overlay.
    (root / "etc/systemd/journald.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/journald.conf.d/slurm-lab.conf").write_text(
        "[Journal]\nStorage=volatile\n"
    )


def _write_local_repository(root: Path) -> None:
    """Index `LOCAL_REPOSITORY`'s debs (Packages, unsigned Release) and name it as a source."""
    repository = root / LOCAL_REPOSITORY.lstrip("/")
    stanzas = []
    for deb in sorted(repository.glob("*.deb")):
        control = run(["dpkg-deb", "--field", str(deb)]).stdout.rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    if len(stanzas) != len(WITHOUT):
        raise LabError(f"the VM image's local repository holds {len(stanzas)} debs, not {WITHOUT}")
    packages = "\n".join(stanzas).encode()
    (repository / "Packages").write_bytes(packages)
    (repository / "Release").write_text(
        "Origin: slurm-lab\nLabel: packages the VM image lacks\n"
        f"Date: {formatdate(usegmt=True)}\n"
        f"SHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
    )
    (root / "etc/apt/sources.list.d/slurm-lab-local.list").write_text(
        f"deb [trusted=yes] file:{LOCAL_REPOSITORY} ./\n"
    )


def agent_source() -> str:
    """Return the command agent's program, which each VM runs from its machine share."""
    return resources.files("slurm_lab").joinpath("vmagent.py").read_text()


def _unpack_boot_modules(root: Path, kernel: str) -> None:
    """Store the modules loaded at each boot uncompressed: xz costs seconds under TCG."""
    moddir = root / "lib/modules" / kernel
    for path in _module_files(root, kernel, BOOT_MODULES):
        packed = moddir / path
        if packed.suffix == ".xz" and packed.exists():
            packed.with_suffix("").write_bytes(lzma.decompress(packed.read_bytes()))
            packed.unlink()
    _chroot(root, f"depmod -a {kernel}")


def _kernel_version(root: Path) -> str:
    kernels = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise LabError("the VM image has no kernel in /boot")
    return kernels[-1]


def _module_files(root: Path, kernel: str, names: tuple[str, ...] = ROOT_MODULES) -> list[str]:
    """Return the module files `names` need, dependencies first (from modules.dep)."""
    moddir = root / "lib/modules" / kernel
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().split("\n"):
        if ":" in line:
            path, _, needs = line.partition(":")
            deps[path] = needs.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    builtin = (moddir / "modules.builtin").read_text().split("\n")
    builtin_names = {Path(p).name.split(".ko")[0].replace("-", "_") for p in builtin if p}
    ordered: list[str] = []

    def add(path: str) -> None:
        for dep in deps.get(path, []):
            add(dep)
        if path not in ordered:
            ordered.append(path)

    for name in names:
        if name in by_name:
            add(by_name[name])
        elif name not in builtin_names:
            raise LabError(f"kernel {kernel} has no module {name}")
    return ordered


def _write_initramfs(root: Path, kernel: str, dest: Path) -> None:
    """Write the initramfs (an uncompressed newc cpio: nothing to unpack under TCG)."""
    moddir = root / "lib/modules" / kernel
    entries: list[tuple[str, int, bytes]] = [
        ("bin", stat.S_IFDIR | 0o755, b""),
        ("modules", stat.S_IFDIR | 0o755, b""),
        ("dev", stat.S_IFDIR | 0o755, b""),
        ("dev/console", stat.S_IFCHR | 0o600, b""),
        ("init", stat.S_IFREG | 0o755, _INIT.encode()),
        ("bin/busybox", stat.S_IFREG | 0o755, (root / "bin/busybox").read_bytes()),
    ]
    order: list[str] = []
    for path in _module_files(root, kernel):
        data = (moddir / path).read_bytes()
        name = Path(path).name
        if name.endswith(".xz"):
            data, name = lzma.decompress(data), name.removesuffix(".xz")
        elif name.endswith(".zst"):
            raise LabError(f"cannot unpack {name}: zstd modules are not supported")
        entries.append((f"modules/{name}", stat.S_IFREG | 0o644, data))
        order.append(name)
    entries.append(("modules.order", stat.S_IFREG | 0o644, ("\n".join(order) + "\n").encode()))
    dest.write_bytes(b"".join(_cpio(entries)))


def _cpio(entries: list[tuple[str, int, bytes]]) -> Iterator[bytes]:
    """Yield a newc cpio archive of (name, mode, data) entries (/dev/console is 5:1)."""

    def pad(length: int) -> bytes:
        return b"\0" * (-length % 4)

    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        rdev = (5, 1) if stat.S_ISCHR(mode) else (0, 0)
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
        header = b"070701" + b"".join(f"{value:08X}".encode() for value in fields)
        head = header + name.encode() + b"\0"
        yield head + pad(len(head)) + data + pad(len(data))
