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

_DOWNLOAD = programs.text("debs-download.sh")


def ensure_debs() -> Path:
    """Return the cached directory of .deb files, downloading them if needed."""
    key = builder.content_key(str(DEBS_VERSION), rootfs.recipe_hash(SUITE), _DOWNLOAD, *PACKAGES)
    return builder.cached_build(rootfs.cache_dir(), "debs-directory", key, _downloaded)


def _downloaded(scratch: Path) -> Path:
    out = scratch / "debs"
    out.mkdir()
    output = builder.download_debs(
        SUITE, _DOWNLOAD, PACKAGES, out, scratch / "overlay", what="the directory packages"
    )
    if not any(out.glob("sssd-ldap_*.deb")) or not any(out.glob("slapd_*.deb")):
        raise LabError(f"apt downloaded no slapd or sssd-ldap:\n{output}")
    return out


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
