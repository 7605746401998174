"""The Slurm version the charms need, read from the Debian/Ubuntu package version.

A package version is `[epoch:]upstream[-revision]` (`1:25.05.0-1`, `23.11.4-1.2ubuntu5`);
Slurm's upstream part is `major.minor[.micro]`, possibly with a `~rc1`-style pre-release.
The charms render Slurm 24.11 configuration (configless dynamic nodes, data_parser
v0.0.42), so older releases, such as Ubuntu 24.04's own 23.11, are refused. Newer releases
are accepted: 26.05 (Debian testing, data_parser v0.0.45) passes the dynamic-node and
login-node scenarios on the lab (`just integration-newer`).
"""

import re
from dataclasses import dataclass
from typing import Literal

MINIMUM = (24, 11)
"""The oldest Slurm release the charms support, as (major, minor)."""

_UPSTREAM = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:[~+.-].*)?$")


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release: `major.minor.micro` (micro 0 when the package gives none)."""

    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


def parse(package_version: str) -> SlurmVersion:
    """Return the Slurm release of a package version such as `1:24.11.5-1`.

    Raises:
        ValueError: The version does not start (after an epoch) with `major.minor`.

    """
    epoch, colon, text = package_version.strip().partition(":")
    if not colon:
        text = epoch
    elif not epoch.isdigit():
        raise ValueError(f"not a Slurm package version: {package_version!r}")
    upstream = text.rsplit("-", 1)[0]
    match = _UPSTREAM.match(upstream)
    if match is None:
        raise ValueError(f"not a Slurm package version: {package_version!r}")
    major, minor, micro = match.groups()
    return SlurmVersion(int(major), int(minor), int(micro or 0))


def unsupported_reason(package_version: str) -> str | None:
    """Return why the installed `package_version` cannot be used, or None if it can.

    The message says which package source to use instead (for a blocked status).
    """
    needed = ".".join(map(str, MINIMUM))
    try:
        version = parse(package_version)
    except ValueError:
        return f"cannot read the Slurm version from package version {package_version!r}"
    if (version.major, version.minor) >= MINIMUM:
        return None
    return (
        f"Slurm {version} is older than {needed}: set slurm-package-source=ppa "
        f"(ubuntu-hpc PPA) or use an archive with Slurm {needed} or newer"
    )


def auto_source(archive_candidate: str | None) -> Literal["archive", "ppa"]:
    """Return where `slurm-package-source=auto` takes Slurm from.

    `archive_candidate` is the package version the machine's own archive offers (None: it
    has none). The archive wins when its Slurm is supported: Ubuntu 26.04 and Debian 13
    and newer need no PPA, and the PPA may have no build for a newer series. Ubuntu 24.04's
    archive has Slurm 23.11, so there the Ubuntu HPC team's PPA is used.
    """
    if archive_candidate is not None and unsupported_reason(archive_candidate) is None:
        return "archive"
    return "ppa"
