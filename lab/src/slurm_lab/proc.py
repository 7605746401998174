"""The one seam through which the machine layer runs host commands."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_lab.errors import LabError

logger = logging.getLogger(__name__)


PF_EXITING = 0x4
"""The kernel's flag (in /proc/PID/stat's flags) of a process whose exit has begun."""


def start_time(pid: int) -> int:
    """Return when pid started (clock ticks since the host booted); 0 if it runs no more.

    With the PID it names one process: the host hands PIDs out again (32768 of them here, a
    few minutes of CI), so a PID alone may name a stranger. A zombie counts as gone, and so
    does a process already exiting: a container's killed init lingers in that state (still
    `S`) until every process of its PID namespace is reaped.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z" or int(fields[6]) & PF_EXITING:
        return 0
    return int(fields[19])


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


RESUME_POLL = 0.5
"""Seconds between looks at a command `run_resumed` runs, for a stop to undo."""


def run_resumed(
    argv: Sequence[str], *, input: str | None = None, timeout: float | None = 120
) -> subprocess.CompletedProcess[str]:
    """Run a host command as `run` does (no check), resuming it whenever it stops.

    For nsenter into a machine's PID namespace: it forks, and when its child stops it stops
    itself and waits for a SIGCONT to pass on. systemd's shutdown stops every process of the
    machine (SIGSTOP, then SIGTERM and SIGCONT to them only), so a command running while a
    machine reboots left nsenter stopped until the caller's timeout.
    """
    logger.debug("run: %s", " ".join(argv))
    deadline = None if timeout is None else time.monotonic() + timeout
    stdin = subprocess.PIPE if input is not None else None
    try:
        proc = subprocess.Popen(
            list(argv), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except FileNotFoundError as e:
        raise LabError(f"command not found: {argv[0]}") from e
    with proc:
        while True:
            wait = (
                RESUME_POLL if deadline is None else min(RESUME_POLL, deadline - time.monotonic())
            )
            try:
                out, err = proc.communicate(input, timeout=max(wait, 0.0))
                break
            except subprocess.TimeoutExpired:
                input = None  # sent with the first call
                if deadline is not None and time.monotonic() >= deadline:
                    proc.kill()
                    proc.communicate()
                    raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from None
                if _stopped(proc.pid):
                    os.kill(proc.pid, signal.SIGCONT)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"
