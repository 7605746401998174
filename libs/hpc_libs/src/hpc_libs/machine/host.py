"""The single seam through which `hpc_libs` runs commands on the machine.

Unit tests replace `run` (for example with `monkeypatch.setattr(host, "run", fake)`),
so every module calls it as `host.run(...)` rather than importing the function.
"""

import logging
import subprocess
from collections.abc import Sequence

from hpc_libs.errors import SlurmOpsError

logger = logging.getLogger(__name__)


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command and capture its text output.

    Args:
        argv: The command and its arguments; never passed through a shell.
        input: Text written to the command's standard input.
        timeout: Seconds to wait before the command is killed.
        check: Raise if the command exits with a non-zero status.

    Raises:
        SlurmOpsError: The command failed (with `check`), timed out, or does not exist.
            It carries the argv, the exit status and the command's stderr.

    """
    command = list(argv)
    logger.debug("running %s", command)
    try:
        return subprocess.run(
            command, input=input, timeout=timeout, check=check, capture_output=True, text=True
        )
    except subprocess.CalledProcessError as e:
        raise SlurmOpsError(
            f"command {command} failed with exit status {e.returncode}",
            command=command,
            stderr=output_text(e.stderr),
            returncode=e.returncode,
        ) from e
    except subprocess.TimeoutExpired as e:
        raise SlurmOpsError(
            f"command {command} timed out after {timeout} seconds",
            command=command,
            stderr=output_text(e.stderr),
        ) from e
    except FileNotFoundError as e:
        raise SlurmOpsError(
            f"command {command[0]!r} not found", command=command, stderr=str(e)
        ) from e


def output_text(output: str | bytes | None) -> str:
    """Return captured output as text (TimeoutExpired carries bytes even in text mode)."""
    if output is None:
        return ""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output
