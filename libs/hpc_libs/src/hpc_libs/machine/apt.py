"""apt packages and repositories, adapted from `charmlibs.apt`.

`install` first asks dpkg whether every package is already installed and then does
nothing at all, so machines without network access (or with the packages preinstalled)
never run `apt-get update`.
"""

import logging
import subprocess
from collections.abc import Sequence

from charmlibs import apt

from hpc_libs.errors import PackageError, SlurmOpsError
from hpc_libs.machine import host

logger = logging.getLogger(__name__)


def installed_version(package: str) -> str | None:
    """Return the installed version of `package`, or None if it is not installed."""
    result = host.run(
        ["dpkg-query", "--show", "--showformat=${db:Status-Status} ${Version}", package],
        check=False,
    )
    status, _, version = result.stdout.strip().partition(" ")
    if result.returncode != 0 or status != "installed":
        return None
    return version


def missing(packages: Sequence[str]) -> list[str]:
    """Return the packages in `packages` that are not installed."""
    return [p for p in packages if installed_version(p) is None]


def install(packages: Sequence[str]) -> bool:
    """Install `packages`; return whether anything had to be installed.

    Raises:
        PackageError: The cache update or an installation failed.

    """
    todo = missing(packages)
    if not todo:
        logger.debug("packages already installed: %s", list(packages))
        return False
    logger.info("installing %s", todo)
    try:
        apt.update()
        apt.add_package(todo)
    except subprocess.CalledProcessError as e:
        raise _command_failed(f"cannot install {todo}", e) from e
    except (apt.PackageError, apt.PackageNotFoundError) as e:
        raise PackageError(f"cannot install {todo}", stderr=e.message) from e
    return True


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
            host.run(["add-apt-repository", "--yes", "--no-update", source])
        except SlurmOpsError as e:
            raise PackageError(
                f"cannot add {source}", command=e.command, stderr=e.stderr, returncode=e.returncode
            ) from e
        return
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
