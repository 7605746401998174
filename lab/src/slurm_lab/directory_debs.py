"""Debian's directory packages (slapd, SSSD) for the lab's `ldap` and `sssd` stand-ins.

The base image carries Slurm, MariaDB and Prometheus but no directory service: a package
added to the base changes its recipe, and with it every cached base, builder layer and packed
charm. The directory stand-ins instead install Debian's own packages at run time, as the
real `sssd` charm installs SSSD with apt: the packages and the dependencies the base lacks are
downloaded once, on the host's network, by apt in a one-command container of the trixie base
(the host's Debian archive, `rootfs.debian_mirror`, signature-checked against Debian's
keyring), and cached in `<lab cache>/debs-directory-<key>`. `publish` copies them into the
lab's shared directory, which every machine sees at `/lab/shared`, and a machine installs them
with `apt-get install <files>` (no network, no index: apt resolves the set among the files).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from slurm_lab import builder, programs, rootfs
from slurm_lab.errors import LabError

#: Bump when the download recipe changes meaning.
DEBS_VERSION = 1
SUITE = "trixie"
SERVER_PACKAGES = ("slapd", "ldap-utils")
"""What the `ldap` stand-in installs: OpenLDAP's server and its command-line clients."""
CLIENT_PACKAGES = ("sssd-ldap", "libnss-sss", "libpam-sss")
"""What the `sssd` stand-in installs: SSSD with its LDAP provider, NSS and PAM modules."""
PACKAGES = SERVER_PACKAGES + CLIENT_PACKAGES
SHARED_DIR = "directory-debs"
"""The packages' directory under the lab's shared dir (`/lab/shared/<SHARED_DIR>`)."""
DOWNLOAD_TIMEOUT = 900

_DOWNLOAD = programs.text("debs-download.sh")


def _key() -> str:
    digest = hashlib.sha256()
    for part in (str(DEBS_VERSION), rootfs.recipe_hash(SUITE), _DOWNLOAD, *PACKAGES):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def ensure_debs() -> Path:
    """Return the cached directory of .deb files, downloading them if needed."""
    cache = rootfs.cache_dir()
    target = cache / f"debs-directory-{_key()}"
    if target.is_dir():
        return target
    with builder.locked(cache / ".debs.lock"):
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=".debs-", dir=cache))
        try:
            out = scratch / "debs"
            out.mkdir()
            _download(out, scratch / "overlay")
            out.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for old in cache.glob("debs-directory-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
    return target


def _download(out: Path, scratch: Path) -> None:
    base = rootfs.ensure_base(suite=SUITE)
    read_only, env = builder.host_tls()
    with builder.overlay([base], scratch) as root:
        result = builder.nspawn(
            root,
            _DOWNLOAD,
            args=[rootfs.debian_mirror(), *PACKAGES],
            binds={out: "/out"},
            read_only=read_only,
            env=env,
            network=True,
            timeout=DOWNLOAD_TIMEOUT,
        )
    builder.succeeded(result, "cannot download the directory packages")
    shutil.rmtree(out / "partial", ignore_errors=True)
    (out / "lock").unlink(missing_ok=True)
    if not any(out.glob("sssd-ldap_*.deb")) or not any(out.glob("slapd_*.deb")):
        raise LabError(f"apt downloaded no slapd or sssd-ldap:\n{result.stdout}")


def publish(shared_dir: Path) -> str:
    """Copy the cached packages into the lab's shared dir once; return their machine path."""
    target = shared_dir / SHARED_DIR
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=".debs-", dir=shared_dir))
        for deb in ensure_debs().glob("*.deb"):
            shutil.copy2(deb, staging / deb.name)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another thread published first
    return f"/lab/shared/{SHARED_DIR}"
