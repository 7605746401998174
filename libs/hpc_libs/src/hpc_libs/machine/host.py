"""The single seam through which `hpc_libs` runs commands on the machine.

Unit tests replace `run` (for example with `monkeypatch.setattr(host, "run", fake)`),
so every module calls it as `host.run(...)` rather than importing the function.

Every command is bounded: `run` kills a command after `timeout` seconds (default
`DEFAULT_TIMEOUT`; there is no way to wait forever). Callers state the bound they mean,
`timeout=...`, even when it is the default: the unit tests' fake machine refuses a command
run without one, so a dropped timeout argument fails a test.
"""

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence

from hpc_libs.errors import SlurmOpsError

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
"""Seconds a command may run when its caller states no longer bound (quick queries)."""


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command and capture its text output.

    Args:
        argv: The command and its arguments; never passed through a shell.
        input: Text written to the command's standard input.
        timeout: Seconds to wait before the command is killed (longer for apt, say).
        check: Raise if the command exits with a non-zero status.
        env: Variables added to this process's environment for the command.

    Raises:
        SlurmOpsError: The command failed (with `check`), timed out (`timed_out`), or does
            not exist. It carries the argv, the exit status and the command's stderr.

    """
    command = list(argv)
    if timeout > DEFAULT_TIMEOUT:
        # Announced before it runs, so a hook stuck in it shows what it waits for. Quick
        # queries are not: every log line of a hook is a `juju-log` call (5 ms on the lab).
        logger.debug("running %s (timeout %s s)", command, timeout)
    try:
        return subprocess.run(
            command,
            input=input,
            timeout=timeout,
            check=check,
            capture_output=True,
            text=True,
            env={**os.environ, **env} if env is not None else None,
        )
    except subprocess.CalledProcessError as e:
        raise command_failed(command, e.returncode, output_text(e.stderr)) from e
    except subprocess.TimeoutExpired as e:
        raise command_timed_out(command, timeout, output_text(e.stderr)) from e
    except FileNotFoundError as e:
        raise SlurmOpsError(
            f"command {command[0]!r} not found", command=command, stderr=str(e)
        ) from e


def command_failed(command: list[str], returncode: int, stderr: str) -> SlurmOpsError:
    """Return the error `run` raises when `command` exits with `returncode` (fakes use it)."""
    return SlurmOpsError(
        f"command {command} failed with exit status {returncode}",
        command=command,
        stderr=stderr,
        returncode=returncode,
    )


def command_timed_out(command: list[str], timeout: float, stderr: str = "") -> SlurmOpsError:
    """Return the error `run` raises when `command` is killed after `timeout` seconds."""
    return SlurmOpsError(
        f"command {command} timed out after {timeout:g} seconds",
        command=command,
        stderr=stderr,
        timed_out=True,
    )


def output_text(output: str | bytes | None) -> str:
    """Return captured output as text (TimeoutExpired carries bytes even in text mode)."""
    if output is None:
        return ""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output


USER_TIMEOUT = 30.0
"""Seconds for a user lookup or creation (NSS may ask a directory)."""


def ensure_system_user(name: str) -> bool:
    """Create `name`, a system user and group without login or home, if missing.

    Return whether it was created.

    Raises:
        SlurmOpsError: The user cannot be looked up or created.

    """
    lookup = ["getent", "passwd", name]
    found = run(lookup, timeout=USER_TIMEOUT, check=False)
    if found.returncode == 0:
        return False
    if found.returncode != 2:  # getent: 2 is "not found"; anything else is a failure.
        raise SlurmOpsError(
            f"cannot look up user {name}",
            command=lookup,
            stderr=found.stderr,
            returncode=found.returncode,
        )
    run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        timeout=USER_TIMEOUT,
    )
    return True
