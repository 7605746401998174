"""The soak's history and its invariants (issue 37, item 2), checked over what was recorded.

Pure: the driver (`soak.py`) records submissions, faults, job states seen, the runs the jobs
wrote on their nodes and the `lost-jobs` reports; the checks here turn them into the report's
job counts and violations, each with its evidence and time.

Slurm's output is read only where its fields cannot hold a separator (ids, states, node
names): `squeue --json`, and sacct's `JobIDRaw|State` (`parse_sacct` counts the fields).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SAVE_MARGIN_S = 6.0
"""Slurm saves its state at most every 5 s; an id handed out this long before a hard fault of
the controller in charge is saved (issue 37: 5 s plus a margin)."""
DONE = "COMPLETED"
NODE_FAIL = "NODE_FAIL"
HARD_KINDS = ("kill", "power", "network")
OWN_END = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"})
"""Ends a job can reach by its own exit or its own limit."""
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"})
MIN_SECRET = 16
"""Secret values shorter than this are not looked for (they would match ordinary text)."""


@dataclass
class Submission:
    job_id: str
    at: float
    """When sbatch returned the id (epoch seconds)."""
    shape: dict[str, Any]


@dataclass
class FaultRecord:
    kind: str
    target: str
    """The unit (or units) it hit."""
    at: float
    repaired_at: float | None = None
    controller_in_charge: bool = False
    """A hard fault of the controller serving at the time."""
    nodes: list[str] = field(default_factory=list)
    """The Slurm nodes it took down (compute units' nodes)."""
    convergence_s: float | None = None
    note: str = ""
    late_s: float = 0.0
    """How long after its scheduled time it came (a fault before it, an action, took long)."""


@dataclass
class Violation:
    invariant: str
    evidence: str
    at: float


@dataclass
class JobSeen:
    """The last state of a job the controller reported, and every node it was seen on."""

    state: str
    restarts: int
    nodes: set[str]
    at: float
    ended: float | None = None
    """When the job ended, as the controller said (None while it is live)."""


@dataclass
class Run:
    """One start of a job's script on a node, as the script wrote it."""

    job_id: str
    restart: int
    host: str
    start: float
    end: float | None
    last_alive: float | None = None


@dataclass
class Tally:
    submitted: int = 0
    completed: int = 0
    failed_own_exit: int = 0
    ended_by_node_fault: int = 0
    requeued: int = 0
    lost_reported: int = 0
    lost_unreported: int = 0
    unfinished: int = 0
    end_lost_by_controller_fault: int = 0
    """Ended NODE_FAIL: its script had ended less than `SAVE_MARGIN_S` before a hard fault of
    the controller in charge, which had not saved the end (`ends_lost_by_the_controller`)."""


def hard_controller_fault_times(faults: Iterable[FaultRecord]) -> list[float]:
    """When a hard fault hit a controller (any: a backup may be serving at the time)."""
    return [f.at for f in faults if f.kind in HARD_KINDS and _ctl(f.target)]


def _ctl(target: str) -> bool:
    return target.startswith("slurmctld/")


def ends_lost_by_the_controller(runs: Iterable[Run], faults: Iterable[FaultRecord]) -> set[str]:
    """The jobs whose last run's script ended less than `SAVE_MARGIN_S` before a hard fault of
    the controller in charge.

    Such an end may be in no state save: the new primary thinks the job still runs until its
    node registers, then Slurm requeues it if it may be, else ends it as a node failure
    (NODE_FAIL); the charm has the nodes register at once after a takeover (slurmctld's
    `takeover._register_busy_nodes`). Its real end is then known only on its node.
    """
    in_charge_down = [f.at for f in faults if f.kind in HARD_KINDS and f.controller_in_charge]
    last: dict[str, Run] = {}
    for run in runs:
        if run.job_id not in last or run.restart > last[run.job_id].restart:
            last[run.job_id] = run
    return {
        job_id
        for job_id, run in last.items()
        if run.end is not None and any(0 <= t - run.end < SAVE_MARGIN_S for t in in_charge_down)
    }


def at_risk(submitted_at: float, fault_times: Iterable[float]) -> bool:
    """Whether a hard controller fault came less than `SAVE_MARGIN_S` after the submission."""
    return any(0 <= t - submitted_at < SAVE_MARGIN_S for t in fault_times)


def base_state(state: str) -> str:
    """sacct's `CANCELLED by 0` and squeue's flags to the state's one word."""
    return state.split(" ", 1)[0].split(",", 1)[0].upper()


def parse_sacct(output: str) -> dict[str, str]:
    """`sacct -X -n -P -o JobIDRaw,State`: state by id; records not of 2 fields are dropped."""
    states: dict[str, str] = {}
    for line in output.split("\n"):
        fields = line.split("|")
        if len(fields) == 2 and fields[0].isdigit():
            states[fields[0]] = base_state(fields[1])
    return states


def parse_squeue_json(document: Mapping[str, Any], at: float) -> dict[str, JobSeen]:
    """`squeue --states=all --json`: each job's state, restarts and nodes."""
    seen: dict[str, JobSeen] = {}
    for job in document.get("jobs", []):
        state = job.get("job_state", [])
        states = state if isinstance(state, list) else [state]
        nodes = str(job.get("nodes") or "")
        state_now = base_state(str(states[0]) if states else "UNKNOWN")
        seen[str(job["job_id"])] = JobSeen(
            state=state_now,
            restarts=int(job.get("restart_cnt") or 0),
            nodes=set(expand_nodes(nodes)),
            at=at,
            ended=None if state_now in LIVE else _time_of(job.get("end_time")),
        )
    return seen


def _time_of(field: Any) -> float | None:
    """A time in data_parser's `{"set": .., "number": ..}` form; None when not set."""
    if isinstance(field, Mapping) and field.get("set") and field.get("number"):
        return float(field["number"])
    return None


def expand_nodes(hostlist: str) -> list[str]:
    """Slurm's compact node list (`compute-[0-1],scaled-3`) to names; only the charms' names
    (`<app>-<n>`) are expanded, anything else is kept as it is."""
    names: list[str] = []
    for part in _split_top(hostlist):
        if "[" in part and part.endswith("]"):
            prefix, ranges = part[:-1].split("[", 1)
            for item in ranges.split(","):
                low, _, high = item.partition("-")
                if low.isdigit() and (not high or high.isdigit()):
                    names += [f"{prefix}{n}" for n in range(int(low), int(high or low) + 1)]
        elif part:
            names.append(part)
    return names


def _split_top(hostlist: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in hostlist:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def merge_seen(into: dict[str, JobSeen], new: Mapping[str, JobSeen]) -> None:
    """Keep each job's latest state and every node it was seen on."""
    for job_id, seen in new.items():
        old = into.get(job_id)
        if old is not None:
            seen.nodes |= old.nodes
            seen.restarts = max(seen.restarts, old.restarts)
        into[job_id] = seen


def node_faults(faults: Iterable[FaultRecord]) -> dict[str, list[FaultRecord]]:
    """The faults that took each Slurm node down."""
    by_node: dict[str, list[FaultRecord]] = {}
    for fault in faults:
        for node in fault.nodes:
            by_node.setdefault(node, []).append(fault)
    return by_node


@dataclass
class Ends:
    """What the end of a run knows of the jobs, and the faults it injected."""

    final: Mapping[str, JobSeen]
    """The controller's last list."""
    history: Mapping[str, JobSeen]
    """Every state seen during the run (for each job's nodes and restarts)."""
    sacct: Mapping[str, str]
    reported: set[str]
    """The ids `lost-jobs` reported, on any controller unit at any time."""
    faults: list[FaultRecord]
    at: float
    runs: Iterable[Run] = ()
    """Each start of a job's script on a node, as the script wrote it."""


def classify(submissions: Iterable[Submission], ends: Ends) -> tuple[Tally, list[Violation]]:
    """Each submitted job's fate, and the jobs that break the invariants.

    A job is lost when the controller no longer knows it at the end and accounting has no
    end for it. Lost and reported by `lost-jobs` is allowed only for a job at risk (its id
    handed out less than `SAVE_MARGIN_S` before a hard controller fault); lost and not
    reported is `lost_unreported` (the run fails). A job that did not complete is excused
    only when a fault took one of its nodes down, or by its own exit.
    """
    tally, violations = Tally(), []
    fault_times = hard_controller_fault_times(ends.faults)
    by_node = node_faults(ends.faults)
    unsaved_ends = ends_lost_by_the_controller(ends.runs, ends.faults)
    for sub in submissions:
        tally.submitted += 1
        job = ends.history.get(sub.job_id)
        if job is not None and job.restarts:
            tally.requeued += 1
        accounted = ends.sacct.get(sub.job_id)
        if sub.job_id in ends.final:
            state: str | None = ends.final[sub.job_id].state
        else:
            state = accounted if accounted not in (None, *LIVE) else None
        if state is None:
            violation = _lost(sub, ends, at_risk(sub.at, fault_times), accounted, tally)
        elif state == DONE:
            tally.completed += 1
            violation = None
        elif state in LIVE:
            tally.unfinished += 1
            violation = ("a job did not finish in the settle phase", f"still {state} at the end")
        elif state == NODE_FAIL and sub.job_id in unsaved_ends:
            tally.end_lost_by_controller_fault += 1
            violation = None
        else:
            violation = _ended(sub, job, state, by_node, tally)
        if violation is not None:
            invariant, evidence = violation
            violations.append(Violation(invariant, f"job {sub.job_id} {evidence}", ends.at))
    return tally, violations


def _lost(
    sub: Submission, ends: Ends, risky: bool, accounted: str | None, tally: Tally
) -> tuple[str, str] | None:
    """Count a job the controller and accounting no longer know; the invariant it breaks."""
    if sub.job_id not in ends.reported:
        tally.lost_unreported += 1
        return (
            "lost in silence",
            f"submitted {sub.at:.1f} (at risk: {risky}); unknown to slurmctld, sacct "
            f"{accounted or 'has no record'}, not in lost-jobs",
        )
    tally.lost_reported += 1
    if risky:
        return None
    return "a job saved before any controller fault was lost", f"submitted {sub.at:.1f}"


def _ended(
    sub: Submission,
    job: JobSeen | None,
    state: str,
    by_node: Mapping[str, list[FaultRecord]],
    tally: Tally,
) -> tuple[str, str] | None:
    """Count a job that ended other than COMPLETED; the invariant it breaks, if it does."""
    nodes = sorted(job.nodes) if job is not None else []
    if any(f.at >= sub.at for node in nodes for f in by_node.get(node, [])):
        tally.ended_by_node_fault += 1
        return None
    if state in OWN_END and sub.shape.get("exit_code"):
        tally.failed_own_exit += 1
        return None
    return (
        "a job ended other than COMPLETED without a fault of its node",
        f"({sub.shape}) ended {state} on {nodes or '?'}",
    )


def sacct_disagreements(
    seen: Mapping[str, JobSeen], sacct: Mapping[str, str], at: float
) -> list[Violation]:
    """Finished jobs whose state in accounting is not the controller's."""
    out: list[Violation] = []
    for job_id, job in sorted(seen.items()):
        if job.state in LIVE or job_id not in sacct:
            continue
        if sacct[job_id] != job.state:
            out.append(
                Violation(
                    "sacct disagrees with slurmctld on a finished job",
                    f"job {job_id}: slurmctld {job.state}, sacct {sacct[job_id]}",
                    at,
                )
            )
    return out


def overlapping_runs(runs: Iterable[Run]) -> list[Violation]:
    """Two runs of the same job id at once (each run: its start to its end, or to when its
    script was last seen alive; a run neither ended nor seen alive counts as an instant)."""
    by_job: dict[str, list[Run]] = {}
    for run in runs:
        by_job.setdefault(run.job_id, []).append(run)
    out: list[Violation] = []
    for job_id, job_runs in sorted(by_job.items()):
        spans = sorted((r.start, r.end or r.last_alive or r.start, r) for r in job_runs)
        for (_, first_end, first), (second_start, _, second) in itertools.pairwise(spans):
            if second_start < first_end:
                out.append(
                    Violation(
                        "a job id ran twice at once",
                        f"job {job_id}: run {first.restart} on {first.host} "
                        f"{first.start:.1f}-{first_end:.1f}, run {second.restart} on "
                        f"{second.host} from {second_start:.1f}",
                        second_start,
                    )
                )
    return out


FAULTS_THAT_FAIL_HOOKS = ("hook-kill", "power")
"""Faults that fail a hook on their machine by design: the soak kills the charm's process
(`hook-kill`: every charm process on the machine, a subordinate's too) or cuts the power under
a running hook. Any other hook failure is the charm's: it turns failures into statuses."""


HOOK_FAILURE = re.compile(
    r'unit-(?P<app>[a-z0-9-]+)-(?P<number>[0-9]+): (?P<stamp>\S+) ERROR hook "(?P<hook>[^"]+)" '
    r"(?:failed|lost)"
)
"""How the lab's debug log says a hook failed (it raised, exited non-zero, or its process
died); the lines after it, up to the next unit's line, are what the hook printed."""


@dataclass
class HookFailure:
    unit: str
    hook: str
    stamp: str
    text: str
    """The log line and the hook's output after it (its traceback)."""


def hook_failures(lines: list[str]) -> list[HookFailure]:
    """The hook failures in these lines of the lab's debug log, in order."""
    found: list[HookFailure] = []
    for line in lines:
        match = HOOK_FAILURE.match(line)
        if match is not None:
            unit = f"{match['app']}/{match['number']}"
            found.append(HookFailure(unit, match["hook"], match["stamp"], line))
        elif found and not line.startswith("unit-"):
            found[-1].text += "\n" + line
    return found


def hook_failure_cause(
    unit: str, open_faults: Iterable[FaultRecord], machine_of: Callable[[str], str | None]
) -> str:
    """The fault that may have failed a hook of `unit` ("" if none): one of
    `FAULTS_THAT_FAIL_HOOKS` on the unit's machine, held or not yet converged (`open_faults`).
    `machine_of` gives a unit's machine, None for a unit that is gone."""
    machine = machine_of(unit)
    if machine is None:
        return ""
    for record in open_faults:
        if record.kind in FAULTS_THAT_FAIL_HOOKS and machine_of(record.target) == machine:
            return f"{record.kind} {record.target}"
    return ""


def secret_leaks(texts: Mapping[str, str], secrets: Iterable[str], at: float) -> list[Violation]:
    """Secret values found in texts (logs, databags, statuses, action outputs).

    The evidence names where, and the secret only by its length: the report is no place for it.
    """
    wanted = sorted({s for s in secrets if len(s) >= MIN_SECRET})
    out: list[Violation] = []
    for where, text in sorted(texts.items()):
        for number, secret in enumerate(wanted):
            if secret in text:
                out.append(
                    Violation(
                        "a secret appears outside its secret",
                        f"secret #{number} ({len(secret)} characters) in {where}",
                        at,
                    )
                )
    return out


def secret_values(content: Mapping[str, str]) -> list[str]:
    """The values of a secret's content worth looking for (all of them, by `MIN_SECRET`)."""
    return [value for value in content.values() if len(value) >= MIN_SECRET]


def deployed_and_active(status: Any) -> bool:
    """Whether every application that has units is active, and its units (a jubilant Status).

    An application scaled to zero (the autoscaled one before its first unit) has no unit to
    derive its status from and stays `unknown` on Juju as on the lab: `jubilant.all_active`
    over every application would wait for it forever.
    """
    with_units = [name for name in status.apps if status.get_units(name)]
    return bool(with_units) and all(
        status.apps[name].app_status.current == "active"
        and all(u.workload_status.current == "active" for u in status.get_units(name).values())
        for name in with_units
    )


def autoscaler_removed_busy(
    submissions: Iterable[Submission],
    seen: Mapping[str, JobSeen],
    final: Mapping[str, JobSeen],
    removed: Mapping[str, float],
) -> list[Violation]:
    """A job that ran on a node the autoscaler removed (`removed`: node -> when) and did not
    complete, unless it failed by its own exit (a job meant to fail, `exit_code` not 0) or
    had ended before the removal (a fault of the node, long before: seed 1129)."""
    meant_to_fail = {s.job_id for s in submissions if s.shape.get("exit_code")}
    out = []
    for job_id, job in seen.items():
        last = final.get(job_id, job)
        on = sorted(
            node
            for node in job.nodes & set(removed)
            if last.ended is None or last.ended >= removed[node]
        )
        state = last.state
        if not on or state == DONE or (state in OWN_END and job_id in meant_to_fail):
            continue
        out.append(
            Violation(
                "the autoscaler removed a node with a job",
                f"job {job_id} on {on} ended {state}",
                min(removed[n] for n in on),
            )
        )
    return out
