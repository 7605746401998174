"""The charm build machine: charmcraft packing on the lab's own Debian and Python.

A packed charm carries a venv built for the Python of the machine that packed it, so the lab
packs on the lab machines' own base (`rootfs`): trixie with Python 3.13, or forky with its
newer Python. The build machine is that base plus a *builder layer*: python3-apt (charmcraft's
apt backend imports it; the venv sees it through `--system-site-packages`), python3-dev (the
build-packages of craft-parts' Python plugins, so a pack installs nothing) and charmcraft
itself, from PyPI at the version this repository pins, in a venv at `/opt/charmcraft`. The
layer is an overlay upper dir kept in the cache (`<cache>/charms/builder-<key>`), built once
per base, charmcraft version and uv version.

Every pack mounts a fresh overlay (a tmpfs-less upper dir under the cache, removed after) of
builder layer over base and runs `systemd-nspawn` without booting: a one-command container
that shares the host's network (charmcraft's uv step downloads the charm's wheels from PyPI
and uv's cache under `<cache>/uv` keeps them) but none of its filesystem except what is
bound: the staged charm at `/build/<name>`, the host's uv binary and its TLS trust.

Two things stand between charmcraft and a Debian build host; both are bypassed here only:

* The base check. Charmcraft (craft-application's `LifecycleService._validate_build_plan`)
  refuses a destructive build whose base (ubuntu@24.04) is not the host's (Debian 13).
  `/opt/charmcraft/charmcraft-lab` runs charmcraft's own `main` with that one method
  replaced by a no-op; everything else (the plan, the uv plugin, the dispatch script, the
  YAML files, the manifest) is charmcraft's own code. There is no option or variable for it.
* `build-snaps: [astral-uv]`. There is no snapd in the build machine: the machine carries a
  `/run/.containerenv` marker, the documented way craft-parts recognises a container whose
  snaps are provided beforehand (it then warns and skips snap installation). uv is the host's
  own, bound at `/usr/local/bin/uv`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_lab import programs, rootfs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

logger = logging.getLogger(__name__)

#: Bump when the builder layer's recipe (`_SETUP`, the wrapper) changes.
BUILDER_VERSION = 1
PACK_TIMEOUT = 900
DOWNLOAD_TIMEOUT = 900
CHARMCRAFT_DIR = "/opt/charmcraft"
CHARMCRAFT_LAB = f"{CHARMCRAFT_DIR}/charmcraft-lab"
MACHINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TLS_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY")

#: The builder layer's recipe, run in it with the charmcraft version as `$1`: python3-apt and
#: python3-dev, charmcraft in CHARMCRAFT_DIR/venv, and CHARMCRAFT_LAB, charmcraft's own entry
#: point with only the base check of destructive builds switched off.
_SETUP = programs.text("builder-setup.sh")


@dataclass(frozen=True)
class Charmcraft:
    """The charmcraft the build machine installs: a PyPI version and its pinned dependencies."""

    version: str
    constraints: Path


def host_uv() -> Path:
    """Return the host's uv binary (the one running us, else the one on PATH)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise LabError("uv is needed to pack charms (pip install uv)")
    return Path(found).resolve()


def _uv_version(uv: Path) -> str:
    return run([str(uv), "--version"]).stdout.strip()


def charms_cache() -> Path:
    """Where packed charms and the builder layers live: `<lab cache>/charms`."""
    return rootfs.cache_dir() / "charms"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def content_key(*parts: str) -> str:
    """Hash what decides a cached build's content, short enough for a directory name."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def cached_build(cache: Path, name: str, key: str, build: Callable[[Path], Path]) -> Path:
    """Return `<cache>/<name>-<key>`, built once under a lock.

    `build(scratch)` makes the tree inside a scratch dir of the cache's filesystem and returns
    it; it is renamed into place whole, so a reader never sees half a tree. Older
    `<name>-*` trees go after.
    """
    target = cache / f"{name}-{key}"
    if target.is_dir():
        return target
    with locked(cache / f".{name}.lock"):
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
        try:
            build(scratch).rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for old in cache.glob(f"{name}-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
    return target


def download_debs(
    suite: str, script: str, packages: Sequence[str], out: Path, scratch: Path, *, what: str
) -> str:
    """Download `packages` into `out` with `script`; return its output.

    The script runs in a one-command container of `suite`'s base on the host's network, with
    `out` bound at /out as apt's archive dir and the Debian archive as its first argument;
    `what` names the packages in the error. apt's leftovers in `out` (`partial`, `lock`) are
    removed, so `out` holds only packages.
    """
    base = rootfs.ensure_base(suite=suite)
    read_only, env = host_tls()
    with overlay([base], scratch) as root:
        result = nspawn(
            root,
            script,
            args=[rootfs.debian_mirror(), *packages],
            binds={out: "/out"},
            read_only=read_only,
            env=env,
            network=True,
            timeout=DOWNLOAD_TIMEOUT,
        )
    succeeded(result, f"cannot download {what}")
    shutil.rmtree(out / "partial", ignore_errors=True)
    (out / "lock").unlink(missing_ok=True)
    return result.stdout


@contextlib.contextmanager
def overlay(lowers: Sequence[Path], scratch: Path) -> Iterator[Path]:
    """Mount an overlay of `lowers` (topmost first) with a fresh upper dir under `scratch`."""
    upper, work, root = scratch / "upper", scratch / "work", scratch / "root"
    for path in (upper, work, root):
        path.mkdir(parents=True)
    lowerdir = ":".join(str(lower) for lower in lowers)
    options = f"lowerdir={lowerdir},upperdir={upper},workdir={work}"
    run(["mount", "-t", "overlay", "overlay", "-o", options, str(root)])
    try:
        yield root
    finally:
        rootfs.unmount_under(root)


def nspawn(
    root: Path,
    script: str,
    *,
    args: Sequence[str] = (),
    binds: Mapping[Path, str] = {},
    read_only: Mapping[Path, str] = {},
    env: Mapping[str, str] = {},
    network: bool = False,
    cwd: str = "/",
    timeout: float = PACK_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run `sh -c script` in a one-command container of `root` (no boot, no systemd).

    With `network` it shares the host's network and name resolution (the build machine);
    without, it has none at all.
    """
    argv = [
        *("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--timezone=off"),
        *("--link-journal=no", f"--directory={root}", f"--machine=charm-build-{os.getpid()}"),
        f"--chdir={cwd}",
        "--resolv-conf=bind-host" if network else "--private-network",
        *(f"--bind={host}:{inside}" for host, inside in binds.items()),
        *(f"--bind-ro={host}:{inside}" for host, inside in read_only.items()),
        *(f"--setenv={key}={value}" for key, value in {"PATH": MACHINE_PATH, **env}.items()),
        *("--", "/bin/sh", "-c", script, "sh", *args),
    ]
    environment = {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
    try:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout}s in the build machine: {script}") from e


def succeeded(
    result: subprocess.CompletedProcess[str], failure: str
) -> subprocess.CompletedProcess[str]:
    """Return `result` of `nspawn`; if it failed, raise `failure` with its exit and output."""
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        raise LabError(f"{failure} (exit {result.returncode}):\n{output}")
    return result


def host_tls() -> tuple[dict[Path, str], dict[str, str]]:
    """Return the host's TLS trust and proxy settings (the build machine uses its network)."""
    certs = Path("/etc/ssl/certs")
    read_only = {certs: str(certs)} if certs.is_dir() else {}
    env = {key: os.environ[key] for key in (*TLS_VARIABLES, *PROXY_VARIABLES) if key in os.environ}
    return read_only, env


def _network_env(uv: Path) -> tuple[dict[Path, str], dict[Path, str], dict[str, str]]:
    """Binds and variables of a build machine: uv, its cache, TLS trust, proxies."""
    uv_cache = rootfs.cache_dir() / "uv"
    uv_cache.mkdir(parents=True, exist_ok=True)
    read_only, env = host_tls()
    read_only[uv] = "/usr/local/bin/uv"
    return {uv_cache: "/var/cache/uv"}, read_only, {"UV_CACHE_DIR": "/var/cache/uv", **env}


def builder_key(suite: str, charmcraft: Charmcraft, uv: Path) -> str:
    """Hash what decides the builder layer's content (base recipe, charmcraft, uv, recipe)."""
    return content_key(
        str(BUILDER_VERSION),
        rootfs.recipe_hash(suite),
        charmcraft.version,
        charmcraft.constraints.read_text(),
        _uv_version(uv),
        _SETUP,
    )


def ensure_builder(suite: str, charmcraft: Charmcraft) -> Path:
    """Return the builder layer of `suite` (python3-apt, charmcraft), building it if needed."""
    uv = host_uv()
    base = rootfs.ensure_base(suite=suite)
    layer = charms_cache() / f"builder-{suite}-{builder_key(suite, charmcraft, uv)}"
    if layer.is_dir():
        return layer
    with locked(charms_cache() / ".builder.lock"):
        if layer.is_dir():
            return layer
        scratch = Path(tempfile.mkdtemp(prefix=".builder-", dir=charms_cache()))
        try:
            with overlay([base], scratch) as root:
                binds, read_only, env = _network_env(uv)
                read_only[charmcraft.constraints.resolve()] = "/run/charmcraft-constraints.txt"
                (root / CHARMCRAFT_DIR.lstrip("/")).mkdir(parents=True)
                result = nspawn(
                    root,
                    _SETUP,
                    args=[charmcraft.version],
                    binds=binds,
                    read_only=read_only,
                    env=env,
                    network=True,
                )
            succeeded(result, f"cannot set up the {suite} build machine")
            versions = re.findall(r"charmcraft \S+?(?=\x1b|\s|$)", result.stdout)
            logger.info("build machine for %s ready: %s", suite, versions[-1:])
            (scratch / "upper").rename(layer)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        _prune_layers(suite, keep=layer)
    return layer


def _prune_layers(suite: str, keep: Path) -> None:
    """Remove the suite's older builder layers that no running pack uses."""
    mounts = Path("/proc/mounts").read_text()
    for old in charms_cache().glob(f"builder-{suite}-*"):
        if old != keep and str(old) not in mounts:
            logger.info("removing the outdated build machine layer %s", old)
            shutil.rmtree(old, ignore_errors=True)


def charmcraft_pack(staged: Path, platform: str, suite: str, charmcraft: Charmcraft) -> Path:
    """Pack the staged charm dir for `platform` in `suite`'s build machine; return the .charm.

    Charmcraft runs from inside the staged dir (`source: .` is the charm) in destructive mode
    (the build machine is the build environment) and writes the .charm there (it refuses an
    output directory outside the project).
    """
    layer = ensure_builder(suite, charmcraft)
    base = rootfs.ensure_base(suite=suite)
    uv = host_uv()
    scratch = Path(tempfile.mkdtemp(prefix=".pack-", dir=charms_cache()))
    script = (
        'touch /run/.containerenv; export XDG_RUNTIME_DIR="$(mktemp -d)"; '
        f'exec {CHARMCRAFT_LAB} pack --destructive-mode --platform "$1" --verbose'
    )
    try:
        with overlay([layer, base], scratch) as root:
            binds, read_only, env = _network_env(uv)
            binds[staged.resolve()] = f"/build/{staged.name}"
            result = nspawn(
                root,
                script,
                args=[platform],
                binds=binds,
                read_only=read_only,
                env=env,
                network=True,
                cwd=f"/build/{staged.name}",
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    succeeded(result, f"charmcraft pack of {staged.name} ({platform}, {suite}) failed")
    packed = sorted(staged.glob("*.charm"))
    if len(packed) != 1:
        raise LabError(f"charmcraft pack of {staged.name} wrote {len(packed)} charms: {packed}")
    return packed[0]
