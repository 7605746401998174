"""Undo what a takeover did to a job that started just before the primary died (issue 25).

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

- a node drained by slurmctld for a refused launch (`LAUNCH_DRAIN_REASONS`) is resumed;
- a pending job requeued and held for a failed launch (`HELD_FOR_LAUNCH`) is released;
- a requeueable batch job ended because its launch was refused for a revoked credential (that
  line in slurmctld's log) is requeued.

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

Each job and node is repaired at most once per takeover. A node an operator drained (another
user, or another reason) stays drained, and a job held by an operator or its user (another
reason: Slurm clears `launch failed requeued held` on such a hold) stays held, even within the
window. Without a takeover (the first controller, in charge from its start; a backup in charge
that slurmctld never signalled taking control), nothing is repaired. Each repair is logged with
the job and node, and kept for the status until the first update-status after the window that
repairs nothing.
"""

import logging
import os
import re
import stat
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import ha
import ops
from cluster import SLURMCTLD_LOG_FILE
from hpc_libs.charm import wake
from hpc_libs.errors import SlurmOpsError
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
LOG_TAIL = 512 * 1024
"""Bytes of slurmctld's log read for refused launches (the end of the file)."""
HELD_FOR_LAUNCH = "launch failed requeued held"
LAUNCH_DRAIN_REASONS = ("Duplicate jobid", "batch job complete failure")
REVOKED = re.compile(
    r"^\[(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] "
    r"Killing non-startable batch JobId=(?P<job>\d+)[^:]*: Job credential revoked$"
)
"""slurmctld's line for a launch its node refused (24.11; 26.05 prints the step id after it)."""


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


def revoked_launches(log: Path, since: float) -> list[int]:
    """Jobs slurmctld ended since `since` because their node refused a revoked credential.

    Reads the end of slurmctld's log (SlurmUser writes it: no link followed, no FIFO) and keeps
    only the ids of whole lines in Slurm's own format, timestamped in this machine's time.
    """
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return []
        os.lseek(fd, max(0, info.st_size - LOG_TAIL), os.SEEK_SET)
        text = os.read(fd, LOG_TAIL).decode("utf-8", errors="replace")
    except OSError:
        return []
    finally:
        os.close(fd)
    jobs: list[int] = []
    for line in text.splitlines():
        if (match := REVOKED.match(line)) is None:
            continue
        if datetime.fromisoformat(match["time"]).timestamp() >= since:
            jobs.append(int(match["job"]))
    return jobs


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


def ended_for_revoked(job: Job, revoked: Iterable[int], since: float) -> bool:
    """Whether `job` is a requeueable batch job ended since `since` for a revoked credential."""
    return (
        job.job_id in set(revoked)
        and job.requeueable
        and any(s in job.job_state for s in ("FAILED", "CANCELLED", "COMPLETED"))
        and (job.end_time or 0) >= since
    )


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
    conf = ha.shared_slurm_conf(manager)
    hosts = ha.controller_hosts(conf) if conf is not None else []
    return hosts.index(hostname) if hostname in hosts else None


class TakeoverRepair(ops.Object):
    """Notice a takeover by this unit's slurmctld and undo its casualties (module doc).

    What it saw is kept in the unit's stored state: the controller last seen in charge, since
    when this unit knows the others were, the open window, and the repairs for the status.
    """

    _stored = ops.StoredState()

    def __init__(
        self,
        charm: ops.CharmBase,
        scontrol: Scontrol,
        *,
        slurm_user: str,
        wake_event: str,
    ) -> None:
        """`wake_event` is the hook a recheck dispatches (the charm's wake-up event)."""
        super().__init__(charm, "takeover-repair")
        self.scontrol = scontrol
        self.slurm_user = slurm_user
        self.wake_event = wake_event
        self._stored.set_default(
            in_charge=-1, others_seen_at=0.0, since=0.0, window_until=0.0, repairs=[], done=[]
        )
        self._repaired_now = False
        charm.framework.observe(charm.on.update_status, self._on_update_status)

    def check(self, manager: SlurmctldManager, hostname: str, slurmctld_timeout: int) -> None:
        """Look at the heartbeat; after a takeover by this unit, repair what it caused.

        A heartbeat older than half `slurmctld_timeout` (twice its period) says nobody is in
        charge: the old primary's last beat while a backup takes over.
        """
        now = time.time()
        beat = read_heartbeat(manager.network_state_save_location)
        my_index = controller_index(manager, hostname)
        if my_index is None:
            return
        took_control = signalled_at(manager.root / SIGNAL_FILE.lstrip("/"), now)
        if beat is None or now - beat.time > slurmctld_timeout / 2:
            if now - took_control < WINDOW:  # slurmctld just signalled: look until one beats.
                self._keep_looking(int(took_control) + WINDOW)
            return
        stored = self._stored
        if beat.index != my_index:
            stored.in_charge, stored.others_seen_at = beat.index, now
            return
        saw_another = stored.in_charge not in (-1, my_index)
        unseen = stored.in_charge == -1 and my_index > 0 and took_control > 0
        if saw_another or unseen:
            stored.since = max(stored.others_seen_at, took_control)
            stored.window_until = now + WINDOW
            stored.done = []
            logger.warning(
                "this controller took over from controller %d; repairing what the takeover "
                "did to jobs and nodes for %d s",
                stored.in_charge,
                WINDOW,
            )
        stored.in_charge = my_index
        if now > stored.window_until:
            return
        try:
            self._repair(float(stored.since), manager.root / SLURMCTLD_LOG_FILE.lstrip("/"))
        except SlurmOpsError as e:
            logger.warning("cannot repair after the takeover yet: %s", e.stderr or e.message)
        self._keep_looking(int(stored.window_until))

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
        """Clear the repairs at a clean update-status (window closed, nothing repaired now)."""
        if not self._repaired_now and time.time() > self._stored.window_until:
            self._stored.repairs = []

    def statuses(self) -> Iterator[ops.StatusBase]:
        """Say what was repaired after the takeover, until a clean update-status."""
        repairs: Sequence[str] = list(self._stored.repairs)
        if not repairs:
            return
        shown = "; ".join(repairs[:SHOWN])
        if len(repairs) > SHOWN:
            shown += f"; {len(repairs) - SHOWN} more (see the unit's log)"
        yield ops.ActiveStatus(f"repaired after takeover: {shown}")

    def _repair(self, since: float, log: Path) -> None:
        """Resume nodes, then release and requeue jobs, that the takeover left behind."""
        for node in self.scontrol.show_nodes():
            if drained_by_launch(node, self.slurm_user, since) and self._new(f"node {node.name}"):
                self.scontrol.update_node(node.name, state="resume")
                self._record(f"node {node.name}", f"resumed {node.name} ({node.reason})")
        jobs = self.scontrol.show_jobs()
        revoked = revoked_launches(log, since)
        for job in jobs:
            key = f"job {job.job_id}"
            if held_for_launch(job, since) and self._new(key):
                self.scontrol.release([job.job_id])
                self._record(key, f"released job {job.job_id} (held after a refused launch)")
            elif ended_for_revoked(job, revoked, since) and self._new(key):
                self.scontrol.requeue([job.job_id])
                self._record(key, f"requeued job {job.job_id} (killed: credential revoked)")

    def _new(self, key: str) -> bool:
        """Whether `key` (a job or node) was not repaired yet after this takeover."""
        return key not in self._stored.done

    def _record(self, key: str, repair: str) -> None:
        logger.warning("takeover repair: %s", repair)
        self._repaired_now = True
        self._stored.done = [*self._stored.done, key]
        self._stored.repairs = [*self._stored.repairs, repair]
