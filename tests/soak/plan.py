"""What a soak run does, drawn up front from its seed: the fault schedule and the jobs.

Pure: no lab, no clock. The same seed gives the same schedule (`draw_schedule`) and the same
sequence of job shapes (`JobStream`); the driver (`soak.py`) prints the schedule before the run
and resolves each fault's target (`Fault.app`, `Fault.pick`) against the units that exist
when the fault comes due.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

HARD = ("kill", "power", "network")
"""Faults that take a machine (or its daemon) down for `hold_s`, then undo it."""
KINDS = (
    *HARD,
    "remove-unit",
    "add-unit-during-hook",
    "hook-kill",
    "rebuild-nodes",
    "rotate-auth-key",
    "rotate-jwt-key",
    "config-slurmctld",
    "config-slurmd",
    "leader-change",
)
WEIGHTS = {
    "kill": 4,
    "power": 3,
    "network": 3,
    "remove-unit": 1,
    "add-unit-during-hook": 1,
    "hook-kill": 1,
    "rebuild-nodes": 1,
    "rotate-auth-key": 1,
    "rotate-jwt-key": 1,
    "config-slurmctld": 1,
    "config-slurmd": 1,
    "leader-change": 1,
}
HARD_TARGETS = ("slurmctld", "slurmctld", "slurmdbd", "compute", "scaled", "login", "slurmrestd")
"""Whose machine a hard fault hits (the controllers twice as often: they are what fails over)."""
TARGETS = {
    "remove-unit": ("compute", "slurmctld", "slurmdbd"),
    "add-unit-during-hook": ("compute", "slurmctld"),
    "hook-kill": ("slurmctld", "compute"),
    "leader-change": ("slurmctld", "slurmdbd", "compute"),
    "rebuild-nodes": ("compute",),
    "config-slurmd": ("compute",),
}
USER_APPS = ("slurmctld", "login", "compute", "scaled")
"""Where the workload's users must exist: the login node submits as them, the compute nodes
run as them, and slurmctld resolves each job's user to sign its credential (Slurm 24.11's
`fetch_identity`; a user it cannot resolve gets the job held, `JobHeldAdmin`)."""
WARM_UP_S = 60.0
"""Seconds of workload before the first fault."""
FIRST_CONTROLLER = "primary"
"""`Fault.pick` for a controller fault aimed at the one in charge (`pick` < 0)."""


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: when (seconds from the start), what, and on whom."""

    at_s: float
    kind: str
    app: str
    pick: int
    """Which unit of `app` (index into its sorted units, modulo their count); -1 for a
    controller fault: the controller in charge."""
    hold_s: float
    """How long a hard fault stays before it is undone (0 for the others)."""

    def describe(self) -> str:
        who = f"{self.app}/{FIRST_CONTROLLER}" if self.pick < 0 else f"{self.app}[{self.pick}]"
        hold = f" for {self.hold_s:.0f}s" if self.hold_s else ""
        return f"{self.at_s:7.1f}s {self.kind:22} {who}{hold}"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def draw_schedule(
    seed: int, minutes: float, *, gap_s: float = 60.0, kinds: tuple[str, ...] = KINDS
) -> list[Fault]:
    """Draw the faults of a run of `minutes` from `seed`: a fault every `gap_s` on average.

    Gaps are uniform in [gap_s / 2, 3 gap_s / 2]; faults come from `WARM_UP_S` until the end
    of the fault phase. Targets: hard faults any application's machine, controllers twice as
    likely, half of those aimed at the controller in charge.
    """
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = WARM_UP_S
    end = minutes * 60
    weights = [WEIGHTS[k] for k in kinds]
    while True:
        at += rng.uniform(gap_s / 2, 3 * gap_s / 2)
        if at >= end:
            return faults
        kind = rng.choices(kinds, weights)[0]
        if kind in HARD:
            app = rng.choice(HARD_TARGETS)
            pick = -1 if app == "slurmctld" and rng.random() < 0.5 else rng.randrange(1000)
            hold = rng.uniform(15, 60)
        else:
            app = rng.choice(TARGETS.get(kind, ("slurmctld",)))
            pick, hold = rng.randrange(1000), 0.0
        faults.append(Fault(round(at, 1), kind, app, pick, round(hold, 1)))


@dataclass(frozen=True)
class JobShape:
    """One job of the workload."""

    partition: str
    nodes: int
    seconds: int
    requeue: bool
    steps: bool
    """Whether the batch script runs its work as an `srun` step (else in the batch step)."""
    user: str
    exit_code: int
    """What the script exits with: not 0 for a job meant to fail by its own exit."""

    def sbatch_options(self) -> list[str]:
        return [
            f"--partition={self.partition}",
            f"--nodes={self.nodes}",
            "--mem=1",
            f"--time={max(2, self.seconds // 60 + 2)}",
            "--requeue" if self.requeue else "--no-requeue",
            "--output=/dev/null",
            "--chdir=/tmp",
        ]


class JobStream:
    """The workload's job shapes, one after the other, from `seed` (its own generator)."""

    def __init__(
        self, seed: int, users: tuple[str, ...], partitions: tuple[str, ...], max_nodes: int = 2
    ) -> None:
        self._rng = random.Random(f"jobs-{seed}")
        self.users = users
        self.partitions = partitions
        self.max_nodes = max_nodes
        """The most nodes a job asks for (in the first partition; one elsewhere)."""

    def next(self) -> JobShape:
        rng = self._rng
        partition = rng.choice(self.partitions)
        return JobShape(
            partition=partition,
            nodes=self.max_nodes if partition == self.partitions[0] and rng.random() < 0.2 else 1,
            seconds=rng.choice((3, 5, 10, 20, 40, 90)),
            requeue=rng.random() < 0.6,
            steps=rng.random() < 0.4,
            user=rng.choice(self.users),
            exit_code=3 if rng.random() < 0.1 else 0,
        )


def user_machines(units: Mapping[str, list[str]], machine_of: Callable[[str], str]) -> list[str]:
    """The machines of `USER_APPS`' units (`units`: each application's current units), in
    order, each once: a unit added later (a replaced controller, an autoscaled node) too."""
    machines = [machine_of(u) for app in USER_APPS for u in units.get(app, [])]
    return list(dict.fromkeys(machines))
