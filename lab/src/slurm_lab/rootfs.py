"""The lab's base root filesystem: Debian with systemd and Slurm, built once and cached.

The suite is chosen per lab (`SUITES`): Debian 13 trixie (Slurm 24.11, the default) or
Debian testing, forky (the newer Slurm, 26.05 today); `SLURM_LAB_SUITE` sets it for labs
that do not name one. The base is keyed by a hash of its recipe (suite, packages, unit
changes, recipe version) and built into a temporary directory that is renamed into place only
when complete, so a cached base is always whole. The cache keeps one base per suite: a new
recipe prunes the older bases of its own suite only. The Debian mirror comes from the host's
own apt configuration and is never written into the repository.
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

from slurm_lab import programs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

logger = logging.getLogger(__name__)

SUITES = ("trixie", "forky")
"""Debian suites the lab builds: trixie has Slurm 24.11, forky (testing) the newer Slurm."""
DEFAULT_SUITE = "trixie"
DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")
#: Bump when `_configure` changes in a way that must rebuild cached bases.
RECIPE_VERSION = 1
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "iproute2",
    "curl",
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
    "prometheus",
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
    "prometheus.service",
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


def check_suite(suite: str) -> str:
    """Return `suite` if the lab can build it, else raise LabError naming the choices."""
    if suite not in SUITES:
        raise LabError(f"unknown lab suite {suite!r}: use one of {', '.join(SUITES)}")
    return suite


def default_suite() -> str:
    """Return the suite of labs that name none: $SLURM_LAB_SUITE, else trixie."""
    return check_suite(os.environ.get("SLURM_LAB_SUITE") or DEFAULT_SUITE)


def recipe(suite: str = DEFAULT_SUITE) -> dict[str, object]:
    """Everything that decides the base's content."""
    return {
        "version": RECIPE_VERSION,
        "suite": suite,
        "packages": sorted(PACKAGES),
        "disabled": sorted(DISABLED_UNITS),
        "masked": sorted(MASKED_UNITS),
    }


def recipe_hash(suite: str = DEFAULT_SUITE) -> str:
    """Hash the recipe (short, stable): part of the cached base's directory name."""
    return hashlib.sha256(json.dumps(recipe(suite), sort_keys=True).encode()).hexdigest()[:16]


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


locked = _locked
"""Hold an exclusive lock on a lock file (for the builds of cached images)."""


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
    _chroot(root, *programs.sh("disable-units.sh", *DISABLED_UNITS))
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


def debootstrap_script(suite: str) -> str:
    """Return debootstrap's script for `suite` (sid's when the host's debootstrap is older).

    Debian 12's debootstrap knows trixie but not forky; testing and unstable share the sid
    script, as each new suite's own script does (a link to sid).
    """
    own = DEBOOTSTRAP_SCRIPTS / suite
    return str(own if own.exists() else DEBOOTSTRAP_SCRIPTS / "sid")


def _build(target: Path, mirror: str, suite: str = DEFAULT_SUITE) -> None:
    include = ",".join(PACKAGES)
    logger.info("debootstrap %s from %s into %s", suite, mirror, target)
    try:
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={include}",
                suite,
                str(target),
                mirror,
                debootstrap_script(suite),
            ],
            timeout=BUILD_TIMEOUT,
        )
        _verify(target)
        _configure(target)
    finally:
        unmount_under(target)


def ensure_base(cache: Path | None = None, suite: str | None = None) -> Path:
    """Return the cached base of `suite` (default: `default_suite()`), building it if needed."""
    cache = cache or cache_dir()
    suite = check_suite(suite or default_suite())
    digest = recipe_hash(suite)
    base = cache / f"base-{digest}"
    if base.is_dir():
        return base
    with _locked(cache / ".lock"):
        if base.is_dir():
            return base
        for stale in cache.glob(".build-*"):
            unmount_under(stale)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = cache / f".build-{digest}-{os.getpid()}"
        try:
            _build(tmp, debian_mirror(), suite)
            _recipe_file(base).parent.mkdir(exist_ok=True)
            _recipe_file(base).write_text(json.dumps(recipe(suite), sort_keys=True) + "\n")
            tmp.rename(base)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        _prune_unused_bases(cache, keep=base, suite=suite)
    return base


def python_version(base: Path) -> str:
    """Return the `major.minor` of the base's python3 (the charms run on it: 3.13 on trixie)."""
    target = os.readlink(base / "usr/bin/python3")
    match = re.fullmatch(r"python(\d+\.\d+)", Path(target).name)
    if match is None:
        raise LabError(f"cannot tell the Python version of {base}: python3 -> {target}")
    return match.group(1)


def _recipe_file(base: Path) -> Path:
    """Where the recipe of a cached base is recorded: in the cache, not in the machines' tree."""
    return base.parent / "recipes" / f"{base.name}.json"


def base_suite(base: Path) -> str:
    """Return the suite a cached base was built from (bases cached before suites: trixie)."""
    try:
        recorded = json.loads(_recipe_file(base).read_text())
    except (OSError, ValueError):
        return DEFAULT_SUITE
    suite = recorded.get("suite") if isinstance(recorded, dict) else None
    return suite if isinstance(suite, str) else DEFAULT_SUITE


def _prune_unused_bases(cache: Path, keep: Path, suite: str) -> None:
    """Remove the older bases of `suite` that no mounted overlay still uses as its lower dir."""
    mounts = Path("/proc/mounts").read_text()
    for old in cache.glob("base-*"):
        if not old.is_dir() or old == keep or base_suite(old) != suite:
            continue
        if f"lowerdir={old}" not in mounts:
            logger.info("removing the outdated base %s", old)
            shutil.rmtree(old, ignore_errors=True)
            _recipe_file(old).unlink(missing_ok=True)
