"""The jobs a hard-killed slurmctld loses, found by the slurmctld charm's scanner (issue 37, 3).

On the session's controller: jobs submitted more than 6 s before a SIGKILL are saved, the ones
submitted in its last moment are not. slurmctld comes back as a backup (a first
`SlurmctldHost` that is down, as after a takeover), which never purges the batch directories
of jobs it does not know (`sync_job_files`): the charm's scanner (`lost_jobs`) then finds
exactly the submitted ids the controller lost, and one of them, resubmitted through
`lost_jobs.resubmit`, runs again as its user. The lab has no slurmdbd: the user the charm
would prove from accounting is given here. Afterwards slurmctld is the only controller again
(its start as the primary purges the directories).
"""

from __future__ import annotations

import importlib
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from incluster import CONTROLLER, PARTITION, Cluster, wait_for
from slurm_lab.machines import Lab

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "charms" / "slurmctld" / "src"))
lost_jobs = importlib.import_module("lost_jobs")

pytestmark = pytest.mark.lab

USER, UID = "lostjob", 2001
STATE = "/var/lib/slurm/slurmctld"
CONF = "/etc/slurm/slurm.conf"
KEPT = "/var/lib/slurmctld-charm/lost-jobs"
SAVED, LAST = 3, 5
SCRIPT = f"#!/bin/sh\n#SBATCH --partition={PARTITION}\n#SBATCH --output=/tmp/lost-%j.out\nid -un\n"


def as_user(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--init-groups", "--", *argv]


def submit_held(cluster: Cluster, count: int) -> str:
    """A shell loop that submits `count` held jobs as the user and prints their ids."""
    sbatch = " ".join(as_user("sbatch", "--parsable", "--hold", "/tmp/lost.sh"))
    return f"for i in $(seq {count}); do {sbatch}; done"


def submit_held_at_once(count: int) -> str:
    """A shell command that submits `count` held jobs as the user in parallel; their ids."""
    sbatch = " ".join(as_user("sbatch", "--parsable", "--hold", "/tmp/lost.sh"))
    return f"seq {count} | xargs -P {count} -I{{}} {sbatch}"


def known_to_controller(cluster: Cluster) -> set[int]:
    out = cluster.sh(cluster.controller, *lost_jobs.KNOWN_QUERY)
    return lost_jobs.known_ids(out)


def knows(cluster: Cluster, job_id: int) -> bool:
    return cluster.py(
        cluster.controller,
        "from hpc_libs.slurm.scontrol import Scontrol\nresult = Scontrol().knows_job(args['id'])",
        id=job_id,
    )


def test_the_scanner_finds_exactly_the_jobs_a_killed_controller_lost_and_one_reruns(
    cluster: Cluster, lab: Lab, monkeypatch: pytest.MonkeyPatch
):
    ctl = cluster.controller
    for machine in (ctl, *cluster.computes.values()):
        machine.exec(["useradd", "-u", str(UID), "-m", USER], timeout=30)
    ctl.write_file("/tmp/lost.sh", SCRIPT)
    conf = cluster.sh(ctl, "cat", CONF)
    ghost = next(iter(cluster.computes.values())).address  # Nothing listens on 6817 there.
    try:
        saved = {int(i) for i in cluster.sh(ctl, "sh", "-c", submit_held(cluster, SAVED)).split()}
        # No save for more than the 5 s state-save period (SAVE_MAX_WAIT): the jobs above
        # are saved, and the next change is saved at once.
        wait_for(
            "6 s without a state save",
            lambda: time.time() - int(cluster.sh(ctl, "stat", "-c", "%Y", f"{STATE}/job_state")),
            lambda age: age > 6,
            timeout=30,
        )
        ctl.exec(["systemctl", "mask", "slurmctld.service"], timeout=30)
        # slurmctld saves a change at once after a quiet time, then not again for 5 s
        # (SAVE_MAX_WAIT): one held job makes that save, and the burst, in parallel, falls
        # within the next 5 s. One by one after a quiet time, the burst took more than 5 s
        # on a loaded host and the second save took every job (CI28).
        burst = (
            f"{submit_held(cluster, 1)} >/dev/null; sleep 1; {submit_held_at_once(LAST)}; "
            "kill -9 $(systemctl show -p MainPID --value slurmctld)"
        )
        last = {int(i) for i in cluster.sh(ctl, "sh", "-c", burst).split()}
        killed = time.time()
        wait_for("slurmctld to die", lambda: ctl.service_is_active("slurmctld"), lambda a: not a)

        backup = re.sub(
            r"(?im)^(slurmctldhost=.*)$", rf"SlurmctldHost=ghost({ghost})\n\1", conf, count=1
        )
        ctl.write_file(CONF, backup + "SlurmctldTimeout=5\n")
        # A sole controller writes no heartbeat; the backup takes control only after reading
        # the primary's last one (backup.c): the one it would have written at the kill.
        ctl.write_file(f"{STATE}/heartbeat", struct.pack(">QQ", int(killed), 0), mode=0o600)
        cluster.sh(ctl, "chown", "slurm:slurm", f"{STATE}/heartbeat")
        ctl.revive_service("slurmctld")
        wait_for(
            "the backup to take control",
            lambda: ctl.exec(["squeue", "-h", "-j", str(min(saved))], timeout=60).returncode,
            lambda code: code == 0,
            timeout=90,
        )

        known = known_to_controller(cluster)
        assert saved <= known, "jobs saved before the kill must survive it"
        lost = (saved | last) - known
        assert lost, "a job submitted just before the kill must be lost (else nothing is proven)"
        assert lost <= last
        print(f"[lost jobs] {len(lost)} of the {LAST} submitted just before the kill were lost")

        root = lab.host_path(CONTROLLER, "/")
        state = lab.host_path(CONTROLLER, STATE)
        slurm = int(cluster.sh(ctl, "id", "-u", "slurm"))
        ids, whole = lost_jobs.batch_dir_ids(state, under=root, owner=slurm)
        assert whole
        unknown = {i for i in set(ids) - known if not knows(cluster, i)}
        batches = {
            i: lost_jobs.read_batch_dir(state, i, under=root, owner=slurm, before=killed + 1)
            for i in unknown
        }
        assert unknown == lost, (unknown, lost)
        assert all(isinstance(b, lost_jobs.BatchDir) for b in batches.values()), batches
        scripts = {b.script for b in batches.values()}  # type: ignore[union-attr]
        assert scripts == {SCRIPT.encode() + b"\0"}  # slurmctld writes the terminator too.

        # Resubmit one, as the charm's action does, through the machine.
        job_id = min(lost)
        kept_dir = lab.host_path(CONTROLLER, KEPT)
        kept = lost_jobs.keep(kept_dir, batches[job_id], UID, time.time(), under=root)
        entry = cluster.sh(ctl, "getent", "passwd", str(UID)).strip().split(":")
        user = lost_jobs.pwd.struct_passwd((*entry[:2], UID, UID, *entry[4:]))
        monkeypatch.setattr(lost_jobs.pwd, "getpwuid", lambda uid: user)

        def in_machine(argv, **kwargs):
            inside = [str(a).replace(str(root), "") for a in argv]
            proc = ctl.exec(inside, timeout=kwargs.get("timeout", 60))
            assert proc.returncode == 0, proc.stderr
            return subprocess.CompletedProcess(inside, 0, proc.stdout, proc.stderr)

        monkeypatch.setattr(lost_jobs.host, "run", in_machine)
        new_id = lost_jobs.resubmit(kept, kept_dir)

        def state_of() -> str:
            return cluster.sh(ctl, "scontrol", "show", "job", str(new_id), "-o")

        shown = wait_for(
            "the resubmitted job to end", state_of, lambda s: "JobState=COMPLETED" in s, 90
        )
        assert f"UserId={USER}({UID})" in shown
        outputs = [
            m.exec(["cat", f"/tmp/lost-{new_id}.out"], timeout=30).stdout
            for m in cluster.computes.values()
        ]
        assert f"{USER}\n" in outputs
    finally:
        ctl.write_file(CONF, conf)
        ctl.exec(["systemctl", "unmask", "slurmctld.service"], timeout=30)
        ctl.exec(["systemctl", "restart", "slurmctld.service"], timeout=120)
        wait_for(
            "slurmctld to answer as the primary",
            lambda: ctl.exec(["squeue", "-h"], timeout=60).returncode,
            lambda code: code == 0,
            timeout=90,
        )
        ctl.exec(["scancel", "-u", USER], timeout=60)
        for node in cluster.computes:
            cluster.wait_for_node_state(node, "IDLE", timeout=90)
