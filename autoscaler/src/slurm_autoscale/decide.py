"""The decision for one slurmd application: how many units to add, or which units to remove.

A pure function of the policy, the application's units (from Juju), one look at Slurm and the
time of the last action, so every rule is tested over recorded Slurm answers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from hpc_libs.slurm.naming import RETIRE_REASON, node_name

from slurm_autoscale.policy import AppPolicy
from slurm_autoscale.slurm import Job, Node, Snapshot

NOT_FOR_CAPACITY = (
    "Dependency",
    "DependencyNeverSatisfied",
    "JobHeldUser",
    "JobHeldAdmin",
    "BeginTime",
    "Reservation",
    "PartitionDown",
    "PartitionInactive",
    "PartitionTimeLimit",
    "InvalidAccount",
    "InvalidQOS",
    "Assoc",
    "QOS",
    "PartitionNodeLimit",
    "BadConstraints",
)
"""Pending reasons (prefixes) that more nodes would not cure: holds, dependencies, start
times, limits of accounts and QOS. Any other reason (Resources, Priority, ReqNodeNotAvail, the
FUTURE-node reasons of an empty partition) counts as a job waiting for capacity."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do for one application, and why (the reason is logged either way)."""

    app: str
    add: int = 0
    remove: tuple[str, ...] = ()
    reason: str = ""

    def describe(self) -> str:
        """`compute: +2, ...`, `compute: -1 (compute/3), ...` or `compute: no change, ...`."""
        if self.add:
            return f"{self.app}: +{self.add}, {self.reason}"
        if self.remove:
            return f"{self.app}: -{len(self.remove)} ({', '.join(self.remove)}), {self.reason}"
        return f"{self.app}: no change, {self.reason}"


@dataclasses.dataclass(frozen=True)
class Shape:
    """The CPUs and memory of one of the application's machines, where known."""

    cpus: int | None
    memory: int | None

    def fits(self, job: Job) -> bool:
        """Whether one node of this shape holds one node's share of the job."""
        cpus_ok = self.cpus is None or job.cpus_per_node <= self.cpus
        memory_ok = self.memory is None or job.memory_per_node <= self.memory
        return cpus_ok and memory_ok


def shape_of(nodes: list[Node], policy: AppPolicy) -> Shape:
    """Return the largest registered node's shape, or the policy's while none is up."""
    if nodes:
        return Shape(max(n.cpus for n in nodes), max(n.real_memory for n in nodes))
    return Shape(policy.cpus, policy.memory)


def waits_for_capacity(job: Job, app: str) -> bool:
    """Whether the job is pending in the app's partition for want of nodes."""
    in_partition = app in job.partition.split(",")
    return in_partition and not job.reason.startswith(NOT_FOR_CAPACITY)


def decide(
    app: str,
    policy: AppPolicy,
    units: list[str],
    slurm: Snapshot,
    *,
    now: dt.datetime,
    last_action: float | None = None,
) -> Decision:
    """Decide for `app`, whose Juju units are `units`, from one look at Slurm.

    Scale-up is never held back: pending work is served at once, and units still enlisting
    already count as capacity, so a second pass does not add them again. The cooldown (from
    `last_action`, this application's last add or removal) holds only scale-in, so a node
    that just joined is not taken away before its jobs are scheduled, and removals follow
    each other no faster than one step per cooldown.
    """
    by_name = {node.name: node for node in slurm.nodes}
    node_of = {unit: by_name.get(node_name(unit)) for unit in units}
    leaving = {u for u, n in node_of.items() if n is not None and n.reason == RETIRE_REASON}
    staying = [u for u in units if u not in leaving]
    enlisting = [u for u in staying if node_of[u] is None]
    registered = [n for u in staying if (n := node_of[u]) is not None]
    floor = policy.minimum_at(now)

    waiting = [job for job in slurm.pending if waits_for_capacity(job, app)]
    shape = shape_of(registered, policy)
    never: list[Job] = []
    fitting: list[Job] = []
    for job in waiting:
        fits = job.node_count <= policy.max and shape.fits(job)
        (fitting if fits else never).append(job)
    needed = sum(job.nodes_wanted for job in fitting)
    free = [n for n in registered if n.usable and not n.busy and n.name not in slurm.reserved]
    short = needed - len(free) - len(enlisting)

    add = max(short, floor - len(staying), 0)
    add = min(add, policy.max - len(staying), policy.step)
    demand = _demand(fitting, needed, never, free, enlisting)
    if add > 0:
        return Decision(app, add=add, reason=demand)
    if short > 0:
        return Decision(app, reason=f"{demand}; at max {policy.max}")
    if fitting:
        return Decision(app, reason=demand)
    if last_action is not None and slurm.now - last_action < policy.cooldown:
        left = policy.cooldown - (slurm.now - last_action)
        return Decision(app, reason=f"{demand}; scale-in cooling down ({left:.0f} s left)")
    return _scale_in(app, policy, staying, node_of, slurm, floor=floor, demand=demand)


def _demand(
    fitting: list[Job], needed: int, never: list[Job], free: list[Node], enlisting: list[str]
) -> str:
    """`3 pending jobs need 4 nodes, 1 idle, 2 enlisting; 1 can never fit (job 7)`."""
    text = f"{sum(job.jobs for job in fitting)} pending jobs need {needed} nodes, {len(free)} idle"
    text += f", {len(enlisting)} enlisting"
    if never:
        ids = ", ".join(str(job.job_id) for job in never[:5])
        text += f"; {sum(job.jobs for job in never)} can never fit (job {ids})"
    return text


def _scale_in(
    app: str,
    policy: AppPolicy,
    staying: list[str],
    node_of: dict[str, Node | None],
    slurm: Snapshot,
    *,
    floor: int,
    demand: str,
) -> Decision:
    """Remove units whose nodes have been idle for idle-timeout, down to the floor."""
    idle_since: dict[str, int] = {}
    for unit in staying:
        node = node_of[unit]
        if node is None or node.busy or not node.usable or node.name in slurm.reserved:
            continue  # Enlisting, running jobs, drained by an operator, down, or reserved.
        if slurm.now - node.last_busy >= policy.idle_timeout:
            idle_since[unit] = node.last_busy
    room = len(staying) - floor
    count = min(len(idle_since), room, policy.step)
    if count <= 0:
        why = f"{len(idle_since)} idle past {policy.idle_timeout} s, {len(staying)} units"
        return Decision(app, reason=f"{demand}; {why}, floor {floor}")
    chosen = sorted(idle_since, key=lambda unit: (idle_since[unit], unit))[:count]
    why = f"idle for at least {policy.idle_timeout} s, {len(staying)} units, floor {floor}"
    return Decision(app, remove=tuple(chosen), reason=f"{demand}; {why}")
