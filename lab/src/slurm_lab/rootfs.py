"""The lab's base root filesystem: Debian 13 with systemd and Slurm, built once and cached.

The base is keyed by a hash of its recipe (suite, packages, unit changes, recipe version) and
built into a temporary directory that is renamed into place only when complete, so a cached
base is always whole. The Debian mirror comes from the host's own apt configuration and is
never written into the repository.
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
from collections.abc import Iterator
from pathlib import Path

from slurm_lab.errors import LabError
from slurm_lab.proc import run

logger = logging.getLogger(__name__)

SUITE = "trixie"
#: Bump when `_configure` changes in a way that must rebuild cached bases.
RECIPE_VERSION = 1
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "iproute2",
    "iputils-ping",
    "procps",
    "slurmctld",
    "slurmd",
    "slurm-client",
    "sackd",
    "slurmrestd",
    "slurmdbd",
    "slurm-wlm-jwt-plugin",
    "mariadb-server",
)
#: Installed but left stopped: the charms start them (munge comes with Slurm; auth/slurm is used).
DISABLED_UNITS = (
    "slurmctld.service",
    "slurmd.service",
    "sackd.service",
    "slurmrestd.service",
    "slurmdbd.service",
    "mariadb.service",
    "munge.service",
)
#: Units that cannot work in a container without a network or real devices.
MASKED_UNITS = (
    "console-getty.service",
    "systemd-networkd-wait-online.service",
)
DEFAULT_CACHE_DIR = Path("/var/cache/slurm-lab")
APT_DIR = Path("/etc/apt")
BUILD_TIMEOUT = 1800


def host_requirements() -> list[str]:
    """Debian packages the host needs to run the lab (CI installs them)."""
    return [
        "debootstrap",
        "debian-archive-keyring",
        "systemd-container",
        "iproute2",
        "util-linux",
        "mount",
        "tar",
    ]


def cache_dir() -> Path:
    """Where bases are cached: $SLURM_LAB_CACHE or /var/cache/slurm-lab."""
    return Path(os.environ.get("SLURM_LAB_CACHE", DEFAULT_CACHE_DIR))


def recipe() -> dict[str, object]:
    """Everything that decides the base's content."""
    return {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "packages": sorted(PACKAGES),
        "disabled": sorted(DISABLED_UNITS),
        "masked": sorted(MASKED_UNITS),
    }


def recipe_hash() -> str:
    """Hash the recipe (short, stable): part of the cached base's directory name."""
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:16]


def _one_line_uris(text: str) -> Iterator[str]:
    for line in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 2 and words[0] == "deb":
            yield words[1]


def _deb822_uris(text: str) -> Iterator[str]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for stanza in re.split(r"\n\s*\n", "\n".join(lines)):
        fields = {
            key.strip().lower(): value.strip()
            for key, sep, value in (line.partition(":") for line in stanza.splitlines())
            if sep and not key.startswith((" ", "\t"))
        }
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            yield from fields.get("uris", "").split()


def apt_uris(apt_dir: Path = APT_DIR) -> list[str]:
    """Binary-package URIs from sources.list and sources.list.d (one-line and deb822 formats)."""
    files = [apt_dir / "sources.list"]
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        files += sorted(parts.iterdir())
    uris: list[str] = []
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".list" or path.name == "sources.list":
            uris += _one_line_uris(text)
        elif path.suffix == ".sources":
            uris += _deb822_uris(text)
    return uris


def _is_debian_archive(uri: str) -> bool:
    segments = [s for s in uri.split("://", 1)[-1].split("/")[1:] if s]
    return "debian" in segments and not any(s.endswith("-security") for s in segments)


def debian_mirror(apt_dir: Path = APT_DIR) -> str:
    """Return the host's Debian archive URI ($SLURM_LAB_MIRROR overrides)."""
    if mirror := os.environ.get("SLURM_LAB_MIRROR"):
        return mirror
    for uri in apt_uris(apt_dir):
        if _is_debian_archive(uri):
            return uri
    raise LabError(f"no Debian archive found in {apt_dir}/sources.list(.d); set SLURM_LAB_MIRROR")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def unmount_under(root: Path) -> None:
    """Unmount everything mounted at or below root, deepest first (lazily if busy)."""
    for mountpoint in sorted(mounts_under(root), key=len, reverse=True):
        if run(["umount", mountpoint], check=False).returncode != 0:
            run(["umount", "-l", mountpoint], check=False)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, from /proc/mounts."""
    prefix = str(root.resolve())
    found: list[str] = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mountpoint = line.split()[1].replace("\\040", " ")
        if mountpoint == prefix or mountpoint.startswith(prefix + "/"):
            found.append(mountpoint)
    return found


def _chroot(root: Path, *argv: str) -> None:
    run(["chroot", str(root), *argv], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def _configure(root: Path) -> None:
    """Make the debootstrapped tree a good container base."""
    units = " ".join(DISABLED_UNITS)
    _chroot(root, "sh", "-c", f"for u in {units}; do systemctl disable $u || true; done")
    _chroot(root, "systemctl", "mask", *MASKED_UNITS)
    _chroot(root, "apt-get", "clean")
    # Each machine gets its own machine-id written into its overlay before boot.
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    (root / "etc/hostname").write_text("localhost\n")
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("# the lab has no DNS: names come from /etc/hosts\n")


def _verify(root: Path) -> None:
    """Fail unless every recipe package is fully installed.

    debootstrap unpacks the extra packages in one go and retries those whose maintainer scripts
    fail on the first pass (mariadb-server's preinst needs perl before it is unpacked); this
    makes sure the retries left nothing half-installed.
    """
    status = run(
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n"]
    ).stdout
    installed = {line.split()[0] for line in status.splitlines() if line.split()[1:] == ["ii"]}
    if missing := sorted(set(PACKAGES) - installed):
        raise LabError(f"debootstrap left packages not installed: {', '.join(missing)}")
    audit = run(["chroot", str(root), "dpkg", "--audit"], check=False).stdout.strip()
    if audit:
        raise LabError(f"debootstrap left broken packages: {audit}")


def _build(target: Path, mirror: str) -> None:
    include = ",".join(PACKAGES)
    logger.info("debootstrap %s from %s into %s", SUITE, mirror, target)
    try:
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={include}",
                SUITE,
                str(target),
                mirror,
            ],
            timeout=BUILD_TIMEOUT,
        )
        _verify(target)
        _configure(target)
    finally:
        unmount_under(target)


def ensure_base(cache: Path | None = None) -> Path:
    """Return the cached base for the current recipe, building it first if needed."""
    cache = cache or cache_dir()
    base = cache / f"base-{recipe_hash()}"
    if base.is_dir():
        return base
    with _locked(cache / ".lock"):
        if base.is_dir():
            return base
        for stale in cache.glob(".build-*"):
            unmount_under(stale)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = cache / f".build-{recipe_hash()}-{os.getpid()}"
        try:
            _build(tmp, debian_mirror())
            tmp.rename(base)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        _prune_unused_bases(cache, keep=base)
    return base


def _prune_unused_bases(cache: Path, keep: Path) -> None:
    """Remove bases of older recipes that no mounted overlay still uses as its lower dir."""
    mounts = Path("/proc/mounts").read_text()
    for old in cache.glob("base-*"):
        if old != keep and f"lowerdir={old}" not in mounts:
            logger.info("removing the outdated base %s", old)
            shutil.rmtree(old, ignore_errors=True)
