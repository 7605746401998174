"""apt packages and repositories.

`install` first asks dpkg whether every package is already installed and then does
nothing at all, so machines without network access (or with the packages preinstalled)
never run `apt-get update`.

Timeouts: `apt-get update` and `apt-get install` run through `host.run`, bounded by
`UPDATE_TIMEOUT` and `INSTALL_TIMEOUT` (`charmlibs.apt` runs them without one, so it is not
used for them). A `deb` source is still added with `charmlibs.apt`, whose `gpg` and
`dpkg` calls have no timeout; they are local and quick, and no charm adds one today.
It is imported there, when a source is added: every hook imports this module, few add one.
"""

import logging
import subprocess
from collections.abc import Sequence

from hpc_libs.errors import PackageError, SlurmOpsError
from hpc_libs.machine import host

logger = logging.getLogger(__name__)

QUERY_TIMEOUT = 30.0
"""Seconds for a dpkg query."""
REPOSITORY_TIMEOUT = 120.0
"""Seconds for `add-apt-repository` (it fetches the PPA's signing key from Launchpad)."""
UPDATE_TIMEOUT = 300.0
"""Seconds for `apt-get update` (slow mirrors)."""
INSTALL_TIMEOUT = 900.0
"""Seconds for `apt-get install`: downloads and the packages' own scripts."""
LOCK_TIMEOUT = 120
"""Seconds apt waits for the dpkg lock (held by unattended-upgrades, say) before failing."""
_APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
_LOCK_OPTION = f"--option=DPkg::Lock::Timeout={LOCK_TIMEOUT}"
ERROR_ON_ANY = "--error-on=any"
"""`apt-get update` fails when any source cannot be fetched (apt 2.1.16 and later: Debian 12
and 13, Ubuntu 24.04). Without it an unreachable source is only a warning and the update
exits 0: an upgrade against an unreachable mirror would install nothing new and succeed."""


def installed_version(package: str) -> str | None:
    """Return the installed version of `package`, or None if it is not installed."""
    return installed_versions([package]).get(package)


def installed_versions(packages: Sequence[str]) -> dict[str, str]:
    """Return the installed version of each of `packages` that is installed, in one query."""
    if not packages:
        return {}
    result = host.run(
        [
            "dpkg-query",
            "--show",
            "--showformat=${Package} ${db:Status-Status} ${Version}\\n",
            *packages,
        ],
        timeout=QUERY_TIMEOUT,
        check=False,
    )
    found: dict[str, str] = {}
    for line in result.stdout.splitlines():  # an unknown package: nothing, and rc 1
        name, _, rest = line.partition(" ")
        status, _, version = rest.partition(" ")
        if name in packages and status == "installed" and version:
            found[name] = version
    return found


def missing(packages: Sequence[str]) -> list[str]:
    """Return the packages in `packages` that are not installed."""
    installed = installed_versions(packages)
    return [p for p in packages if p not in installed]


def candidate_version(package: str) -> str | None:
    """Return the version apt would install for `package`, or None if no source has it.

    Reads the cache as it is: run `update` first for a fresh answer.
    """
    result = host.run(
        ["apt-cache", "show", "--no-all-versions", package], timeout=QUERY_TIMEOUT, check=False
    )
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        name, sep, value = line.partition(":")
        if sep and name == "Version" and value.strip():
            return value.strip()
    return None


def madison(package: str) -> str:
    """Return `apt-cache madison <package>`: every version the sources offer, one a line.

    Reads the cache as it is: run `update` first for a fresh answer. Empty if none.
    """
    result = host.run(["apt-cache", "madison", package], timeout=QUERY_TIMEOUT, check=False)
    return result.stdout if result.returncode == 0 else ""


def download(packages: Sequence[str]) -> None:
    """Download `packages` at their candidate versions into apt's cache, installing nothing.

    Raises:
        PackageError: The download failed.

    """
    _apt_get(
        ["install", "--yes", "--download-only", _LOCK_OPTION, *packages],
        list(packages),
        timeout=INSTALL_TIMEOUT,
    )


def update(packages: Sequence[str] = ()) -> None:
    """Refresh the package cache (`apt-get update`); `packages` only name the failure.

    Any source that cannot be fetched fails the update (`ERROR_ON_ANY`), so a stale cache
    never passes for a fresh one.

    Raises:
        PackageError: The cache update failed, or a source could not be fetched.

    """
    _apt_get(["update", ERROR_ON_ANY, _LOCK_OPTION], list(packages), timeout=UPDATE_TIMEOUT)


def install(packages: Sequence[str], *, upgrade: bool = False, refresh: bool = True) -> bool:
    """Install `packages`; return whether apt ran.

    Packages already installed are skipped, unless `upgrade`: then every package is
    installed at the candidate version of the refreshed cache. Without `refresh` the cache
    is not updated first (the caller just did).

    Raises:
        PackageError: The cache update or an installation failed.

    """
    todo = list(packages) if upgrade else missing(packages)
    if not todo:
        logger.debug("packages already installed: %s", list(packages))
        return False
    logger.info("installing %s", todo)
    if refresh:
        update(todo)
    _apt_get(["install", "--yes", _LOCK_OPTION, *todo], todo, timeout=INSTALL_TIMEOUT)
    return True


def _apt_get(args: list[str], packages: list[str], *, timeout: float) -> None:
    """Run `apt-get <args>` non-interactively; map its failure to PackageError."""
    try:
        host.run(["apt-get", *args], timeout=timeout, env=_APT_ENV)
    except SlurmOpsError as e:
        doing = f"install {' '.join(packages)}" if packages else "update the apt cache"
        raise PackageError.restated(f"cannot {doing}", e) from e


def add_repository(source: str, *, key: str | None = None) -> None:
    """Add a package repository without updating the cache (`install` updates it).

    Args:
        source: A PPA (`ppa:ubuntu-hpc/slurm-wlm-24.11`, Ubuntu only) or a one-line
            `deb ...` source.
        key: ASCII-armored signing key for a `deb` source (PPAs fetch their own key).

    Raises:
        PackageError: The repository or its key could not be added.

    """
    if source.startswith("ppa:"):
        try:
            host.run(
                ["add-apt-repository", "--yes", "--no-update", source], timeout=REPOSITORY_TIMEOUT
            )
        except SlurmOpsError as e:
            raise PackageError.restated(f"cannot add {source}", e) from e
        return
    from charmlibs import apt  # noqa: PLC0415 (see the module's docstring)

    try:
        repository = apt.DebianRepository.from_repo_line(source)
        if key:
            repository.import_key(key)
    except subprocess.CalledProcessError as e:
        raise _command_failed(f"cannot add {source}", e) from e
    except (apt.InvalidSourceError, apt.GPGKeyError) as e:
        raise PackageError(f"cannot add {source}", stderr=e.message) from e


def _command_failed(message: str, error: subprocess.CalledProcessError) -> PackageError:
    """Map a failed apt command run by charmlibs-apt to a PackageError carrying its stderr."""
    return PackageError(
        message,
        command=[str(a) for a in error.cmd],
        stderr=host.output_text(error.stderr),
        returncode=error.returncode,
    )
