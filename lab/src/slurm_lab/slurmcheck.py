"""Slurm's own parser judging rendered configuration files on the host, without booting a machine.

The charms let Slurm judge every rendered slurm.conf and slurmdbd.conf before it replaces the
live one (`hpc_libs.slurm.check`). This runs the very same commands with the Slurm of a cached
lab base (`rootfs.ensure_base`: trixie has Slurm 24.11, forky the newer one), so tests and the
fuzz suite (tests/fuzz, hundreds of files per run) can ask real Slurm in seconds. A batch of
cases (each a set of files: slurm.conf, cgroup.conf, gres.conf, slurmdbd.conf) is judged in ONE
private mount, network and PID namespace: the base bound read-only, the cases read-only at
/mnt, tmpfs over the directories Slurm writes (/run, /tmp, /etc/slurm, ...), and a small
script, run by the base's python3, parses each case with Slurm's own programs:

* slurm.conf: `SLURM_CONF=<dir>/slurm.conf scontrol --version`. scontrol reads and checks the
  whole file (every key, range, time and cross check such as FirstJobId <= MaxJobId) and loads
  the client plugins before it looks at its arguments, and exits 1 on a value Slurm refuses;
* slurmdbd.conf: `slurmdbd -V` likewise (the file 0600, owned by the base's slurm user);
* cgroup.conf and gres.conf: `slurmd -G` (print the GRES, exit) reads slurm.conf, then
  cgroup.conf, then gres.conf. A chroot has no cgroup mount, so gres.conf is read with the
  cgroup plugin disabled, and cgroup.conf counts as refused only if slurmd names it.

No daemon runs, no lab machine boots and nothing in the base changes. Needs root (namespaces,
chroot), like the rest of the lab.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_lab import programs, rootfs
from slurm_lab.errors import LabError
from slurm_lab.proc import run

COMMANDS: dict[str, tuple[str, ...]] = {
    "slurm.conf": ("scontrol", "--version"),
    "slurmdbd.conf": ("slurmdbd", "-V"),
}
"""The command that makes Slurm parse each file; hpc_libs.slurm.check runs the same."""
FILES = ("slurm.conf", "cgroup.conf", "gres.conf", "slurmdbd.conf")
"""The files a case may hold."""
BATCH_TIMEOUT = 600
_SLURM_LINE = re.compile(r"\b(?:error|fatal): (?P<message>.*)")


@dataclass(frozen=True)
class Verdict:
    """Whether Slurm accepted every file of a case; what it said of the refused ones, and all."""

    accepted: bool
    messages: str
    said: str
    """Everything Slurm wrote for the case, accepted files included (errors it corrects)."""


class SlurmRefusedError(LabError):
    """Slurm refuses a file; `messages` are Slurm's own error and fatal lines."""

    def __init__(self, file: str, messages: list[str]) -> None:
        super().__init__(f"Slurm refuses this {file}: {'; '.join(messages)}")
        self.file = file
        self.messages = messages


def judge(cases: Sequence[Mapping[str, str]], base: Path) -> list[Verdict]:
    """Return Slurm's verdict on each case (a mapping of file name to content), in order.

    Raises:
        LabError: A case names a file Slurm is not asked about, or the batch itself failed.

    """
    if not cases:
        return []
    with tempfile.TemporaryDirectory(prefix="slurmcheck-") as tmp:
        root = Path(tmp)
        (root / "check.py").write_text(programs.text("slurmcheck_check.py"))
        for number, case in enumerate(cases):
            unknown = set(case) - set(FILES)
            if unknown:
                raise LabError(f"slurmcheck cannot judge {sorted(unknown)}")
            folder = root / "cases" / str(number)
            folder.mkdir(parents=True)
            for name, text in case.items():
                (folder / name).write_text(text)
        os.chmod(root, 0o755)
        result = run(
            [
                "unshare",
                "--mount",
                "--net",
                "--pid",
                "--fork",
                "--kill-child",
                *programs.sh("slurmcheck-setup.sh"),
            ],
            env={
                **os.environ,
                "BASE": str(base),
                "CASES": str(root),
                "COMMANDS": json.dumps(COMMANDS),
            },
            timeout=BATCH_TIMEOUT,
        )
    verdicts = json.loads(result.stdout)
    return [Verdict(v["accepted"], v["messages"], v["said"]) for v in verdicts]


def check(text: str, file: str = "slurm.conf", *, suite: str | None = None) -> Verdict:
    """Return Slurm's verdict on `text` as `file` (the Slurm of `suite`'s base) if it accepts it.

    Raises:
        SlurmRefusedError: Slurm refuses the file; its `error:` and `fatal:` lines say why.
        LabError: `file` has no check, or the base cannot be built or entered.

    """
    if file not in COMMANDS:
        raise LabError(f"no Slurm check for {file}: use one of {', '.join(COMMANDS)}")
    (verdict,) = judge([{file: text}], rootfs.ensure_base(suite=suite))
    if not verdict.accepted:
        raise SlurmRefusedError(file, slurm_messages(verdict.messages) or [verdict.messages])
    return verdict


def slurm_messages(stderr: str) -> list[str]:
    """Slurm's `error:` and `fatal:` lines, without the program name or time stamp before them."""
    return [m["message"].strip() for m in map(_SLURM_LINE.search, stderr.splitlines()) if m]


def available() -> str | None:
    """Why the check cannot run on this host (not root, no unshare/chroot); None if it can."""
    if os.geteuid() != 0:
        return "the real-Slurm check needs root (namespaces and chroot)"
    missing = [tool for tool in ("unshare", "chroot") if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None
