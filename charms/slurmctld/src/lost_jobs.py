"""Find the jobs a hard-killed primary accepted but never saved, keep them, offer to resubmit.

slurmctld saves its job state at most every 5 s (`SAVE_MAX_WAIT`); a job accepted in the dead
primary's last seconds is not in the state a backup takes over from (20 of 20 lost on the lab).
Its batch directory is: slurmctld writes `<StateSaveLocation>/hash.<id % 10>/job.<id>/` with
`script` and `environment` when it accepts the job, on the shared filesystem of network state.

When Slurm removes such a directory (job_mgr.c, `sync_job_files`): only a controller that is
first among the `SlurmctldHost`s (`slurmctld_primary`) purges batch directories of jobs it does
not know ("Purged files for defunct batch JobId=<id>"), each time it reads its state: at its
start, and when it takes control back from a backup. A backup in control never purges them
(it only refuses to give their ids to new jobs: "Vestigial state files for JobId=<id>"). So
the directories stay while a backup is in control, and this module copies them in the first
hook on that backup: the hook `SlurmctldPrimaryOnProg` dispatches when it takes control
(`primary_watch`), before placement in that same hook can restart anything.

A directory is a lost job only when everything here proves it (anything else is left alone,
and logged once per scan):

- this unit's slurmctld is in charge as a backup (its heartbeat, index > 0);
- its names are Slurm's: `hash.<n>` and `job.<id>`, the id digits only, no leading zero, at
  most `MAX_JOB_ID`, with `id % 10 == n`;
- every piece is opened without following a link (fds, `O_NOFOLLOW`) and is owned by
  SlurmUser: the directories are directories, `script` and `environment` regular files with a
  single link, at most `MAX_FILE` bytes, framed as slurmctld writes them (`script`: the text
  and one NUL after it; `environment`: a count, then that many NUL-terminated strings);
- `script` was written before this unit's slurmctld took control (a job it accepted itself is
  one it knows);
- the controller does not know the id: not in `squeue`'s list of job and array ids, and
  `scontrol show job <id>` answers "Invalid job id";
- with accounting, sacct answers and has no end for it.

The files' content is the user's text: it is copied byte for byte and handed back to `sbatch`
run as the job's user, never read for anything root acts on. The user comes from accounting
only: sacct's numeric UID of the record with that id submitted within `SUBMIT_SLACK` s of the
script's date. The directory and files are SlurmUser's (they say nothing of the user), and
the environment's `USER=` is whatever the user's shell held. Without that proof the user is
reported as unproven and the job is not resubmitted by the charm.

Each lost job is copied to `KEPT_DIR/<id>-<submitted>/` (root's, 0700), on this unit's disk,
not on the share: root cannot be trusted to own a file on a share mounted with root squashed,
and any client of the share could plant files there. They are kept for `RETENTION_DAYS`,
shown in the status of the unit that found them ("N lost job(s): juju run <unit> lost-jobs")
until resubmitted or expired, and logged one line each. The `lost-jobs` action lists them;
`resubmit=true` (optionally `id=`) submits each with a proven user again as that user
(`setpriv`, no shell) and says which of its options could not be recovered.
"""

import json
import logging
import os
import pwd
import re
import shutil
import stat
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ops
from controllers import SlurmctldComponent
from facts import Facts
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, host
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from primary_watch import SIGNAL_FILE
from takeover import controller_index, fresh_heartbeat, lines, signalled_at, trouble_text

logger = logging.getLogger(__name__)

KEPT_DIR = "/var/lib/slurmctld-charm/lost-jobs"
RETENTION_DAYS = 14
"""Days a lost job's copy is kept (and offered for resubmission) after it was found."""
MAX_JOB_ID = 0xFFFFFFFD
"""The largest id Slurm gives (below its NO_VAL markers)."""
MAX_FILE = 16 << 20
"""Bytes of a `script` or `environment` copied at most; a larger one is not kept."""
MAX_ENTRIES = 100_000
"""Names read per scan in the state directory's `hash.*` directories; the rest wait."""
CONFIRMED_PER_SCAN = 50
"""Unknown ids checked with `scontrol show job` (and sacct) per scan; the rest wait."""
SUBMIT_SLACK = 5
"""Seconds between a job's submit time in accounting and its script's date that still match."""
QUERY_TIMEOUT = 30
SUBMIT_TIMEOUT = 60
KNOWN_QUERY = ["squeue", "--all", "--noheader", "--states=all", "--Format=ArrayJobID:0"]
"""The ids of every job the controller holds: a batch directory is named by the job's id, or
the array's (squeue prints the array's id for each task), one number a line."""
SACCT_FIELDS = ("JobIDRaw", "UID", "Submit", "End")
TIME_FORMAT_ENV = {"SLURM_TIME_FORMAT": "%s"}
NOT_RECOVERED = (
    "sbatch options given on the command line or in SBATCH_* variables (only the script's "
    "#SBATCH lines are kept): partition, time, dependencies, array, output paths, ...",
    "the working directory: the job runs from the user's home directory",
    "the job id: the job gets a new one",
)
_HASH_DIR = re.compile(r"hash\.([0-9])")
_JOB_DIR = re.compile(r"job\.([1-9][0-9]{0,9})")
_DIGITS = re.compile(r"[0-9]{1,10}")
_KEPT_NAME = re.compile(r"([1-9][0-9]{0,9})-([0-9]{1,11})")
_NO_END = ("Unknown", "None", "")
_COUNT = struct.Struct("=I")
"""The environment file's header: the number of strings, as slurmctld's `uint32_t` on disk."""


@dataclass(frozen=True)
class BatchDir:
    """The proven content of one batch directory."""

    job_id: int
    script: bytes
    environment: bytes
    submitted: int
    """The script's date: when slurmctld accepted the job."""


def job_id_of(name: str, hash_index: int) -> int | None:
    """Return the id a `job.<id>` directory in `hash.<hash_index>` names, or None."""
    match = _JOB_DIR.fullmatch(name)
    if match is None:
        return None
    job_id = int(match[1])
    return job_id if job_id <= MAX_JOB_ID and job_id % 10 == hash_index else None


def batch_dir_ids(state_dir: Path, *, under: Path, owner: int) -> tuple[list[int], bool]:
    """List the job ids of the batch directories in `state_dir`; whether the list is whole.

    Only `hash.<n>` directories owned by `owner` are read, no link followed; only entries that
    are directories themselves (as the directory says, not followed) and named as Slurm names
    them are listed. At most `MAX_ENTRIES` names are read.
    """
    ids: list[int] = []
    read = 0
    with files.open_dir(state_dir, under=under) as state_fd:
        for hash_index in range(10):
            hash_fd = _open_owned_dir(f"hash.{hash_index}", state_fd, owner)
            if hash_fd is None:
                continue
            try:
                with os.scandir(hash_fd) as entries:
                    for entry in entries:
                        read += 1
                        if read > MAX_ENTRIES:
                            return ids, False
                        job_id = job_id_of(entry.name, hash_index)
                        if job_id is not None and entry.is_dir(follow_symlinks=False):
                            ids.append(job_id)
            finally:
                os.close(hash_fd)
    return ids, True


def read_batch_dir(
    state_dir: Path, job_id: int, *, under: Path, owner: int, before: float
) -> BatchDir | str:
    """Read job `job_id`'s batch directory if it proves to be one; else say why not."""
    with files.open_dir(state_dir, under=under) as state_fd:
        hash_fd = _open_owned_dir(f"hash.{job_id % 10}", state_fd, owner)
        if hash_fd is None:
            return f"hash.{job_id % 10} is not a directory of SlurmUser's"
        try:
            job_fd = _open_owned_dir(f"job.{job_id}", hash_fd, owner)
        finally:
            os.close(hash_fd)
        if job_fd is None:
            return f"job.{job_id} is not a directory of SlurmUser's"
        try:
            script = _read_owned_file("script", job_fd, owner)
            environment = _read_owned_file("environment", job_fd, owner)
        finally:
            os.close(job_fd)
    for name, read in (("script", script), ("environment", environment)):
        if isinstance(read, str):
            return f"job.{job_id}/{name}: {read}"
    assert not isinstance(script, str) and not isinstance(environment, str)
    (script_data, submitted), (environment_data, _) = script, environment
    if (problem := _content_problem(script_data, environment_data)) is not None:
        return f"job.{job_id}/{problem}"
    if submitted >= before:
        return f"job.{job_id}/script was written after this controller took control"
    return BatchDir(job_id, script_data, environment_data, int(submitted))


def _content_problem(script: bytes, environment: bytes) -> str | None:
    """Say which file is not framed as slurmctld writes it, or return None."""
    if not script_framed(script):
        return "script is not framed as slurmctld writes it"
    if not environment_framed(environment):
        return "environment is not framed as slurmctld writes it"
    return None


def script_framed(data: bytes) -> bool:
    """Whether `data` is a script as slurmctld writes it: its text and one NUL, at the end.

    slurmctld refuses a script holding a NUL, and writes the string with its terminator.
    """
    return data.find(b"\0") == len(data) - 1


def script_text(script: bytes) -> bytes:
    """Return the script as sbatch reads it: without the NUL slurmctld wrote after it."""
    return script.removesuffix(b"\0")


def environment_framed(data: bytes) -> bool:
    """Whether `data` is a count, then exactly that many NUL-terminated strings."""
    if len(data) < _COUNT.size:
        return False
    (count,) = _COUNT.unpack_from(data)
    body = data[_COUNT.size :]
    return body.count(b"\0") == count and (count == 0 or body.endswith(b"\0"))


def export_file(environment: bytes) -> bytes:
    """Return the environment as `sbatch --export-file` reads it: NUL-separated `NAME=value`."""
    return environment[_COUNT.size :]


def uid_of(user: str) -> int:
    """Return the uid of `user` (SlurmUser); unit tests replace it."""
    return pwd.getpwnam(user).pw_uid


def _open_owned_dir(name: str, dir_fd: int, owner: int) -> int | None:
    """Open directory `name` in `dir_fd` without following a link, if `owner` owns it."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    if os.fstat(fd).st_uid != owner:
        os.close(fd)
        return None
    return fd


def _read_owned_file(name: str, dir_fd: int, owner: int) -> tuple[bytes, float] | str:
    """Read file `name` in `dir_fd` with its date, if it proves to be slurmctld's; else why not."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:
        return f"cannot open it without following a link: {e.strerror}"
    try:
        info = os.fstat(fd)
        if (problem := _file_problem(info, owner)) is not None:
            return problem
        data = b""
        while len(data) <= MAX_FILE and (chunk := os.read(fd, MAX_FILE + 1 - len(data))):
            data += chunk
        if len(data) > MAX_FILE:
            return f"more than {MAX_FILE} bytes"
        return data, info.st_mtime
    finally:
        os.close(fd)


def _file_problem(info: os.stat_result, owner: int) -> str | None:
    """Say why a file (its `fstat`) is not one slurmctld wrote for a job, or return None."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != owner:
        return f"owned by uid {info.st_uid}, not SlurmUser"
    if info.st_nlink != 1:
        return f"{info.st_nlink} links to it"
    if info.st_size > MAX_FILE:
        return f"{info.st_size} bytes, more than {MAX_FILE}"
    return None


def known_ids(output: str) -> set[int]:
    """Return the ids in `KNOWN_QUERY`'s output (a line that is not a number names nothing)."""
    return {int(line) for line in lines(output) if _DIGITS.fullmatch(line)}


@dataclass(frozen=True)
class Accounted:
    """What accounting says of a job id: whether it ended, and the uid it proves (or None)."""

    ended: bool
    uid: int | None


def accounted(output: str, job_id: int, submitted: int) -> Accounted:
    """Read sacct's records of `job_id` (`SACCT_FIELDS`, `|`-separated, times in seconds).

    Only whole records of that id and of valid fields count. Ended: a record with an end at
    or after the script's date. The uid: the only record submitted within `SUBMIT_SLACK` s of
    the script's date.
    """
    ended, uids = False, set[int]()
    for line in lines(output):
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS) or fields[0] != str(job_id):
            continue
        _, uid, submit, end = fields
        if not (_DIGITS.fullmatch(uid) and _DIGITS.fullmatch(submit)):
            continue
        if end not in _NO_END:
            ended = ended or not _DIGITS.fullmatch(end) or int(end) >= submitted
        if abs(int(submit) - submitted) <= SUBMIT_SLACK:
            uids.add(int(uid))
    return Accounted(ended, next(iter(uids)) if len(uids) == 1 else None)


def sacct_query(job_id: int) -> list[str]:
    """Return the sacct command for every record of `job_id` (`SACCT_FIELDS`, no user text)."""
    return [
        "sacct",
        "--noheader",
        "--allocations",
        "--duplicates",
        "--parsable2",
        f"--jobs={job_id}",
        "--starttime=1970-01-01T00:00:01",
        "--format=" + ",".join(SACCT_FIELDS),
    ]


@dataclass(frozen=True)
class Kept:
    """A lost job's copy: where it is and what was proven of it."""

    path: Path
    job_id: int
    submitted: int
    saved: int
    uid: int | None
    resubmitted_as: int | None

    @property
    def script(self) -> Path:
        """The kept copy of the job's script."""
        return self.path / "script"

    @property
    def environment(self) -> Path:
        """The kept copy of the job's environment file, as slurmctld wrote it."""
        return self.path / "environment"

    def user(self) -> str:
        """Return the proven user, as `name (uid N)`, or why there is none."""
        if self.uid is None:
            return "unproven (no accounting record)"
        try:
            return f"{pwd.getpwuid(self.uid).pw_name} (uid {self.uid})"
        except KeyError:
            return f"uid {self.uid}"

    def shown(self) -> dict[str, str]:
        """Return the action's view of it."""
        view = {
            "id": str(self.job_id),
            "user": self.user(),
            "submitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.submitted)),
            "script": str(self.script),
            "environment": str(self.environment),
            "kept-until": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.saved + RETENTION_DAYS * 86400)
            ),
        }
        if self.resubmitted_as is not None:
            view["resubmitted-as"] = str(self.resubmitted_as)
        return view


def kept_jobs(kept_dir: Path) -> list[Kept]:
    """Return the copies in `kept_dir` (root's: written only by this module), oldest first."""
    kept: list[Kept] = []
    try:
        names = sorted(os.listdir(kept_dir))
    except FileNotFoundError:
        return []
    for name in names:
        if _KEPT_NAME.fullmatch(name) is None:
            continue
        try:
            meta = json.loads((kept_dir / name / "meta.json").read_text())
            kept.append(
                Kept(
                    path=kept_dir / name,
                    job_id=int(meta["job_id"]),
                    submitted=int(meta["submitted"]),
                    saved=int(meta["saved"]),
                    uid=None if meta["uid"] is None else int(meta["uid"]),
                    resubmitted_as=meta.get("resubmitted_as"),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("lost jobs: %s is not a kept job; left alone", kept_dir / name)
    return sorted(kept, key=lambda k: (k.submitted, k.job_id))


def keep(kept_dir: Path, batch: BatchDir, uid: int | None, now: float, *, under: Path) -> Kept:
    """Copy `batch` into `kept_dir/<id>-<submitted>/` (root's, 0700; files 0600).

    `kept_dir` itself is root's, 0711: a user passes through it to the stage of a resubmission
    (`resubmit`) but lists nothing.
    """
    target = kept_dir / f"{batch.job_id}-{batch.submitted}"
    files.make_dir(kept_dir, mode=0o711, owner="root", under=under)
    files.make_dir(target, mode=0o700, owner="root", under=under)
    files.write_atomic(target / "script", batch.script, mode=0o600)
    files.write_atomic(target / "environment", batch.environment, mode=0o600)
    meta = {"job_id": batch.job_id, "submitted": batch.submitted, "saved": int(now), "uid": uid}
    files.write_atomic(target / "meta.json", json.dumps(meta), mode=0o600)
    return Kept(target, batch.job_id, batch.submitted, int(now), uid, None)


def _record_resubmission(kept: Kept, new_id: int) -> None:
    meta = {
        "job_id": kept.job_id,
        "submitted": kept.submitted,
        "saved": kept.saved,
        "uid": kept.uid,
        "resubmitted_as": new_id,
    }
    files.write_atomic(kept.path / "meta.json", json.dumps(meta), mode=0o600)


def resubmit(kept: Kept, kept_dir: Path) -> int:
    """Submit `kept` again as its proven user; return the new job id.

    The script and environment are staged, the user's own and read-only, in a fresh directory
    of root's that the user can pass through but not list or write; `sbatch` runs as the user
    (`setpriv`, its environment reset, no shell) and reads them there.

    Raises:
        ValueError: The user is unproven, root, or unknown on this machine.
        SlurmOpsError: sbatch failed, or answered no job id.

    """
    if kept.uid is None:
        raise ValueError("its user is unproven (no accounting record): resubmit it by hand")
    if kept.uid == 0:
        raise ValueError("it is root's: resubmit it by hand")
    try:
        user = pwd.getpwuid(kept.uid)
    except KeyError:
        raise ValueError(f"uid {kept.uid} is unknown on this machine") from None
    stage = Path(tempfile.mkdtemp(prefix=".resubmit-", dir=kept_dir))
    try:
        os.chmod(stage, 0o711)
        for name, data in (
            ("script", script_text(kept.script.read_bytes())),
            ("environment", export_file(kept.environment.read_bytes())),
        ):
            _write_for_user(stage / name, data, user)
        argv = [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--init-groups",
            "--reset-env",
            "--",
            "sbatch",
            "--parsable",
            f"--export-file={stage / 'environment'}",
            f"--chdir={user.pw_dir}",
            str(stage / "script"),
        ]
        output = host.run(argv, timeout=SUBMIT_TIMEOUT).stdout.strip()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    new_id = output.split(";")[0]
    if not _DIGITS.fullmatch(new_id):
        raise SlurmOpsError(f"sbatch answered no job id: {output[:80]!r}")
    _record_resubmission(kept, int(new_id))
    return int(new_id)


def _write_for_user(path: Path, data: bytes, user: pwd.struct_passwd) -> None:
    """Create `path` (new, in root's stage), the user's and read-only to them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchown(fd, user.pw_uid, user.pw_gid)
    finally:
        os.close(fd)


class LostJobs(SlurmctldComponent):
    """Keep the jobs a takeover lost, say so, and resubmit them on request (module doc).

    Stored: whether a scan completed while this unit's slurmctld has been in charge
    (`in_charge`, cleared when another controller's heartbeat is seen) and when (`scanned_at`:
    a later takeover signal asks for another), and why this hook's look failed (`trouble`).
    """

    _stored = ops.StoredState()

    def __init__(
        self, charm: ops.CharmBase, manager: SlurmctldManager, scontrol: Scontrol
    ) -> None:
        super().__init__(charm, "lost-jobs", manager, scontrol)
        self._stored.set_default(scanned_at=0.0, in_charge=False, trouble="")
        charm.framework.observe(charm.on.lost_jobs_action, self._on_lost_jobs)

    @property
    def kept_dir(self) -> Path:
        """Where this unit keeps the lost jobs' copies (`KEPT_DIR`)."""
        return self.manager.root / KEPT_DIR.lstrip("/")

    def reconcile(self, facts: Facts) -> None:
        """Drop expired copies; scan when due. Errors become the status, never a hook error."""
        self._stored.trouble = ""
        try:
            self._expire(time.time())
            if facts.config.use_network_state:
                self._scan_if_due(facts)
        except Exception as e:
            logger.exception("lost jobs: cannot look")
            self._stored.trouble = trouble_text(e)

    def _expire(self, now: float) -> None:
        for kept in kept_jobs(self.kept_dir):
            if now > kept.saved + RETENTION_DAYS * 86400:
                logger.info(
                    "lost jobs: job %d's copy expired; removing %s", kept.job_id, kept.path
                )
                shutil.rmtree(kept.path)

    def _scan_if_due(self, facts: Facts) -> None:
        """Scan once after each time this unit's slurmctld takes control as a backup."""
        now = time.time()
        state_dir = self.manager.network_state_save_location
        beat = fresh_heartbeat(state_dir, facts.running_timeout, now)
        my_index = controller_index(self.manager, facts.hostname)
        if beat is None or my_index is None:
            return
        stored = self._stored
        if beat.index != my_index:
            stored.in_charge = False
            return
        took_control = signalled_at(self.manager.root / SIGNAL_FILE.lstrip("/"), now)
        if my_index == 0:
            return  # A primary purges these directories itself when it reads its state.
        due = not stored.in_charge or took_control > stored.scanned_at
        if not due:
            return
        if self._scan(state_dir, before=took_control or now, accounting=bool(facts.dbds)):
            stored.in_charge, stored.scanned_at, stored.trouble = True, now, ""

    def _scan(self, state_dir: Path, *, before: float, accounting: bool) -> bool:
        """Keep every proven lost job; whether the scan is complete."""
        owner = uid_of(self.manager.user)
        root = self.manager.root
        ids, whole = batch_dir_ids(state_dir, under=root, owner=owner)
        if not ids:
            return whole
        known = known_ids(_query(KNOWN_QUERY))
        kept = {(k.job_id, k.submitted) for k in kept_jobs(self.kept_dir)}
        unknown = sorted(set(ids) - known)
        for job_id in unknown[:CONFIRMED_PER_SCAN]:
            if self.scontrol.knows_job(job_id):
                continue
            batch = read_batch_dir(state_dir, job_id, under=root, owner=owner, before=before)
            if isinstance(batch, str):
                logger.info("lost jobs: not a lost job: %s", batch)
                continue
            if (job_id, batch.submitted) in kept:
                continue
            uid = None
            if accounting:
                record = accounted(_query(sacct_query(job_id)), job_id, batch.submitted)
                if record.ended:
                    continue
                uid = record.uid
            copy = keep(self.kept_dir, batch, uid, time.time(), under=root)
            logger.warning(
                "lost job %d (submitted %s, user %s): slurmctld lost it in the takeover; "
                "kept in %s (juju run %s lost-jobs)",
                job_id,
                copy.shown()["submitted"],
                copy.user(),
                copy.path,
                self.model.unit.name,
            )
        return whole and len(unknown) <= CONFIRMED_PER_SCAN

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say how many lost jobs wait for the operator, and why the last scan failed."""
        if trouble := str(self._stored.trouble):
            yield ops.WaitingStatus(f"cannot look for lost jobs yet: {trouble}")
        waiting = [k for k in kept_jobs(self.kept_dir) if k.resubmitted_as is None]
        if waiting:
            unit = self.model.unit.name
            yield ops.ActiveStatus(f"{len(waiting)} lost job(s): juju run {unit} lost-jobs")

    def _on_lost_jobs(self, event: ops.ActionEvent) -> None:
        """List the kept lost jobs; with `resubmit=true`, submit them (or job `id`) again."""
        wanted = event.params.get("id")
        jobs = [k for k in kept_jobs(self.kept_dir) if wanted is None or k.job_id == wanted]
        if wanted is not None and not jobs:
            event.fail(f"no lost job {wanted} is kept on this unit")
            return
        results: dict[str, object] = {}
        for kept in jobs:
            view: dict[str, object] = dict(kept.shown())
            if event.params.get("resubmit", False) and kept.resubmitted_as is None:
                view["resubmit"] = self._resubmit(kept)
            results[f"job-{kept.job_id}-{kept.submitted}"] = view
        results["count"] = len(jobs)
        event.set_results(results)

    def _resubmit(self, kept: Kept) -> dict[str, object]:
        try:
            new_id = resubmit(kept, self.kept_dir)
        except (ValueError, SlurmOpsError, OSError) as e:
            why = e.stderr or e.message if isinstance(e, SlurmOpsError) else str(e)
            logger.warning("lost job %d not resubmitted: %s", kept.job_id, why)
            return {"refused": why}
        logger.warning("lost job %d resubmitted as job %d (%s)", kept.job_id, new_id, kept.user())
        not_recovered = {str(n): text for n, text in enumerate(NOT_RECOVERED, 1)}
        return {"new-id": str(new_id), "not-recovered": not_recovered}


def _query(argv: list[str]) -> str:
    """Run a narrow `squeue`/`sacct` (times as Unix seconds), bounded by `QUERY_TIMEOUT`."""
    return host.run(argv, timeout=QUERY_TIMEOUT, env=TIME_FORMAT_ENV).stdout
