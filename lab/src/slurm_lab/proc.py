"""The one seam through which the machine layer runs host commands."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_lab.errors import LabError

logger = logging.getLogger(__name__)


def start_time(pid: int) -> int:
    """Return when pid started (clock ticks since the host booted); 0 if it runs no more.

    With the PID it names one process: the host hands PIDs out again (32768 of them here, a
    few minutes of CI), so a PID alone may name a stranger. A zombie counts as gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rsplit(")", 1)[1].split()
    return 0 if fields[0] == "Z" else int(fields[19])


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float | None = 120,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a host command, capturing text output.

    Raises LabError when the binary is missing, on timeout, and (with check) on a non-zero exit;
    the message carries the command's stderr.
    """
    logger.debug("run: %s", " ".join(argv))
    try:
        result = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError as e:
        raise LabError(f"command not found: {argv[0]}") from e
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from e
    if check and result.returncode != 0:
        raise LabError(
            f"command failed ({result.returncode}): {' '.join(argv)}: {result.stderr.strip()}"
        )
    return result
