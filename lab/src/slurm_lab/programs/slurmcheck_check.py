"""Slurm's verdict on each case under /mnt/cases, printed as one JSON list.

Run by the base's python3 in slurm_lab.slurmcheck's chroot (standard library only).
"""

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys

KEY = os.urandom(1024)
COMMANDS = {}  # file -> argv, given by slurm_lab.slurmcheck (the commands hpc_libs runs)


def stage(case, work, files):
    """Copy the case's `files` to `work`; the keys the files name are in /etc/slurm."""
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
    """Run a Slurm command: whether it accepted its files, and what it said."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    return p.returncode == 0, p.stderr.strip()


def slurm_conf(case, work):
    """Judge slurm.conf."""
    env = stage(case, work, ["slurm.conf"])
    return run(COMMANDS["slurm.conf"], env)


def slurmd_files(case, work, present, judged):
    """Judge cgroup.conf or gres.conf with `slurmd -G` (it reads slurm.conf first)."""
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
    """Judge slurmdbd.conf."""
    env = stage(case, work, ["slurmdbd.conf"])
    open(env["SLURM_CONF"], "w").close()
    os.chmod(os.path.join(work, "slurmdbd.conf"), 0o600)
    # ArchiveDir must exist on the machine: make it where the namespace can (under tmpfs).
    with open(os.path.join(work, "slurmdbd.conf")) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key.lower() == "archivedir" and value.startswith("/"):
                with contextlib.suppress(OSError):
                    os.makedirs(value, exist_ok=True)
    slurm = pwd.getpwnam("slurm")
    os.chown(os.path.join(work, "slurmdbd.conf"), slurm.pw_uid, slurm.pw_gid)
    return run(COMMANDS["slurmdbd.conf"], env)


def main(root, commands):
    """Judge every case under `root` with `commands` (JSON: file -> argv)."""
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
