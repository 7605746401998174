"""Slurm's own parser judging a configuration file on the host, without booting a machine.

The charms let Slurm judge every rendered slurm.conf and slurmdbd.conf before it replaces the
live one (`hpc_libs.slurm.check`). This runs the very same commands with the Slurm of a cached
lab base (`rootfs.ensure_base`: trixie has Slurm 24.11, forky the newer one), so tests and the
fuzz suite can ask real Slurm about thousands of files in seconds:

* slurm.conf: `SLURM_CONF=<dir>/slurm.conf scontrol --version`. scontrol reads and checks the
  whole file (every key, range, time and cross check such as FirstJobId <= MaxJobId) and loads
  the client plugins before it looks at its arguments, and exits 1 on a value Slurm refuses;
* slurmdbd.conf: `SLURM_CONF=<dir>/slurm.conf slurmdbd -V`. slurmdbd reads `<dir>/slurmdbd.conf`
  (which must be 0600 and owned by its SlurmUser) before its arguments, exits 1 on a bad one.

Each check runs in a private mount namespace: the candidate's directory is bound read-only
onto the base's /mnt, then `chroot`. Nothing is written into the base (other labs' machines
use it as their lower layer). Needs root, like the rest of the lab.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from slurm_lab import rootfs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

COMMANDS: dict[str, tuple[str, ...]] = {
    "slurm.conf": ("scontrol", "--version"),
    "slurmdbd.conf": ("slurmdbd", "-V"),
}
"""The command that makes Slurm parse each file; hpc_libs.slurm.check runs the same."""
CHECK_TIMEOUT = 60
_MOUNT_POINT = "mnt"
_SLURM_LINE = re.compile(r"\b(?:error|fatal): (?P<message>.*)")
# $1: the candidate's directory, $2: the base, then the command: `chroot <base> <command...>`.
_SCRIPT = 'mount --bind -o ro "$1" "$2/mnt" && shift && exec chroot "$@"'


class SlurmRefusedError(LabError):
    """Slurm refuses a file; `messages` are Slurm's own error and fatal lines."""

    def __init__(self, file: str, messages: list[str]) -> None:
        super().__init__(f"Slurm refuses this {file}: {'; '.join(messages)}")
        self.file = file
        self.messages = messages


def run_check(
    text: str, file: str = "slurm.conf", *, suite: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run Slurm's check of `text` as `file` with the Slurm of `suite`'s base; return the result.

    Exit status 0 means Slurm accepts the file (it may still log an `error:` it corrects).

    Raises:
        LabError: `file` has no check, or the base cannot be built or entered.

    """
    if file not in COMMANDS:
        raise LabError(f"no Slurm check for {file}: use one of {', '.join(COMMANDS)}")
    base = rootfs.ensure_base(suite=suite)
    uid, gid = _slurm_ids(base)
    with tempfile.TemporaryDirectory(prefix="slurmcheck-") as directory:
        os.chmod(directory, 0o755)
        candidate = Path(directory) / file
        candidate.write_text(text)
        candidate.chmod(0o600)  # slurmdbd refuses a slurmdbd.conf others can read
        os.chown(candidate, uid, gid)
        argv = [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT, "sh"),
            *(directory, str(base)),
            *("env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"),
            f"SLURM_CONF=/{_MOUNT_POINT}/slurm.conf",
            *COMMANDS[file],
        ]
        return run(argv, timeout=CHECK_TIMEOUT, check=False)


def check(text: str, file: str = "slurm.conf", *, suite: str | None = None) -> None:
    """Return if the Slurm of `suite` accepts `text` as `file`; else raise, quoting Slurm.

    Raises:
        SlurmRefusedError: Slurm exits non-zero; its `error:` and `fatal:` lines say why.
        LabError: See `run_check`.

    """
    result = run_check(text, file, suite=suite)
    if result.returncode != 0:
        messages = slurm_messages(result.stderr) or [f"exit status {result.returncode}"]
        raise SlurmRefusedError(file, messages)


def slurm_messages(stderr: str) -> list[str]:
    """Slurm's `error:` and `fatal:` lines, without the program name or time stamp before them."""
    return [m["message"].strip() for m in map(_SLURM_LINE.search, stderr.splitlines()) if m]


def _slurm_ids(base: Path) -> tuple[int, int]:
    """Return the uid and gid of the base's slurm user (slurmdbd wants it to own its file)."""
    for line in (base / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "slurm" and len(fields) > 3:
            return int(fields[2]), int(fields[3])
    raise LabError(f"{base} has no slurm user")
