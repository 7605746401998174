"""The one error hierarchy of `hpc_libs`.

Everything this library raises on purpose derives from `HpcLibsError`::

    HpcLibsError
    ├── SlurmOpsError          an operation on the machine or on Slurm failed
    │   ├── PackageError       installing packages or adding a repository failed
    │   ├── ServiceError       a systemd operation failed
    │   └── ScontrolError      an `scontrol` command failed or printed unusable output
    ├── ConfigError            operator input is invalid (also a `ValueError`)
    └── IntegrationError       integration data or a shared secret is not available yet

Lower-level errors (`subprocess.CalledProcessError`, `OSError`, library errors) are
mapped at the boundary with `raise ... from e`, so callers catch only these types.
"""

from collections.abc import Sequence
from typing import Self


class HpcLibsError(Exception):
    """Root of every error raised by `hpc_libs`."""


class SlurmOpsError(HpcLibsError):
    """An operation on the machine or on Slurm failed.

    Attributes:
        message: What failed, for logs and status messages.
        command: The argv that failed, if a command was run.
        stderr: The command's standard error (empty if none).
        returncode: The command's exit status, if it exited.
        timed_out: The command was killed because it ran longer than its timeout; a charm
            reports that as waiting (the next event tries again) rather than blocked.

    """

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] | None = None,
        stderr: str = "",
        returncode: int | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.command: list[str] | None = list(command) if command is not None else None
        self.stderr = stderr
        self.returncode = returncode
        self.timed_out = timed_out

    @classmethod
    def restated(cls, message: str, error: "SlurmOpsError", *, stderr: bool = True) -> Self:
        """Say what failed in the caller's words, keeping `error`'s command, status and stderr.

        `stderr=False` drops the command's stderr (when `message` already says why).
        """
        return cls(
            message,
            command=error.command,
            stderr=error.stderr if stderr else "",
            returncode=error.returncode,
            timed_out=error.timed_out,
        )

    def __str__(self) -> str:
        if self.stderr:
            return f"{self.message}: {self.stderr.strip()}"
        return self.message

    def status_message(self) -> str:
        """One line for a unit status: the message and the last line of stderr, if any."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return f"{self.message}: {lines[-1]}" if lines else self.message


class PackageError(SlurmOpsError):
    """Installing packages or adding a package repository failed."""


class ServiceError(SlurmOpsError):
    """A systemd operation (start, stop, daemon-reload, ...) failed.

    When a daemon fails to start or restart, `message` carries the daemon's own reason
    (its last fatal journal line), e.g. "slurmd cannot start: fatal: Hybrid mode is not
    supported ...".
    """


class ScontrolError(SlurmOpsError):
    """An `scontrol` command failed or printed output that could not be parsed."""


class ConfigError(HpcLibsError, ValueError):
    """Operator-supplied configuration is invalid.

    Attributes:
        key: The offending configuration key (empty if the input could not be split into keys).
        message: Why the input is invalid.

    """

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.key = key


class IntegrationError(HpcLibsError):
    """Integration data or a secret it points to is missing or unreadable.

    Raised by interface methods that must return a value (such as the auth key) when the
    other side has not provided it yet; read properties return None instead.
    """
