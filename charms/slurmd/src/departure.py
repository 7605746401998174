"""Leaving the cluster without killing jobs, on Juju where the machine goes with the unit.

Juju destroys a removed unit's machine right after the unit's `remove` hook, so nothing may
wait for jobs after the hooks end. The departing unit therefore waits in its own hook, the
first of relation-departed (its own, on the slurmctld endpoint), relation-broken, stop or
remove to run. That hook holds only this unit's machine; every other unit goes on.

The sequence (`Departure.leave`), every step bounded except the wait for jobs, which
`retire-timeout` bounds, and every failure logged, never raised:

1. stop a running re-registration (its transient unit would restart slurmd);
2. drain the node (`RETIRE_REASON`), unless slurmctld no longer knows it;
3. every 5 s, look at the job steps running on the machine (`SlurmdManager.running_jobs`:
   the processes, not `scontrol listjobs`, which counts the sockets a power cut leaves
   behind) until none runs, saying in the unit's status how many jobs it waits for;
4. at the timeout, requeue the jobs that can be requeued and cancel the others;
5. `scontrol delete nodename=<node>` (retried: it is refused while jobs complete). The node
   is deleted before slurmd stops, because configless `scontrol` finds the cluster through
   slurmd's runtime directory;
6. stop and disable slurmd, delete slurm.key (and slurm.jwks, the key set of a rotation).
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import node
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import systemd
from hpc_libs.slurm.naming import RETIRE_REASON
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmd import SlurmdManager

logger = logging.getLogger(__name__)

POLL_SECONDS = 5
DELETE_ATTEMPTS = 12
SCONTROL_TIMEOUT = 30
"""Seconds for each scontrol call while leaving (the controller may be gone)."""


@dataclass
class Outcome:
    """What the departure did to the node's jobs and to the node."""

    requeued: list[int] = field(default_factory=list[int])
    cancelled: list[int] = field(default_factory=list[int])

    def summary(self) -> str:
        """One line for the status and the log: which jobs were requeued or cancelled."""
        parts: list[str] = []
        if self.requeued:
            parts.append(f"requeued {_ids(self.requeued)}")
        if self.cancelled:
            parts.append(f"cancelled {_ids(self.cancelled)}")
        return "; ".join(parts)


@dataclass
class Departure:
    """Take node `name` out of the cluster, waiting for its jobs.

    `report` receives each status line while the unit leaves (the charm sets it as the
    unit's status at once: the one place status is set inside a hook).
    """

    name: str
    slurmd: SlurmdManager
    report: Callable[[str], None]
    scontrol: Scontrol = field(default_factory=lambda: Scontrol(timeout=SCONTROL_TIMEOUT))

    def leave(self, *, enlisted: bool, timeout: int | None) -> Outcome:
        """Leave the cluster; `timeout` seconds bound the wait for jobs (None: no bound).

        A node that never enlisted only has slurmd stopped and the key deleted.
        """
        self._stop_reregistration()
        outcome = self._retire(timeout) if enlisted else Outcome()
        self._stop_slurmd()
        self._delete_key()
        logger.info("node %s left the cluster %s", self.name, outcome.summary() or "")
        return outcome

    def _retire(self, timeout: int | None) -> Outcome:
        if self._already_deleted():
            logger.info("node %s is no longer in the cluster", self.name)
            return Outcome()
        node.drain(self.scontrol, self.name, RETIRE_REASON)
        outcome = Outcome()
        remaining = self._wait_for_jobs(timeout)
        if remaining is not None:
            outcome = self._evict(remaining)
        self._delete()
        return outcome

    def _stop_reregistration(self) -> None:
        transient = systemd.Service(node.reregister_unit(self.name))
        if transient.is_active():
            logger.info("stopping the re-registration of node %s", self.name)
            try:
                transient.stop()
            except SlurmOpsError as e:
                logger.warning("cannot stop %s: %s", transient.name, e)

    def _already_deleted(self) -> bool:
        """Whether slurmctld says it does not know the node (False when it cannot say)."""
        try:
            return self.scontrol.show_node(self.name) is None
        except SlurmOpsError as e:
            logger.warning("cannot look node %s up, retiring it anyway: %s", self.name, e)
            return False

    def _wait_for_jobs(self, timeout: int | None) -> list[int] | None:
        """Wait until no job runs on the node; return the jobs left at the timeout, or None.

        An empty list at the timeout means jobs may run whose ids could not be read.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while (jobs := self._running_jobs()) is None or jobs:
            if deadline is not None and time.monotonic() >= deadline:
                return jobs or []
            self.report(f"leaving: waiting for {_jobs_text(jobs)}")
            time.sleep(POLL_SECONDS)
        return None

    def _running_jobs(self) -> list[int] | None:
        """Return the node's job ids; None when jobs may run whose ids cannot be read."""
        try:
            return self.slurmd.running_jobs()
        except SlurmOpsError as e:
            logger.warning("cannot tell which jobs run on this machine: %s", e)
            return None

    def _evict(self, jobs: list[int]) -> Outcome:
        """At the timeout: requeue the jobs that can be, cancel the rest (or all: no ids)."""
        requeueable = [job for job in jobs if self._requeueable(job)]
        outcome = Outcome(
            requeued=requeueable, cancelled=[j for j in jobs if j not in requeueable]
        )
        if outcome.requeued:
            try:
                self.scontrol.requeue(outcome.requeued)
            except SlurmOpsError as e:
                logger.warning("cannot requeue jobs %s, cancelling them: %s", outcome.requeued, e)
                outcome = Outcome(cancelled=jobs)
        try:
            if not jobs:
                self.scontrol.cancel_node_jobs(self.name)
            elif outcome.cancelled:
                self.scontrol.cancel(outcome.cancelled)
        except SlurmOpsError as e:
            logger.warning("cannot cancel the jobs on node %s: %s", self.name, e)
        message = f"leaving: retire-timeout reached: {outcome.summary() or 'cancelled its jobs'}"
        logger.warning("node %s %s", self.name, message)
        self.report(message)
        return outcome

    def _requeueable(self, job_id: int) -> bool:
        try:
            job = self.scontrol.show_job(job_id)
        except SlurmOpsError as e:
            logger.warning("cannot tell whether job %s can be requeued: %s", job_id, e)
            return False
        return job is not None and job.requeueable

    def _delete(self) -> None:
        """Delete the node, retrying while its last jobs complete (a warning if it never works)."""
        for attempt in range(DELETE_ATTEMPTS):
            try:
                self.scontrol.delete_node(self.name)
            except SlurmOpsError as e:
                if "Invalid node name" in str(e):
                    return
                logger.info("cannot delete node %s yet: %s", self.name, e)
                if attempt < DELETE_ATTEMPTS - 1:
                    time.sleep(POLL_SECONDS)
                continue
            logger.info("deleted node %s", self.name)
            return
        logger.warning(
            "could not delete node %s; an administrator can run "
            "`scontrol delete nodename=%s` on a controller",
            self.name,
            self.name,
        )

    def _stop_slurmd(self) -> None:
        self.slurmd.service.stop_for_good()

    def _delete_key(self) -> None:
        try:
            self.slurmd.key.path.unlink(missing_ok=True)
            self.slurmd.key.remove_key_set()
        except (OSError, SlurmOpsError) as e:
            logger.warning("cannot delete %s: %s", self.slurmd.key.path, e)


def _jobs_text(jobs: list[int] | None) -> str:
    """Say `2 jobs (1234,1235)`; `running jobs` when their ids are unknown."""
    if not jobs:
        return "running jobs"
    return f"{len(jobs)} job{'s' if len(jobs) != 1 else ''} ({_ids(jobs)})"


def _ids(jobs: list[int]) -> str:
    return ",".join(str(job) for job in jobs)
