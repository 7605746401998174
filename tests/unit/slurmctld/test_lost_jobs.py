"""Scenarios for the jobs a takeover lost (issue 37, item 3): found, kept, reported, resubmitted.

The unit (ctl0) is backup1 of the leader's slurm.conf (ctl9 primary). Its slurmctld took
control `TOOK` seconds ago (its heartbeat, the primary watch's signal file); the dead
primary left batch directories in the shared StateSaveLocation, as slurmctld writes them:
`hash.<id % 10>/job.<id>/{script,environment}`, the environment a count and NUL-terminated
strings.
"""

import json
import os
import pwd
import struct
import time
from pathlib import Path

import pytest
from hpc_libs.machine import host
from ops import testing
from scenario.state import _Event
from test_ha_charm import backup, leader_wrote
from test_slurmctld_accounting_and_jwt import DBD, slurmdbd_relation

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

STATE = "var/lib/slurm/checkpoint/slurmctld"
KEPT = "var/lib/slurmctld-charm/lost-jobs"
TOOK = 20
KNOWN = ("squeue", "--all", "--noheader", "--states=all")
SACCT = ("sacct", "--noheader", "--allocations", "--duplicates", "--parsable2")
INVALID = "slurm_load_jobs error: Invalid job id specified"
SCRIPT = b"#!/bin/bash\n#SBATCH --time=5\nsrun hostname\n"
ENVIRONMENT = [b"HOME=/home/alice", b"USER=root", b"PATH=/usr/bin"]
ALICE = pwd.struct_passwd(("alice", "x", 1001, 1001, "", "/home/alice", "/bin/bash"))


@pytest.fixture
def lost_jobs_module():
    import lost_jobs

    return lost_jobs


@pytest.fixture
def slurm_owns_what_the_test_writes(lost_jobs_module, monkeypatch):
    """SlurmUser is whoever runs the test: the files it writes are SlurmUser's."""
    monkeypatch.setattr(lost_jobs_module, "uid_of", lambda user: os.getuid())


@pytest.fixture
def took_control(tmp_path, shared_fs, slurm_owns_what_the_test_writes) -> float:
    """ctl0 (backup1) took control `TOOK` s ago: its fresh heartbeat, slurmctld's signal."""
    leader_wrote(shared_fs)
    now = time.time()
    beat = tmp_path / STATE / "heartbeat"
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_bytes(struct.pack(">QQ", int(now), 1))
    signal = tmp_path / "run/slurmctld-charm/primary-changed"
    signal.parent.mkdir(parents=True, exist_ok=True)
    signal.write_text("\n")
    os.utime(signal, (now - TOOK, now - TOOK))
    return now - TOOK


def batch_dir(tmp_path: Path, job_id: int, *, age: float = TOOK + 3, name: str = "") -> Path:
    """The batch directory slurmctld wrote for `job_id`, `age` seconds ago."""
    job = tmp_path / STATE / f"hash.{job_id % 10}" / (name or f"job.{job_id}")
    job.mkdir(parents=True)
    (job / "script").write_bytes(SCRIPT + b"\0")  # slurmctld writes the terminator.
    environment = struct.pack("=I", len(ENVIRONMENT)) + b"".join(e + b"\0" for e in ENVIRONMENT)
    (job / "environment").write_bytes(environment)
    when = time.time() - age
    for path in (job / "script", job / "environment"):
        os.utime(path, (when, when))
    return job


def controller_knows(machine, *ids: int, listed: tuple[int, ...] | None = None) -> None:
    """slurmctld holds `ids` (squeue lists `listed`, default all); it knows no other below 100."""
    listed = ids if listed is None else listed
    machine.responses[KNOWN] = "".join(f"{i}\n" for i in listed)
    for job_id in ids:
        record = {"meta": META_24_11, "jobs": [{"job_id": job_id, "job_state": ["PENDING"]}]}
        machine.responses[("scontrol", "show", "job", str(job_id))] = json.dumps(record)
    for other in set(range(1, 100)) - set(ids):
        machine.fail("scontrol", "show", "job", str(other), returncode=1, stderr=INVALID)


def kept(tmp_path: Path) -> list[str]:
    where = tmp_path / KEPT
    return sorted(os.listdir(where)) if where.exists() else []


def test_after_a_takeover_a_job_the_controller_does_not_know_is_kept_and_reported(
    ctx, machine, tmp_path, took_control, caplog
):
    batch_dir(tmp_path, 7)
    batch_dir(tmp_path, 12)
    controller_knows(machine, 12)

    out = ctx.run(_Event("slurmctld_wake"), backup())

    [name] = kept(tmp_path)
    assert name.startswith("7-")
    copy = tmp_path / KEPT / name
    assert (copy / "script").read_bytes() == SCRIPT + b"\0"
    assert (copy / "environment").read_bytes() == (
        tmp_path / STATE / "hash.7/job.7/environment"
    ).read_bytes()
    assert os.stat(copy).st_mode & 0o777 == 0o700
    assert os.stat(copy / "script").st_mode & 0o777 == 0o600
    assert out.unit_status == testing.ActiveStatus("1 lost job(s): juju run slurmctld/0 lost-jobs")
    assert any("lost job 7 " in r.getMessage() for r in caplog.records)
    asked = [c[3] for c in machine.ran("scontrol", "show", "job")]
    assert asked == ["7"]  # The job squeue listed is not asked again.


def test_a_job_the_controller_knows_is_not_reported(ctx, machine, tmp_path, took_control):
    """squeue's list missed it (it came after), but slurmctld's own record says it knows it."""
    batch_dir(tmp_path, 7)
    controller_knows(machine, 7, listed=())

    out = ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []
    assert "lost job" not in out.unit_status.message


def test_a_directory_written_after_the_takeover_is_not_a_lost_job(
    ctx, machine, tmp_path, took_control
):
    batch_dir(tmp_path, 7, age=TOOK - 5)
    controller_knows(machine)

    ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []


def test_a_script_that_is_a_link_is_not_followed(ctx, machine, tmp_path, took_control):
    """SlurmUser could point `script` at any file: it is not read, the job is not kept."""
    job = batch_dir(tmp_path, 7)
    elsewhere = tmp_path / "elsewhere"
    (job / "script").rename(elsewhere)
    (job / "script").symlink_to(elsewhere)
    controller_knows(machine)

    ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []


def test_a_job_directory_that_is_a_link_is_not_followed(ctx, machine, tmp_path, took_control):
    real = batch_dir(tmp_path, 17)
    (tmp_path / STATE / "hash.7/job.7").symlink_to(real)
    controller_knows(machine, 17)

    ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []


def test_files_not_slurmusers_are_not_a_lost_job(
    ctx, machine, tmp_path, took_control, *, lost_jobs_module, monkeypatch
):
    batch_dir(tmp_path, 7)
    controller_knows(machine)
    monkeypatch.setattr(lost_jobs_module, "uid_of", lambda user: os.getuid() + 1)

    ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []


def test_the_primary_and_a_backup_not_in_charge_look_for_nothing(
    ctx, machine, tmp_path, took_control
):
    batch_dir(tmp_path, 7)
    controller_knows(machine)
    beat = tmp_path / STATE / "heartbeat"
    beat.write_bytes(struct.pack(">QQ", int(time.time()), 0))  # ctl9 is in charge.

    ctx.run(_Event("slurmctld_wake"), backup())

    assert kept(tmp_path) == []
    assert machine.ran(*KNOWN) == []


def sacct_says(machine, job_id: int, *records: str) -> None:
    machine.responses[("sacct", *SACCT[1:], f"--jobs={job_id}")] = "".join(
        f"{r}\n" for r in records
    )


def test_with_accounting_a_job_that_ended_is_not_lost_and_the_user_comes_from_sacct(
    ctx, machine, tmp_path, took_control
):
    seven, eight = batch_dir(tmp_path, 7), batch_dir(tmp_path, 8)
    controller_knows(machine)
    submitted = int(os.stat(seven / "script").st_mtime)
    sacct_says(
        machine, 7, f"7|1001|{submitted}|Unknown", f"7|0|{submitted - 9000}|{submitted - 8000}"
    )
    sacct_says(machine, 8, f"8|1001|{int(os.stat(eight / 'script').st_mtime)}|{submitted + 1}")

    ctx.run(_Event("slurmctld_wake"), backup(slurmdbd_relation(DBD)))

    [name] = kept(tmp_path)
    assert name.startswith("7-")
    meta = json.loads((tmp_path / KEPT / name / "meta.json").read_text())
    assert meta["uid"] == 1001


def test_without_an_answer_from_accounting_nothing_is_kept_until_the_next_hook(
    ctx, machine, tmp_path, took_control
):
    batch_dir(tmp_path, 7)
    controller_knows(machine)
    machine.fail("sacct", returncode=1, stderr="sacct: error: Problem talking to the database")

    out = ctx.run(_Event("slurmctld_wake"), backup(slurmdbd_relation(DBD)))

    assert kept(tmp_path) == []
    assert out.unit_status == testing.WaitingStatus(
        "cannot look for lost jobs yet: sacct: error: Problem talking to the database"
    )
    machine.heal()
    controller_knows(machine)
    sacct_says(machine, 7)

    ctx.run(_Event("slurmctld_wake"), out)

    assert len(kept(tmp_path)) == 1


def keep_lost_job(ctx, machine, tmp_path, uid: int | None = 1001) -> testing.State:
    """A takeover kept job 7, its user proven (`uid`) or not."""
    job = batch_dir(tmp_path, 7)
    controller_knows(machine)
    relations = []
    if uid is not None:
        sacct_says(machine, 7, f"7|{uid}|{int(os.stat(job / 'script').st_mtime)}|Unknown")
        relations.append(slurmdbd_relation(DBD))
    out = ctx.run(_Event("slurmctld_wake"), backup(*relations))
    machine.commands.clear()
    return out


@pytest.fixture
def alice(lost_jobs_module, monkeypatch):
    """uid 1001 is alice on this machine (the stage's files are given to her)."""
    real = pwd.getpwuid
    monkeypatch.setattr(
        lost_jobs_module.pwd, "getpwuid", lambda uid: ALICE if uid == 1001 else real(uid)
    )
    given: list[tuple[int, int]] = []
    monkeypatch.setattr(
        lost_jobs_module.os, "fchown", lambda fd, uid, gid: given.append((uid, gid))
    )
    return given


def test_the_action_lists_the_lost_jobs(ctx, machine, tmp_path, took_control, alice):
    state = keep_lost_job(ctx, machine, tmp_path)

    ctx.run(ctx.on.action("lost-jobs"), state)

    [(key, job)] = [(k, v) for k, v in ctx.action_results.items() if k.startswith("job-")]
    assert job["id"] == "7"
    assert job["user"] == "alice (uid 1001)"
    assert job["script"] == str(tmp_path / KEPT / key.removeprefix("job-") / "script")
    assert ctx.action_results["count"] == 1
    assert machine.ran("sbatch") == [] and machine.ran("setpriv") == []  # Listing only.


def test_resubmit_runs_sbatch_as_the_user_from_the_kept_files(
    ctx, machine, tmp_path, took_control, *, alice, monkeypatch
):
    state = keep_lost_job(ctx, machine, tmp_path)
    staged: dict[str, bytes] = {}

    def sbatch_reads(argv, **kwargs):
        if argv[0] == "setpriv":  # What sbatch reads, while it runs.
            staged["script"] = Path(argv[-1]).read_bytes()
            staged["environment"] = Path(argv[-3].removeprefix("--export-file=")).read_bytes()
        return machine.run(argv, **kwargs)

    monkeypatch.setattr(host, "run", sbatch_reads)
    machine.responses[("setpriv",)] = "42\n"

    out = ctx.run(ctx.on.action("lost-jobs", params={"resubmit": True}), state)

    [run] = machine.ran("setpriv")
    assert run[:6] == [
        "setpriv",
        "--reuid=1001",
        "--regid=1001",
        "--init-groups",
        "--reset-env",
        "--",
    ]
    assert run[6:8] == ["sbatch", "--parsable"]
    assert "--chdir=/home/alice" in run
    assert staged == {"script": SCRIPT, "environment": b"".join(e + b"\0" for e in ENVIRONMENT)}
    assert (1001, 1001) in alice
    [job] = [v for k, v in ctx.action_results.items() if k.startswith("job-")]
    assert job["resubmit"]["new-id"] == "42"
    assert "working directory" in json.dumps(job["resubmit"]["not-recovered"])
    assert "lost job" not in out.unit_status.message  # Resubmitted: no longer waiting.
    assert not list((tmp_path / KEPT).glob(".resubmit-*"))  # The stage is gone.


def test_a_job_whose_user_is_unproven_is_not_resubmitted(
    ctx, machine, tmp_path, took_control, alice
):
    state = keep_lost_job(ctx, machine, tmp_path, uid=None)

    ctx.run(ctx.on.action("lost-jobs", params={"resubmit": True}), state)

    [job] = [v for k, v in ctx.action_results.items() if k.startswith("job-")]
    assert job["user"] == "unproven (no accounting record)"
    assert "unproven" in job["resubmit"]["refused"]
    assert machine.ran("setpriv") == [] and machine.ran("sbatch") == []


def test_roots_job_is_not_resubmitted(ctx, machine, tmp_path, took_control, alice):
    state = keep_lost_job(ctx, machine, tmp_path, uid=0)

    ctx.run(ctx.on.action("lost-jobs", params={"resubmit": True}), state)

    [job] = [v for k, v in ctx.action_results.items() if k.startswith("job-")]
    assert "root" in job["resubmit"]["refused"]
    assert machine.ran("setpriv") == [] and machine.ran("sbatch") == []


def test_a_copy_is_removed_after_the_retention(
    ctx, machine, tmp_path, took_control, lost_jobs_module
):
    state = keep_lost_job(ctx, machine, tmp_path, uid=None)
    [name] = kept(tmp_path)
    meta_path = tmp_path / KEPT / name / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["saved"] -= lost_jobs_module.RETENTION_DAYS * 86400 + 1
    meta_path.write_text(json.dumps(meta))

    out = ctx.run(ctx.on.update_status(), state)

    assert kept(tmp_path) == []
    assert "lost job" not in out.unit_status.message


def test_later_hooks_keep_one_copy_and_keep_reporting_it(ctx, machine, tmp_path, took_control):
    state = keep_lost_job(ctx, machine, tmp_path, uid=None)
    machine.commands.clear()

    out = ctx.run(ctx.on.update_status(), state)

    assert len(kept(tmp_path)) == 1
    assert machine.ran(*KNOWN) == []  # The look after this takeover is done.
    assert out.unit_status == testing.ActiveStatus("1 lost job(s): juju run slurmctld/0 lost-jobs")


def test_the_action_fails_for_a_job_it_does_not_keep(ctx, machine, tmp_path, took_control):
    state = keep_lost_job(ctx, machine, tmp_path, uid=None)

    with pytest.raises(testing.ActionFailed, match="no lost job 8 is kept on this unit"):
        ctx.run(ctx.on.action("lost-jobs", params={"id": 8, "resubmit": True}), state)

    assert machine.ran("setpriv") == []
