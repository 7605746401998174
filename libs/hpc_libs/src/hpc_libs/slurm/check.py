"""Slurm's own parser judges a rendered configuration file before it replaces the live one.

The grammar (`hpc_libs.slurm.grammar`) checks each value; only Slurm knows everything it
refuses at a restart: cross checks (FirstJobId above MaxJobId, PriorityDecayHalfLife=0
without PriorityUsageResetPeriod, SlurmSchedLogLevel without SlurmSchedLogFile), a PluginDir
that does not exist, a key this Slurm version does not know. So the candidate text is written
to a private directory beside the live file and Slurm reads it there, with no daemon involved:

* slurm.conf: `SLURM_CONF=<dir>/slurm.conf scontrol --version`. scontrol reads and checks the
  whole file and loads the client plugins before it looks at its arguments (`slurm_init`),
  and exits 1 on what slurmctld would refuse at its start;
* slurmdbd.conf: `SLURM_CONF=<dir>/slurm.conf slurmdbd -V`. slurmdbd reads `<dir>/slurmdbd.conf`
  (0600, owned by its SlurmUser, as it demands) before its arguments, and exits 1 on a bad one.

Verified on Slurm 24.11.5 (Debian 13) and 26.05.5 (Debian forky), alike: both catch syntax
and unknown keys, numbers out of their type's range, bad times, enumerations and plugin
names, and the cross checks of read_config.c. They do not catch what only a daemon loads or
opens: a JobCompType or a Prolog that does not exist on the nodes, or a node's hardware. A
value Slurm logs as an error but corrects (TreeWidth=0) exits 0 and is accepted, as
slurmctld accepts it. The lab runs the same commands against its cached bases
(`slurm_lab.slurmcheck`), which tests and the fuzz suite use without booting a machine.
"""

import logging
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, host

logger = logging.getLogger(__name__)

COMMANDS: Mapping[str, tuple[str, ...]] = {
    "slurm.conf": ("scontrol", "--version"),
    "slurmdbd.conf": ("slurmdbd", "-V"),
}
"""The command that makes Slurm read each file, by file name (`SLURM_CONF` points beside it)."""
CHECK_TIMEOUT = 30
"""Seconds Slurm may take to read a file (it takes milliseconds)."""
_SLURM_LINE = re.compile(r"\b(?:error|fatal): (?P<message>.*)")


class SlurmRefusedError(SlurmOpsError):
    """Slurm's parser refuses a rendered file; the live file was kept.

    Attributes:
        file: The file's name (`slurm.conf`, `slurmdbd.conf`).
        reasons: Slurm's own `error:` and `fatal:` lines, naming the live file.

    """

    def __init__(self, file: str, reasons: list[str], *, command: list[str]) -> None:
        summary = "; ".join(_useful(reasons))
        super().__init__(f"Slurm refuses the new {file} (the old one is kept): {summary}")
        self.command = command
        self.file = file
        self.reasons = reasons


def check_with_slurm(text: str, file: str = "slurm.conf", *, directory: Path, owner: str) -> None:
    """Let Slurm read `text` as `file`; return if it accepts it, else raise quoting Slurm.

    The candidate lives in a new root-only directory under `directory` (the live file's, so
    a secret it holds stays where the live one is) and is deleted afterwards. It is written
    0600 and owned by `owner`, as slurmdbd demands of its file. A file it includes by a plain
    name (`relative_includes`) is copied beside it from `directory`, where Slurm reads it.

    Raises:
        SlurmRefusedError: Slurm refuses the file; its message names the live file's path.
        SlurmOpsError: The check could not run (timed out: `timed_out`).
        ValueError: `file` has no check.

    """
    if file not in COMMANDS:
        raise ValueError(f"no Slurm check for {file}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=".slurm-check-", dir=directory))
    except OSError as e:
        raise SlurmOpsError(f"cannot check {file} in {directory}: {e}") from e
    try:
        candidate = workdir / file
        files.write_atomic(candidate, text, mode=0o600, owner=owner)
        for name in relative_includes(text):
            if (included := files.read_bytes(directory / name)) is not None:
                files.write_atomic(workdir / name, included, mode=0o600, owner=owner)
        argv = list(COMMANDS[file])
        result = host.run(
            argv,
            timeout=CHECK_TIMEOUT,
            check=False,
            env={"SLURM_CONF": str(workdir / "slurm.conf")},
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode == 0:
        if result.stderr.strip():
            logger.info("Slurm accepts the new %s, saying: %s", file, result.stderr.strip())
        return
    live = str(directory / file)
    reasons = [r.replace(str(candidate), live) for r in slurm_messages(result.stderr)]
    logger.warning("Slurm refuses the new %s: %s", file, result.stderr.strip())
    raise SlurmRefusedError(file, reasons or [f"exit status {result.returncode}"], command=argv)


def slurm_messages(stderr: str) -> list[str]:
    """Slurm's `error:` and `fatal:` lines, without the program name or time stamp before them."""
    found = (_SLURM_LINE.search(line) for line in stderr.splitlines())
    return [m["message"].strip() for m in found if m]


def _useful(reasons: list[str]) -> list[str]:
    """Slurm's reasons, without its closing "Unable to process ..." when others say why."""
    specific = [r for r in reasons if not r.startswith(("Unable to process", "Could not open"))]
    return specific or reasons


_RELATIVE_INCLUDE = re.compile(r"(?im)^include[ \t]+([A-Za-z0-9._-]+)[ \t]*$")


def relative_includes(text: str) -> list[str]:
    """Return the files `text` includes by a plain name (beside it, as configless needs them).

    Slurm reads such a name in the including file's directory, so the check copies each
    from the live directory beside the candidate. A name starting with a dot is left out.
    """
    return [name for name in _RELATIVE_INCLUDE.findall(text) if not name.startswith(".")]
