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

from slurm_lab import rootfs
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

_CHECKER = r"""
import json, os, pwd, shutil, subprocess, sys

KEY = os.urandom(1024)
COMMANDS = {}  # file -> argv, given by slurm_lab.slurmcheck (the commands hpc_libs runs)


def stage(case, work, files):
    # Copy the case's `files` to `work`; the keys the files name are in /etc/slurm.
    os.makedirs(work)
    for name in ("slurm.key", "jwt_hs256.key"):
        with open(os.path.join("/etc/slurm", name), "wb") as f:
            f.write(KEY)
        os.chmod(os.path.join("/etc/slurm", name), 0o600)
    for name in files:
        shutil.copy(os.path.join(case, name), work)
    with open(os.path.join(work, "slurm.key"), "wb") as f:
        f.write(KEY)
    os.chmod(os.path.join(work, "slurm.key"), 0o600)
    return {"SLURM_CONF": os.path.join(work, "slurm.conf"), "PATH": "/usr/sbin:/usr/bin"}


def run(argv, env):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    return p.returncode == 0, p.stderr.strip()


def slurm_conf(case, work):
    env = stage(case, work, ["slurm.conf"])
    return run(COMMANDS["slurm.conf"], env)


def slurmd_files(case, work, present, judged):
    # `slurmd -G`: slurm.conf, then cgroup.conf, then gres.conf (cgroup plugin off for it).
    names = [n for n in ("slurm.conf", "cgroup.conf", "gres.conf") if n in present]
    env = stage(case, work, names)
    if "slurm.conf" not in present:
        with open(env["SLURM_CONF"], "w") as f:
            f.write("ClusterName=check\nSlurmctldHost=check\nAuthType=auth/slurm\nGresTypes=gpu\n")
    if judged == "cgroup.conf":
        ok, out = run(["slurmd", "-G", "-Z", "-N", "check", "--conf", "CPUs=1"], env)
        # A chroot has no cgroup mount: only a refusal naming cgroup.conf is about the file.
        return ok or "cgroup.conf" not in out, out
    with open(os.path.join(work, "cgroup.conf"), "w") as f:
        f.write("CgroupPlugin=disabled\n")
    return run(["slurmd", "-G", "-Z", "-N", "check", "--conf", "CPUs=1"], env)


def slurmdbd_conf(case, work):
    env = stage(case, work, ["slurmdbd.conf"])
    open(env["SLURM_CONF"], "w").close()
    os.chmod(os.path.join(work, "slurmdbd.conf"), 0o600)
    # ArchiveDir must exist on the machine: make it where the namespace can (under tmpfs).
    with open(os.path.join(work, "slurmdbd.conf")) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key.lower() == "archivedir" and value.startswith("/"):
                try:
                    os.makedirs(value, exist_ok=True)
                except OSError:
                    pass
    slurm = pwd.getpwnam("slurm")
    os.chown(os.path.join(work, "slurmdbd.conf"), slurm.pw_uid, slurm.pw_gid)
    return run(COMMANDS["slurmdbd.conf"], env)


def main(root, commands):
    COMMANDS.update(json.loads(commands))
    verdicts = []
    for n in sorted(os.listdir(root), key=int):
        case = os.path.join(root, n)
        present = set(os.listdir(case))
        found = []
        if "slurm.conf" in present:
            found.append(("slurm.conf", slurm_conf(case, f"/tmp/{n}-ctl")))
        for name in ("cgroup.conf", "gres.conf"):
            # slurmd reads slurm.conf first: a refused one says nothing about the others.
            if name in present and all(ok for _, (ok, _) in found):
                found.append((name, slurmd_files(case, f"/tmp/{n}-{name}", present, name)))
        if "slurmdbd.conf" in present:
            found.append(("slurmdbd.conf", slurmdbd_conf(case, f"/tmp/{n}-dbd")))
        refused = [f"{what}: {out}" for what, (ok, out) in found if not ok]
        said = [f"{what}: {out}" for what, (_, out) in found if out]
        verdicts.append(
            {"accepted": not refused, "messages": "\n".join(refused), "said": "\n".join(said)}
        )
    print(json.dumps(verdicts))


main(sys.argv[1], sys.argv[2])
"""

_SETUP = """
set -e
mount --make-rprivate /
M=$(mktemp -d)
mount --bind "$BASE" "$M"
mount -o remount,bind,ro "$M"
mount --bind "$CASES" "$M/mnt"
mount -o remount,bind,ro "$M/mnt"
mount -t proc proc "$M/proc"
mount --bind /dev "$M/dev"
for d in run tmp var/tmp var/log var/spool var/lib/slurm etc/slurm; do
    mount -t tmpfs tmpfs "$M/$d"
done
mkdir -p "$M/var/log/slurm" "$M/var/spool/slurmd" "$M/run/slurm"
exec chroot "$M" python3 /mnt/check.py /mnt/cases "$COMMANDS"
"""


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
        (root / "check.py").write_text(_CHECKER)
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
            ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "sh", "-c", _SETUP],
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
