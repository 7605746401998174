"""systemd services, adapted from `charmlibs.systemd` with errors mapped to `ServiceError`."""

from collections.abc import Callable, Sequence
from pathlib import Path

from charmlibs import systemd as sd

from hpc_libs.errors import ServiceError, SlurmOpsError
from hpc_libs.machine import files, host


class Service:
    """One systemd service, by unit name (`slurmd` and `slurmd.service` are the same)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Service({self.name!r})"

    def start(self) -> None:
        """Start the service (a no-op for systemd if it is already running)."""
        _call("start", sd.service_start, self.name)

    def stop(self) -> None:
        """Stop the service."""
        _call("stop", sd.service_stop, self.name)

    def restart(self) -> None:
        """Restart the service, starting it if it is stopped."""
        _call("restart", sd.service_restart, self.name)

    def enable(self) -> None:
        """Start the service at boot."""
        _call("enable", sd.service_enable, self.name)

    def disable(self) -> None:
        """Do not start the service at boot."""
        _call("disable", sd.service_disable, self.name)

    def is_active(self) -> bool:
        """Whether the service is running now."""
        return sd.service_running(self.name)


def daemon_reload() -> None:
    """Make systemd read changed unit files and drop-ins."""
    _call("daemon-reload", sd.daemon_reload)


def override_path(service: str, name: str, *, root: Path = Path("/")) -> Path:
    """Path of drop-in `name` for `service`: /etc/systemd/system/<svc>.service.d/<name>.conf."""
    unit = service if "." in service else f"{service}.service"
    return root / "etc/systemd/system" / f"{unit}.d" / f"{name}.conf"


def write_override(service: str, name: str, content: str, *, root: Path = Path("/")) -> bool:
    """Write a drop-in for `service` if its content changed; return whether it changed.

    The caller runs `daemon_reload()` when this returns True.
    """
    return files.write_if_changed(override_path(service, name, root=root), content, mode=0o644)


def run_transient(unit_name: str, argv: Sequence[str], description: str) -> None:
    """Run `argv` in the background as transient unit `unit_name`, collected when it ends.

    Use it for work that outlives a Juju hook (for example waiting for jobs to end).
    """
    try:
        host.run(
            [
                "systemd-run",
                f"--unit={unit_name}",
                "--collect",
                f"--description={description}",
                "--",
                *argv,
            ]
        )
    except SlurmOpsError as e:
        raise ServiceError(
            f"cannot start transient unit {unit_name}",
            command=e.command,
            stderr=e.stderr,
            returncode=e.returncode,
        ) from e


def _call(verb: str, operation: Callable[..., bool], *args: str) -> None:
    """Run `systemctl <verb>` through `charmlibs.systemd`, mapping its error to `ServiceError`."""
    command = ["systemctl", verb, *args]
    try:
        operation(*args)
    except sd.SystemdError as e:
        raise ServiceError(
            f"{' '.join(command)} failed",
            command=command,
            stderr=str(e),
        ) from e
