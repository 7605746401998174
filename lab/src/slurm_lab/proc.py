"""The one seam through which the machine layer runs host commands."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence

from slurm_lab.errors import LabError

logger = logging.getLogger(__name__)


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
