"""Undo what a takeover did to jobs that started or ended as the primary died (issue 25).

slurmctld writes job state into `StateSaveLocation` at most every 5 s (`SAVE_MAX_WAIT` in
state_save.c, compiled in, the same in 24.11 and 26.05; nothing forces a save). A backup that
takes over reads the last save: a job that started after it is PENDING there while its batch
step runs on its node. The new primary schedules it again and the node's slurmd refuses the
second launch: slurmctld drains the node (`Duplicate jobid`, or `batch job complete failure`)
and requeues the job held (`launch failed requeued held`), or, when slurmd answers that the
credential was revoked, ends it FAILED (`Killing non-startable batch JobId=<id>`). The first
run is killed either way. Without help the job waits for a person, and so does the node.

The rule, applied by the controller in charge only, after this unit saw control move to it from
another controller (the `heartbeat` file the controller in charge writes into StateSaveLocation
every `SlurmctldTimeout/4` s names it), for `WINDOW` seconds after it noticed. A casualty is
something slurmctld did (SlurmUser's name on it, Slurm's own words as the reason) since this
unit last saw another controller in charge (`since`):

- once, `REGISTER_AFTER` s into the window: every node that runs a job and carries no flag
  but a dynamic node's is asked to register again (`scontrol update state=undrain` on a node
  that is not drained; see `_register_busy_nodes`), so that slurmctld ends there what the
  last save missed: a job whose end the old primary was told in its last seconds (soak seed
  74) is requeued, or ended as a node failure if it may not be, instead of holding its node
  until its time limit;
- a node drained by slurmctld for a refused launch (`LAUNCH_DRAIN_REASONS`) is resumed;
- a pending job requeued and held for a failed launch (`HELD_FOR_LAUNCH`) is released;
- a requeueable batch job ended because its node refused the launch (for a revoked credential)
  is requeued. slurmctld logs `Killing non-startable batch JobId=<id>` and ends the job as it
  ends any batch job whose script exited 1 (agent.c passes `_wif_status()`, 256, to
  `job_complete`): FAILED, reason `NonZeroExitCode`, exit code 1:0, ended at once. So a job is
  one when its record says so, started and ended since `since` within `LAUNCH_REFUSED_WITHIN`
  s (the launch RPC's answer). slurmctld's log is not read: any user can write a line into it
  (slurmctld logs an invalid partition string verbatim).

The facts come from Slurm's job and node records, never from text a user can write, and cost
little on the controller that just took over: one `squeue` and one `sinfo` per look
(`JOBS_QUERY`, `NODES_QUERY`: state filters, and only fields that cannot hold a separator:
ids, states, times, counters), whose lines only name candidates; each candidate's own record
(`scontrol show job|node <id> --json`, at most `CONFIRMED_PER_LOOK` per look) decides. A look
that cannot run (say squeue timed out on a busy controller) is a status (`cannot repair after
takeover`), and there are at most `MAX_LOOKS` looks per takeover.

A backup whose hooks never ran while another controller was in charge (on a busy machine its
last hook may come before the primary's first heartbeat) knows of the takeover from slurmctld
itself: a backup that takes control runs `SlurmctldPrimaryOnProg`, whose signal file
(`primary_watch.SIGNAL_FILE`) then dates the takeover, and `since` is that time. SlurmUser
writes that file: a date after now, or anything but a regular file, is no signal
(`signalled_at`).

The charm must run while the window is open, and the rule is level-triggered: any hook (the
wake-up slurmctld's signal dispatches, a recheck, update-status, any other event) compares the
heartbeat with what this unit last saw, so a lost or late wake-up only delays the repair. Once
the window opens, one watcher (`hpc_libs.charm.wake.wake_every`) dispatches a look every
`RECHECK` s until it closes; a hook that finds it gone starts it again. A hook that finds no
fresh heartbeat within `WINDOW` s of slurmctld's signal (the new primary has not beaten yet)
keeps looking the same way.

Each job and node is repaired, or shown not to be a casualty, at most once per takeover. A node
an operator drained (another user, or another reason) stays drained, and a job held by an
operator or its user (another reason: Slurm clears `launch failed requeued held` on such a
hold) stays held, even within the window. Without a takeover (the first controller, in charge
from its start; a backup in charge that slurmctld never signalled taking control), nothing is
repaired. Each repair is logged with the job and node, and kept for the status until the first
update-status after the window that repairs nothing; so is a look that failed. Any error in the
check is such a status, never a hook error: the hook ends and saves what was repaired, so
nothing is repaired twice.
"""

import logging
import math
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import controllers
import ops
from facts import Facts
from hpc_libs.charm import wake
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm.naming import NODE_NAME
from hpc_libs.slurm.scontrol import Job, Node, Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from primary_watch import SIGNAL_FILE

logger = logging.getLogger(__name__)

WINDOW = 180
"""Seconds after the takeover is noticed during which its casualties are looked for. slurmctld
relaunches the job within seconds of taking control (3 s on the lab)."""
RECHECK = 10
"""Seconds between two looks while the window is open (a watcher wakes the charm)."""
SHOWN = 4
"""Repairs named in the status; the others are counted (each is in the unit's log)."""
HEARTBEAT = "heartbeat"
HEARTBEAT_SIZE = 16
"""Two 64-bit big-endian numbers: the time of the beat and the index of the controller."""
MAX_LOOKS = 10
"""Looks per takeover (each one `squeue` and one `sinfo`): the casualties appear within seconds
of the takeover, and a controller too busy to answer is not asked again and again."""
CONFIRMED_PER_LOOK = 20
"""Candidates whose own record is read per look (one `scontrol show` each); the others wait
for the next look."""
QUERY_TIMEOUT = 30
"""Seconds one `squeue` or `sinfo` may take; past it the look failed (a status says so)."""
HELD_FOR_LAUNCH = "launch failed requeued held"
LAUNCH_DRAIN_REASONS = ("Duplicate jobid", "batch job complete failure")
REFUSED_REASON = "NonZeroExitCode"
"""The reason of a job slurmctld ended for a refused launch (`FAIL_EXIT_CODE`, exit code 1:0)."""
LAUNCH_REFUSED_WITHIN = 30
"""Seconds between such a job's start and its end: the launch RPC and its answer."""
TIME_FORMAT_ENV = {"SLURM_TIME_FORMAT": "%s"}
"""Makes squeue's and sinfo's times Unix seconds, whatever the locale."""
SEPARATOR = "|"
JOB_FIELDS = (
    "JobId",
    "State",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "RestartCnt",
    "Requeue",
    "BatchFlag",
    "exit_code",
)
JOBS_QUERY = [
    "squeue",
    "--all",
    "--noheader",
    "--states=PENDING,FAILED,COMPLETING",
    "--Format=" + ",".join(f"{name}:{SEPARATOR}" for name in JOB_FIELDS[:-1]) + ",exit_code:0",
]
"""Pending, failed and completing jobs (squeue's COMPLETING matches any state with that flag,
PENDING and FAILED only the plain state); no field can hold the separator or a newline."""
NODE_FIELDS = ("NodeList", "TimeStamp")
NODES_QUERY = [
    "sinfo",
    "--all",
    "--noheader",
    "--Node",
    "--states=drain",
    f"--Format=NodeList:{SEPARATOR},TimeStamp:0",
]
"""Drained and draining nodes (a line per node and partition): name, when the reason was set."""
BUSY_NODES_QUERY = [
    "sinfo",
    "--all",
    "--noheader",
    "--Node",
    "--states=allocated,mixed",
    f"--Format=NodeList:{SEPARATOR},StateComplete:0",
]
"""Nodes that run jobs (a line per node and partition): name, and its state with every flag,
lower case, `+`-joined (`mixed+dynamic_norm`, `allocated+drain+dynamic_norm`...)."""
BUSY = ("allocated", "mixed")
HARMLESS_FLAGS = frozenset({"dynamic_norm", "completing"})
"""The flags a busy node may carry and still be asked to register: a dynamic node's (every
node of the charms), a job ending on it. Any other (drain, not responding, reboot, power,
maintenance...) leaves the node alone."""
REGISTRATION = "registration"
"""The step that has the busy nodes register again, done (or passed) once per takeover."""
REGISTER_AFTER = 25
"""Seconds after the window opens before the busy nodes are asked to register. slurmctld ends
a batch job its node does not report only once the job has been inactive for
`BatchStartTimeout` (10 s) plus `MessageTimeout` (at most 10 s), and a takeover marks every
recovered job active: a registration sooner purges nothing (the lab: asked 2 s after the
takeover, the job ran on to its time limit)."""
_JOB_ID = re.compile(r"[1-9][0-9]{0,9}")
_STATE = re.compile(r"[A-Z_]{1,32}")
_COUNT = re.compile(r"[0-9]{1,5}")
_EPOCH = re.compile(r"[0-9]{1,11}")
_NO_TIME = ("N/A", "NONE", "Unknown")
_EXIT_CODE = re.compile(r"(?:[0-9]{1,3}:[0-9]{1,3})?")
_MAX_JOB_ID = 2**32 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x80-\x9f\u2028\u2029]+")
_MAX_TROUBLE = 200


@dataclass(frozen=True)
class Beat:
    """The controller in charge, as its last heartbeat says."""

    time: int
    index: int


def read_heartbeat(state_save_location: Path) -> Beat | None:
    """Read `<StateSaveLocation>/heartbeat`; None if it is missing or not a heartbeat.

    SlurmUser writes that directory: the file is opened without following a link and without
    blocking (a FIFO put in its place is refused), and only a regular file of 16 bytes counts.
    """
    path = state_save_location / HEARTBEAT
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, HEARTBEAT_SIZE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != HEARTBEAT_SIZE:
        return None
    beat_time, index = struct.unpack(">QQ", data)
    return Beat(time=beat_time, index=index)


def fresh_heartbeat(
    state_save_location: Path, slurmctld_timeout: float, now: float
) -> Beat | None:
    """Return the heartbeat if it is fresher than half `slurmctld_timeout`, else None.

    Half the timeout is twice the heartbeat's period. A fresh heartbeat names the controller
    in charge: a backup takes over only once it went stale (backup.c). An older one is the
    old primary's last beat while a backup takes over.
    """
    beat = read_heartbeat(state_save_location)
    return beat if beat is not None and now - beat.time <= slurmctld_timeout / 2 else None


@dataclass(frozen=True)
class JobLine:
    """One job as `JOBS_QUERY` prints it (times None where Slurm prints none)."""

    job_id: int
    state: str
    submit_time: int | None
    start_time: int | None
    end_time: int | None
    restarts: int
    requeue: bool
    batch: bool
    exit_code: str


def _time(field: str) -> int | None:
    """Read a time field: Unix seconds, or None for Slurm's words for none; else ValueError."""
    if _EPOCH.fullmatch(field):
        return int(field)
    if field in _NO_TIME:
        return None
    raise ValueError(f"not a time: {field[:40]!r}")


def parse_job_line(line: str) -> JobLine | None:
    """Parse one line of `JOBS_QUERY`; None unless it is a whole record of valid fields."""
    fields = line.split(SEPARATOR)
    if len(fields) != len(JOB_FIELDS):
        return None
    job_id, state, submit, start, end, restarts, requeue, batch, exit_code = fields
    valid = (
        _JOB_ID.fullmatch(job_id)
        and int(job_id) <= _MAX_JOB_ID
        and _STATE.fullmatch(state)
        and all(_COUNT.fullmatch(n) for n in (restarts, requeue, batch))
        and _EXIT_CODE.fullmatch(exit_code)
    )
    if not valid:
        return None
    try:
        submit_time, start_time, end_time = _time(submit), _time(start), _time(end)
    except ValueError:
        return None
    return JobLine(
        job_id=int(job_id),
        state=state,
        submit_time=submit_time,
        start_time=start_time,
        end_time=end_time,
        restarts=int(restarts),
        requeue=requeue != "0",
        batch=batch != "0",
        exit_code=exit_code,
    )


def parse_node_line(line: str) -> tuple[str, int] | None:
    """Parse one line of `NODES_QUERY`: the node and when its reason was set; None otherwise."""
    fields = line.split(SEPARATOR)
    if len(fields) != len(NODE_FIELDS):
        return None
    name, stamp = fields
    if not (NODE_NAME.fullmatch(name) and _EPOCH.fullmatch(stamp)):
        return None
    return name, int(stamp)


def busy_nodes(output: str) -> list[str]:
    """Return the nodes of `BUSY_NODES_QUERY`'s output: `BUSY`, no flag but `HARMLESS_FLAGS`."""
    found: list[str] = []
    for line in lines(output):
        fields = line.split(SEPARATOR)
        if len(fields) != 2 or not NODE_NAME.fullmatch(fields[0]):
            continue
        base, *flags = fields[1].split("+")
        if base in BUSY and HARMLESS_FLAGS.issuperset(flags) and fields[0] not in found:
            found.append(fields[0])
    return found


def lines(output: str) -> list[str]:
    """Split a command's output on newlines only (CR, U+2028... stay inside a field)."""
    return [line for line in output.split("\n") if line]


def job_candidates(output: str, since: float) -> list[int]:
    """Return the jobs of `JOBS_QUERY`'s output that may be casualties since `since`.

    Held for a failed launch: pending (or still completing), requeued since `since` (a requeue
    sets the submit time) and restarted. Ended for a refused launch: failed (or completing),
    started and ended since `since`, exit code 1:0, a requeueable batch job. Each job's own
    record decides (`held_for_launch`, `ended_for_revoked`).
    """
    candidates: list[int] = []
    for line in lines(output):
        job = parse_job_line(line)
        if job is None:
            continue
        held = (
            job.state in ("PENDING", "COMPLETING")
            and (job.submit_time or 0) >= since
            and job.restarts > 0
        )
        ended = (
            job.state in ("FAILED", "COMPLETING")
            and (job.start_time or 0) >= since
            and (job.end_time or 0) >= since
            and job.exit_code == "1:0"
            and job.requeue
            and job.batch
        )
        if (held or ended) and job.job_id not in candidates:
            candidates.append(job.job_id)
    return candidates


def node_candidates(output: str, since: float) -> list[str]:
    """Return the drained nodes of `NODES_QUERY`'s output whose reason was set since `since`."""
    candidates: list[str] = []
    for line in lines(output):
        node = parse_node_line(line)
        if node is not None and node[1] >= since and node[0] not in candidates:
            candidates.append(node[0])
    return candidates


def drained_by_launch(node: Node, slurm_user: str, since: float) -> bool:
    """Whether slurmctld drained `node` for a refused launch at or after `since`."""
    return (
        node.has_state("drain")
        and node.reason in LAUNCH_DRAIN_REASONS
        and node.reason_set_by_user == slurm_user
        and (node.reason_changed_at or 0) >= since
    )


def held_for_launch(job: Job, since: float) -> bool:
    """Whether slurmctld requeued `job` held for a failed launch at or after `since`."""
    return (
        "PENDING" in job.job_state
        and job.state_description == HELD_FOR_LAUNCH
        and (job.submit_time or 0) >= since
    )


def ended_for_revoked(job: Job, since: float) -> bool:
    """Whether slurmctld ended the requeueable batch `job` since `since` for a refused launch.

    Its record as agent.c leaves it: FAILED with `NonZeroExitCode` and exit code 1:0 (no
    signal), started and ended since `since`, within `LAUNCH_REFUSED_WITHIN` s.
    """
    start, end = job.start_time or 0, job.end_time or 0
    return (
        "FAILED" in job.job_state
        and job.state_reason == REFUSED_REASON
        and job.exit_code.return_code == 1
        and not job.exit_code.signal.id
        and job.requeueable
        and since <= start <= end <= start + LAUNCH_REFUSED_WITHIN
    )


def trouble_text(error: BaseException) -> str:
    """Return what the status says of an error: Slurm's words, one line, bounded."""
    if isinstance(error, SlurmOpsError):
        text = error.stderr or error.message
    else:
        text = f"{type(error).__name__}: {error}"
    text = _CONTROL.sub(" ", text).strip() or type(error).__name__
    return text if len(text) <= _MAX_TROUBLE else text[: _MAX_TROUBLE - 3] + "..."


def signalled_at(path: Path, now: float) -> float:
    """When slurmctld's program last wrote the signal file `path`; 0 for no signal.

    SlurmUser writes that file, so it can date it as it likes: only a regular file counts (a
    link is not followed, nor a directory or FIFO taken for one), and a date after `now` is
    no signal. Taken as now, it would open a new window at every hook, each with a watcher
    of its own; taken as it is, a watcher would wake the charm every `RECHECK` s until then.
    """
    try:
        info = path.lstat()
    except OSError:
        return 0.0
    if not stat.S_ISREG(info.st_mode) or info.st_mtime > now:
        return 0.0
    return info.st_mtime


def controller_index(manager: SlurmctldManager, hostname: str) -> int | None:
    """Return this host's place among the shared slurm.conf's controllers (0: the primary).

    None if it is not listed or that slurm.conf cannot be read.
    """
    conf = controllers.shared_slurm_conf(manager)
    hosts = controllers.controller_hosts(conf) if conf is not None else []
    return hosts.index(hostname) if hostname in hosts else None


class TakeoverRepair(controllers.SlurmctldComponent):
    """Notice a takeover by this unit's slurmctld and undo its casualties (module doc).

    What it saw is kept in the unit's stored state: the controller last seen in charge, since
    when this unit knows the others were, the open window, the looks taken, the jobs and nodes
    repaired (`done`) or shown not to be casualties (`passed`), and for the status the repairs
    and why the last look failed (`trouble`).
    """

    _stored = ops.StoredState()

    def __init__(
        self, charm: ops.CharmBase, manager: SlurmctldManager, scontrol: Scontrol, wake_event: str
    ) -> None:
        """`wake_event` is the hook a recheck dispatches (the charm's wake-up event)."""
        super().__init__(charm, "takeover-repair", manager, scontrol)
        self.wake_event = wake_event
        self._stored.set_default(
            in_charge=-1,
            others_seen_at=0.0,
            since=0.0,
            window_until=0.0,
            repairs=[],
            done=[],
            passed=[],
            looks=0,
            trouble="",
        )
        self._repaired_now = self._troubled_now = False
        charm.framework.observe(charm.on.update_status, self._on_update_status)

    def reconcile(self, facts: Facts) -> None:
        """With network state, at every hook: even one that cannot configure (level-triggered)."""
        if facts.config.use_network_state:
            self.check(self.manager, facts.hostname, facts.running_timeout)

    def check(self, manager: SlurmctldManager, hostname: str, slurmctld_timeout: int) -> None:
        """Look at the heartbeat; after a takeover by this unit, repair what it caused.

        The component's boundary: any error becomes the status's `trouble` and the unit's
        log, never a hook error, so what was repaired before it is saved with the hook.
        """
        try:
            self._check(manager, hostname, slurmctld_timeout)
        except Exception as e:
            logger.exception("takeover repair: cannot look")
            self._trouble(e)

    def _check(self, manager: SlurmctldManager, hostname: str, slurmctld_timeout: int) -> None:
        """Look at the heartbeat; after a takeover by this unit, repair what it caused.

        A heartbeat older than half `slurmctld_timeout` (twice its period) says nobody is in
        charge: the old primary's last beat while a backup takes over.
        """
        now = time.time()
        beat = fresh_heartbeat(manager.network_state_save_location, slurmctld_timeout, now)
        my_index = controller_index(manager, hostname)
        if my_index is None:
            return
        took_control = signalled_at(manager.root / SIGNAL_FILE.lstrip("/"), now)
        if beat is None:
            if now - took_control < WINDOW:  # slurmctld just signalled: look until one beats.
                self._keep_looking(int(took_control) + WINDOW)
            return
        stored = self._stored
        if beat.index != my_index:
            if stored.in_charge == my_index and stored.trouble:
                # This unit looks no more: a look that failed as control moved on is no
                # status of its own (seed 74 in CI: `blocked` until the next update-status).
                logger.warning(
                    "controller %d is in charge now; this unit's last look had failed: %s",
                    beat.index,
                    stored.trouble,
                )
                stored.trouble = ""
            stored.in_charge, stored.others_seen_at = beat.index, now
            return
        saw_another = stored.in_charge not in (-1, my_index)
        unseen = stored.in_charge == -1 and my_index > 0 and took_control > 0
        if saw_another or unseen:
            stored.since = max(stored.others_seen_at, took_control)
            stored.window_until = now + WINDOW
            stored.done, stored.passed, stored.looks, stored.trouble = [], [], 0, ""
            logger.warning(
                "this controller took over from controller %d; repairing what the takeover "
                "did to jobs and nodes for %d s",
                stored.in_charge,
                WINDOW,
            )
        stored.in_charge = my_index
        if now > stored.window_until or stored.looks >= MAX_LOOKS:
            return
        stored.looks += 1
        try:
            # Slurm's record times are whole seconds (truncated): an event in the second
            # `since` falls in, after it, reads as that second.
            self._repair(float(math.floor(stored.since)))
            stored.trouble = ""
        except SlurmOpsError as e:
            logger.warning("cannot repair after the takeover yet: %s", e.stderr or e.message)
            self._trouble(e)
        if stored.looks < MAX_LOOKS:
            self._keep_looking(int(stored.window_until))

    def _trouble(self, error: BaseException) -> None:
        self._troubled_now = True
        self._stored.trouble = trouble_text(error)

    def _keep_looking(self, until: int) -> None:
        """Have a hook dispatched every `RECHECK` s until `until` (epoch s), unless one is.

        The watcher is named by its deadline, so a new window gets a watcher of its own. One
        that cannot start is logged: the next event looks again and tries again.
        """
        unit, charm_dir = self.model.unit.name, self.framework.charm_dir
        try:
            name = wake.watcher_name("slurmctld-wake-takeover", f"until-{until}")
            dispatch = wake.dispatch_command(unit, charm_dir, self.wake_event)
            description = f"Wake {unit}: look for takeover casualties until {until}"
            if wake.wake_every(name, dispatch, description, period=RECHECK, until=until):
                logger.info("%s wakes the charm every %d s until %d", name, RECHECK, until)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot keep looking for takeover casualties: %s", e)

    def _on_update_status(self, _: ops.UpdateStatusEvent) -> None:
        """Clear the repairs and the trouble at a clean update-status.

        Clean: the window closed, and nothing was repaired nor failed in this hook.
        """
        clean = not (self._repaired_now or self._troubled_now)
        if clean and time.time() > self._stored.window_until:
            self._stored.repairs = []
            self._stored.trouble = ""

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say why the last look failed, and what was repaired, until a clean update-status."""
        if trouble := str(self._stored.trouble):
            more = time.time() <= self._stored.window_until and self._stored.looks < MAX_LOOKS
            if more:
                yield ops.WaitingStatus(f"cannot repair after takeover yet: {trouble}")
            else:
                yield ops.BlockedStatus(
                    f"cannot repair after takeover: {trouble} (see drained nodes, held jobs)"
                )
        repairs: Sequence[str] = list(self._stored.repairs)
        if not repairs:
            return
        shown = "; ".join(repairs[:SHOWN])
        if len(repairs) > SHOWN:
            shown += f"; {len(repairs) - SHOWN} more (see the unit's log)"
        yield ops.ActiveStatus(f"repaired after takeover: {shown}")

    def _repair(self, since: float) -> None:
        """Resume nodes, then release and requeue jobs, that the takeover left behind.

        Both lists are read first (one look); each candidate's own record then decides, at
        most `CONFIRMED_PER_LOOK` of them per look.
        """
        opened = self._stored.window_until - WINDOW
        if self._new(REGISTRATION) and time.time() >= opened + REGISTER_AFTER:
            self._register_busy_nodes()
        nodes = node_candidates(_query(NODES_QUERY), since)
        jobs = job_candidates(_query(JOBS_QUERY), since)
        looked: list[tuple[str, Callable[[], str | None]]] = [
            *((f"node {name}", partial(self._resume, name, since)) for name in nodes),
            *((f"job {job_id}", partial(self._release, job_id, since)) for job_id in jobs),
        ]
        new = [(key, repair) for key, repair in looked if self._new(key)]
        for key, repair in new[:CONFIRMED_PER_LOOK]:
            if (done := repair()) is not None:
                self._record(key, done)
            else:
                self._pass(key)

    def _register_busy_nodes(self) -> None:
        """Have every node that runs a job, and carries no flag, register with this controller.

        A node's registration is how slurmctld learns that a batch job it believes runs there
        has ended (`_purge_missing_jobs`: requeued if it may be, else ended as a node failure).
        The takeover's state is the last save, and an end the old primary was told in its last
        seconds is not in it: without a registration the job runs on in the controller's
        records, holding its node, until its time limit (soak seed 74: a 90 s job TIMEOUT at
        3 minutes). slurmctld asks a node to register when it starts or is resumed, and
        otherwise about every 21st ping round; a takeover asks none.
        `scontrol update state=undrain`, on a node that is not drained, does only that.
        Flagged nodes are left out, so an operator's drain stays (the node's state is read
        just before; a drain set in between would be lifted: a window of one command).
        """
        nodes = busy_nodes(_query(BUSY_NODES_QUERY))
        if nodes:
            self.scontrol.update_node(nodes, state="undrain")
            logger.warning(
                "takeover repair: asked %s to register again (ends the last save missed)",
                ",".join(nodes),
            )
        self._pass(REGISTRATION)

    def _resume(self, name: str, since: float) -> str | None:
        """Resume node `name` if its record shows the takeover drained it; say so."""
        node = self.scontrol.show_node(name)
        if node is None or not drained_by_launch(node, self.manager.user, since):
            return None
        self.scontrol.update_node(name, state="resume")
        return f"resumed {name} ({node.reason})"

    def _release(self, job_id: int, since: float) -> str | None:
        """Release or requeue job `job_id` if its record shows the takeover hit it; say so."""
        job = self.scontrol.show_job(job_id)
        if job is not None and held_for_launch(job, since):
            self.scontrol.release([job_id])
            return f"released job {job_id} (held after a refused launch)"
        if job is not None and ended_for_revoked(job, since):
            self.scontrol.requeue([job_id])
            return f"requeued job {job_id} (killed: launch refused)"
        return None

    def _new(self, key: str) -> bool:
        """Whether `key` (a job or node) was neither repaired nor passed after this takeover."""
        return key not in self._stored.done and key not in self._stored.passed

    def _pass(self, key: str) -> None:
        """Remember that `key`'s own record shows it is no casualty (not read again)."""
        self._stored.passed = [*self._stored.passed, key]

    def _record(self, key: str, repair: str) -> None:
        logger.warning("takeover repair: %s", repair)
        self._repaired_now = True
        self._stored.done = [*self._stored.done, key]
        self._stored.repairs = [*self._stored.repairs, repair]


def _query(argv: list[str]) -> str:
    """Run a narrow `squeue`/`sinfo` (times as Unix seconds), bounded by `QUERY_TIMEOUT`."""
    return host.run(argv, timeout=QUERY_TIMEOUT, env=TIME_FORMAT_ENV).stdout
