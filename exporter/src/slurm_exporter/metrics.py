"""Slurm's state as Prometheus samples, parsed from the cheapest commands that answer.

The exporter (`slurm_exporter.exporter`) runs these commands in the background and serves
each scrape from the last `Snapshot`, so a scrape costs the same at any cluster size:

* `scontrol ping --json`: each controller's answer (one ping RPC per controller);
* `sdiag --json`: the scheduler, backfill, RPC and slurmdbd-agent statistics (one RPC);
* `sinfo --Node` with a format string (`SINFO_FORMAT`): one line per node and partition
  with its complete state (`idle+drain`), CPUs and GRES; a second one (`SINFO_REASON_FORMAT`)
  for the nodes' reasons;
* `squeue` with a format string (`SQUEUE_FORMAT`), not `--json`: at scale the JSON took
  minutes where the plain format takes seconds; with per-user series a second one
  (`SQUEUE_ACCOUNT_FORMAT`) for the jobs' accounts.

Slurm prints users' and operators' text verbatim, newlines included: an account (any text
while `AccountingStorageEnforce` is unset), a node's reason. A newline in such a field starts
a line that may read as a whole record, so no listing that counts nodes or jobs holds one:
`SINFO_FORMAT` and `SQUEUE_FORMAT` print only fields that cannot hold a separator (ids, node
and partition names, states, numbers, user names, Slurm's pending-reason words). The text
comes from the second listings, keyed by node and partition or by job id with the text last,
and is only joined onto records the first listing holds: a forged line names a key the
first listing lacks (ignored) or repeats a real one (both dropped). Output is split on
newlines only (never CR or U+2028); a line that does not parse is skipped with its
neighbours, since it may be the continuation of the one before it or precede a forged one.

Values are in base units: seconds (Slurm's microseconds divided), Unix timestamps in
seconds. A node's base state is `slurm_nodes{state}`; drain, not-responding and the other
flags are `slurm_nodes_flagged{flag}`, never states, so drained nodes are counted once.

Every label value comes from Slurm's output and is checked before it is emitted: names
(nodes, partitions, users, accounts) against Slurm's name grammar, states and flags against
`[a-z_]+`, free text (reasons) is stripped of control characters and bounded. A line that
fails is skipped and counted, never guessed. prometheus-client escapes what is left.
"""

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypeVar, cast

from hpc_libs.slurm import grammar
from hpc_libs.slurm.scontrol import ControllerPing
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

SEPARATOR = "|"
SINFO_FIELDS = ("NodeList", "Partition", "StateComplete", "CPUsState", "Gres", "GresUsed")
SINFO_FORMAT = ",".join(f"{name}:{SEPARATOR}" for name in SINFO_FIELDS)
"""`sinfo --Format`: `|` after each field, none of which can hold one (no free text)."""
SINFO_REASON_FIELDS = ("NodeList", "Partition", "Timestamp", "Reason")
SINFO_REASON_FORMAT = (
    ",".join(f"{name}:{SEPARATOR}" for name in SINFO_REASON_FIELDS[:-1]) + ",Reason:0"
)
"""`sinfo --Format` of the reasons: the key, the reason's time, the reason (free text) last."""
SQUEUE_FORMAT = SEPARATOR.join(["%i", "%P", "%T", "%V", "%u", "%C", "%r"])
"""`squeue --format`: job id, partition(s), state, submit time, user, CPUs, pending reason.

No field holds free text: `%r` is Slurm's reason word (`Priority`, `JobHeldUser`), never the
job's description; a pending job's partitions are partitions that exist.
"""
SQUEUE_ACCOUNT_FORMAT = SEPARATOR.join(["%i", "%a"])
"""`squeue --format` of the accounts: job id, then the account (any text: last)."""
TIME_FORMAT_ENV = {"SLURM_TIME_FORMAT": "%s"}
"""Makes sinfo's reason time and squeue's submit time Unix seconds, whatever the locale."""

MAX_REASON = 200
"""Characters of a node or pending reason kept in a label (Slurm's own are shorter)."""
_STATE_RE = re.compile(r"[a-z_]+")
_RPC_TYPE_RE = re.compile(r"[A-Z0-9_]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# sinfo's one-character state suffixes, when a state is printed short (`down*`, `idle~`).
_SUFFIX_FLAGS = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "%": "powering_down",
    "!": "power_down",
    "@": "reboot_requested",
    "^": "reboot_issued",
    "-": "planned",
    "$": "maintenance",
}
_GPU_RE = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:([0-9]{1,9})(?![0-9])")
_NUMBER_RE = re.compile(r"[0-9]{1,15}")
"""A count or a Unix time: ASCII digits, few enough for a float to hold exactly."""
_JOB_ID_RE = re.compile(r"[0-9]{1,10}(?:_(?:[0-9]{1,10}|\[[0-9,%-]{1,200}\]))?(?:\+[0-9]{1,10})?")
"""A job id as `squeue --array` prints it: `12`, an array task `12_3`, a het component `12+0`."""
_NO_VALUE = {"", "(null)", "n/a", "none", "unknown"}

T = TypeVar("T")


@dataclass
class Family:
    """One metric: its name, help, type (`gauge`/`counter`) and samples by label values."""

    name: str
    documentation: str
    kind: str = "gauge"
    label_names: tuple[str, ...] = ()
    samples: dict[tuple[str, ...], float] = field(default_factory=dict[tuple[str, ...], float])

    def set(self, *labels: str, value: float) -> None:
        """Set the sample of `labels`."""
        self.samples[labels] = float(value)

    def add(self, *labels: str, value: float = 1) -> None:
        """Add `value` to the sample of `labels` (counting nodes, jobs, CPUs)."""
        self.samples[labels] = self.samples.get(labels, 0.0) + value


def gauge(name: str, documentation: str, *label_names: str) -> Family:
    """Return an empty gauge family labelled by `label_names`."""
    return Family(name, documentation, "gauge", label_names)


@dataclass
class Snapshot:
    """What one collection pass read: the families, and the lines it had to skip."""

    families: list[Family] = field(default_factory=list[Family])
    skipped: int = 0


def name_label(value: str) -> str:
    """Return `value` if it is a Slurm name (letters, digits, `_`, `.`, `-`).

    Raises:
        ValueError: It is not: it never becomes a label value.

    """
    grammar.NAME(value)
    return value


def state_label(value: str) -> str:
    """Return a state, flag or word in lower case, checked against `[a-z_]+`.

    Raises:
        ValueError: It is not such a word.

    """
    word = value.strip().lower().replace("-", "_")
    if not _STATE_RE.fullmatch(word):
        raise ValueError(f"{value!r} is not a state word")
    return word


def text_label(value: str) -> str:
    """Return free text (a reason) as one bounded line without control characters."""
    return _CONTROL_RE.sub(" ", value).strip()[:MAX_REASON]


def _number(value: str) -> int | None:
    """Return a count or time; None for Slurm's words for none (`Unknown`, `N/A`).

    Raises:
        ValueError: It is neither (a sign, a fraction, non-ASCII digits, too many digits).

    """
    value = value.strip()
    if value.lower() in _NO_VALUE:
        return None
    if not _NUMBER_RE.fullmatch(value):
        raise ValueError(f"{value[:40]!r} is not a count")
    return int(value)


def _count(value: str) -> int:
    """Return a count that must be there.

    Raises:
        ValueError: It is not a count.

    """
    if (number := _number(value)) is None:
        raise ValueError(f"{value[:40]!r} is not a count")
    return number


def job_id(value: str) -> str:
    """Return a job id as `squeue --array` prints it.

    Raises:
        ValueError: It is not one.

    """
    if not _JOB_ID_RE.fullmatch(value):
        raise ValueError(f"{value[:40]!r} is not a job id")
    return value


def split_state(complete: str) -> tuple[str, list[str]]:
    """Split sinfo's complete state (`idle+drain`, `down*`) into the base state and its flags.

    Raises:
        ValueError: A part is not a state word.

    """
    words = complete.strip().lower().split("+")
    base, flags = words[0], [state_label(w) for w in words[1:] if w]
    while base and base[-1] in _SUFFIX_FLAGS:
        flags.append(_SUFFIX_FLAGS[base[-1]])
        base = base[:-1]
    return state_label(base), sorted(set(flags))


def gpu_count(gres: str) -> int:
    """Sum the GPUs of a GRES string (`gpu:2,gpu:a100:4(S:0-1)`, or `gpu:a100:1(IDX:0)`)."""
    return sum(int(m.group(1)) for m in _GPU_RE.finditer(gres))


@dataclass(frozen=True)
class NodeLine:
    """One `sinfo --Node` line: a node in one partition (its reason joined from the second)."""

    node: str
    partition: str
    state: str
    flags: list[str]
    cpus: dict[str, int]
    gpus_total: int
    gpus_allocated: int
    reason_since: int | None = None
    reason: str = ""


def _fields(line: str, count: int) -> list[str]:
    """Split a line into exactly `count` stripped fields; the last keeps any separator.

    Raises:
        ValueError: It has fewer.

    """
    parts = line.split(SEPARATOR, count - 1)
    if len(parts) != count:
        raise ValueError(f"{len(parts)} fields, not {count}")
    return [p.strip() for p in parts]


def parse_sinfo_line(line: str) -> NodeLine:
    """Parse one line of `sinfo --noheader --Node --Format=<SINFO_FORMAT>`.

    Every field ends with the separator, so the line does: nothing may follow the last.

    Raises:
        ValueError: The line does not have the fields, or a value breaks its grammar.

    """
    *parts, rest = line.split(SEPARATOR)
    if len(parts) != len(SINFO_FIELDS) or rest.strip():
        raise ValueError(f"{len(parts)} fields, not {len(SINFO_FIELDS)}")
    node, partition, complete, cpus, gres, gres_used = (p.strip() for p in parts)
    state, flags = split_state(complete)
    counts = [_count(c) for c in cpus.split("/")]
    if len(counts) != 4:
        raise ValueError(f"CPUs {cpus!r} are not allocated/idle/other/total")
    allocated, idle, other, total = counts
    return NodeLine(
        node=name_label(node),
        partition=name_label(partition.rstrip("*")),
        state=state,
        flags=flags,
        cpus={"allocated": allocated, "idle": idle, "other": other, "total": total},
        gpus_total=gpu_count(gres),
        gpus_allocated=gpu_count(gres_used),
    )


@dataclass(frozen=True)
class NodeReason:
    """One line of the reasons' listing: a node in one partition, its reason and since when."""

    node: str
    partition: str
    since: int | None
    reason: str


def parse_reason_line(line: str) -> NodeReason:
    """Parse one line of `sinfo --noheader --Node --Format=<SINFO_REASON_FORMAT>`.

    Raises:
        ValueError: The line does not have the fields, or a value breaks its grammar.

    """
    node, partition, since, reason = _fields(line, len(SINFO_REASON_FIELDS))
    reason = text_label(reason)
    return NodeReason(
        node=name_label(node),
        partition=name_label(partition.rstrip("*")),
        since=_number(since),
        reason="" if reason.lower() in _NO_VALUE else reason,
    )


@dataclass(frozen=True)
class JobLine:
    """One `squeue` line: a job (an array task each), in one or more partitions."""

    job_id: str
    partitions: list[str]
    state: str
    submitted: int | None
    user: str
    cpus: int
    reason: str
    account: str = ""


def parse_squeue_line(line: str) -> JobLine:
    """Parse one line of `squeue --noheader --all --array --format=<SQUEUE_FORMAT>`.

    A pending job submitted to several partitions lists them all (`debug,gpu`).

    Raises:
        ValueError: The line does not have the fields, or a value breaks its grammar.

    """
    job, partitions, state, submitted, user, cpus, reason = _fields(line, 7)
    return JobLine(
        job_id=job_id(job),
        partitions=[name_label(p) for p in partitions.split(",")],
        state=state_label(state),
        submitted=_number(submitted),
        user=name_label(user),
        cpus=_count(cpus),
        reason=text_label(reason),
    )


def parse_account_line(line: str) -> tuple[str, str]:
    """Parse one line of `squeue --format=<SQUEUE_ACCOUNT_FORMAT>`: job id and account.

    Raises:
        ValueError: The line does not have the fields, or a value breaks its grammar.

    """
    job, account = _fields(line, 2)
    return job_id(job), "" if account.lower() in _NO_VALUE else name_label(account)


K = TypeVar("K")


def _records(
    output: str, parse: Callable[[str], T], key: Callable[[T], K], snapshot: Snapshot
) -> dict[K, T]:
    """Parse each line of `output` (split on newlines only); return the trusted records by key.

    A line that does not parse is skipped with the lines next to it: it may be the rest of
    the line before (a newline in its last field), and the line after may be forged text.
    A key printed twice is skipped on every line (one of them is forged), even where the
    other line was skipped for its neighbour.
    """
    lines = output.split("\n")
    if lines[-1] == "":
        lines.pop()  # The newline that ends the last line.
    parsed: list[T | None] = []
    for line in lines:
        try:
            parsed.append(parse(line))
        except ValueError:
            parsed.append(None)
    printed = Counter(key(record) for record in parsed if record is not None)
    kept: dict[K, T] = {}
    for index, record in enumerate(parsed):
        neighbours = parsed[max(0, index - 1) : index + 2]
        if record is None or None in neighbours or printed[key(record)] > 1:
            snapshot.skipped += 1
        else:
            kept[key(record)] = record
    return kept


def read_nodes(listing: str, reasons: str, snapshot: Snapshot) -> list[NodeLine]:
    """Return the nodes of sinfo's `listing`, each with its reason from `reasons` if any.

    A reason is joined only onto a node and partition the listing holds, and only if the
    reasons' listing prints that key once.
    """
    nodes = _records(listing, parse_sinfo_line, lambda n: (n.node, n.partition), snapshot)
    texts = _records(reasons, parse_reason_line, lambda r: (r.node, r.partition), snapshot)
    joined: list[NodeLine] = []
    for key, node in nodes.items():
        text = texts.get(key)
        if text is not None and text.reason:
            joined.append(replace(node, reason=text.reason, reason_since=text.since))
        else:
            joined.append(node)
    return joined


def read_jobs(listing: str, accounts: str | None, snapshot: Snapshot) -> list[JobLine]:
    """Return the jobs of squeue's `listing`, each with its account from `accounts` if given.

    An account is joined only onto a job the listing holds, and only if the accounts'
    listing prints that job id once.
    """
    jobs = _records(listing, parse_squeue_line, lambda j: j.job_id, snapshot)
    if accounts is None:
        return list(jobs.values())
    by_job = _records(accounts, parse_account_line, lambda a: a[0], snapshot)
    return [
        replace(job, account=by_job[job_id][1]) if job_id in by_job else job
        for job_id, job in jobs.items()
    ]


USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
UNUSABLE_FLAGS = frozenset({"drain", "not_responding", "fail", "maintenance", "reboot_issued"})
NOT_WAITING_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "BeginTime", "Dependency"})
"""Pending reasons that are a request, not a wait: left out of the oldest pending job's age."""


def is_usable(state: str, flags: Iterable[str]) -> bool:
    """Whether a node in `state` with `flags` can take a job now (a powered-down node can)."""
    return state in USABLE_STATES and not UNUSABLE_FLAGS.intersection(flags)


_HEALTH_REASON_RE = re.compile(r"health: ([a-z][a-z-]{0,19}): ")
"""The slurmd charm's health check drains with `health: <check>: <what it saw>`."""


def health_check(line: NodeLine) -> str | None:
    """Return the check a drained node failed, by its reason's prefix; None otherwise.

    The check's name is a word of the charm's (`mounts`, `free-space`...). The program itself
    resumes only drains whose setter is root as well; a reason any administrator writes the
    same way shows here too, which an alert may as well say.
    """
    if "drain" not in line.flags or (match := _HEALTH_REASON_RE.match(line.reason)) is None:
        return None
    return match[1]


def node_families(listing: str, reason_listing: str, snapshot: Snapshot) -> list[Family]:
    """Nodes by partition and state, flags, reasons, and partition CPUs and GPUs.

    `listing` is sinfo's output in `SINFO_FORMAT`, `reason_listing` in `SINFO_REASON_FORMAT`.
    """
    nodes = gauge("slurm_nodes", "Nodes by partition and base state.", "partition", "state")
    flagged = gauge(
        "slurm_nodes_flagged",
        "Nodes by partition carrying a state flag (drain, not_responding, ...).",
        "partition",
        "flag",
    )
    reasons = gauge(
        "slurm_node_reason_info", "A node's reason for its state (1).", "node", "reason"
    )
    since = gauge(
        "slurm_node_reason_since_timestamp_seconds",
        "When the node's reason was set (Unix time).",
        "node",
    )
    cpus = gauge(
        "slurm_partition_cpus", "CPUs of a partition's nodes by state.", "partition", "state"
    )
    gpus = gauge(
        "slurm_partition_gpus", "GPUs of a partition's nodes by state.", "partition", "state"
    )
    node_state = gauge("slurm_node_state_info", "A node's base state (1).", "node", "state")
    node_flags = gauge("slurm_node_flag_info", "A node's state flag (1).", "node", "flag")
    health = gauge(
        "slurm_node_health",
        "0 for each check a node fails, drained by the slurmd charm's health check.",
        "node",
        "check",
    )
    usable = gauge(
        "slurm_partition_nodes_usable",
        "Nodes of the partition that can run a job: not down, drained or unresponsive.",
        "partition",
    )
    cluster = _cluster_node_families()
    seen: set[str] = set()
    for line in read_nodes(listing, reason_listing, snapshot):
        if line.node not in seen:  # A node in several partitions counts once cluster-wide.
            seen.add(line.node)
            _add_cluster_node(cluster, line)
        nodes.add(line.partition, line.state)
        usable.add(line.partition, value=1 if is_usable(line.state, line.flags) else 0)
        node_state.set(line.node, line.state, value=1)
        for flag in line.flags:
            node_flags.set(line.node, flag, value=1)
        for flag in line.flags:
            flagged.add(line.partition, flag)
        if (check := health_check(line)) is not None:
            health.set(line.node, check, value=0)
        if line.reason:
            reasons.set(line.node, line.reason, value=1)
            if line.reason_since is not None:
                since.set(line.node, value=line.reason_since)
        for state, count in line.cpus.items():
            cpus.add(line.partition, state, value=count)
        gpus.add(line.partition, "total", value=line.gpus_total)
        gpus.add(line.partition, "allocated", value=line.gpus_allocated)
        gpus.add(line.partition, "idle", value=max(0, line.gpus_total - line.gpus_allocated))
    return [
        *(nodes, flagged, usable, node_state, node_flags, reasons, since, health, cpus, gpus),
        *cluster,
    ]


def _cluster_node_families() -> list[Family]:
    """Nodes, CPUs and GPUs of the whole cluster, each node once (partitions may overlap)."""
    return [
        gauge("slurm_cluster_nodes", "Nodes of the cluster by base state.", "state"),
        gauge("slurm_cluster_cpus", "CPUs of the cluster by state.", "state"),
        gauge("slurm_cluster_gpus", "GPUs of the cluster by state.", "state"),
    ]


def _add_cluster_node(cluster: list[Family], line: NodeLine) -> None:
    nodes, cpus, gpus = cluster
    nodes.add(line.state)
    for state, count in line.cpus.items():
        cpus.add(state, value=count)
    gpus.add("total", value=line.gpus_total)
    gpus.add("allocated", value=line.gpus_allocated)
    gpus.add("idle", value=max(0, line.gpus_total - line.gpus_allocated))


def job_families(
    listing: str, account_listing: str | None, now: float, per_user: bool, snapshot: Snapshot
) -> list[Family]:
    """Jobs by partition and state, pending reasons, the oldest pending job's age.

    `listing` is squeue's output in `SQUEUE_FORMAT`, `account_listing` in
    `SQUEUE_ACCOUNT_FORMAT`
    (None: no account known). With `per_user`, jobs and CPUs by user and by account too (one
    series per user: off by default, for cardinality).
    """
    jobs = gauge("slurm_partition_jobs", "Jobs by partition and state.", "partition", "state")
    pending = gauge(
        "slurm_partition_jobs_pending_reason",
        "Pending jobs by partition and Slurm's pending reason.",
        "partition",
        "reason",
    )
    oldest = gauge(
        "slurm_partition_oldest_pending_job_age_seconds",
        "Age of the partition's oldest pending job (not held, nor waiting by request).",
        "partition",
    )
    by_user = gauge("slurm_user_jobs", "Jobs by user and state.", "user", "state")
    by_account = gauge("slurm_account_jobs", "Jobs by account and state.", "account", "state")
    user_cpus = gauge("slurm_user_cpus", "CPUs of jobs by user and state.", "user", "state")
    for job in read_jobs(listing, account_listing, snapshot):
        for partition in job.partitions:
            jobs.add(partition, job.state)
            if job.state == "pending":
                pending.add(partition, job.reason or "none")
                if job.submitted is not None and job.reason not in NOT_WAITING_REASONS:
                    age = max(0.0, now - job.submitted)
                    oldest.set(partition, value=max(age, oldest.samples.get((partition,), 0.0)))
        if per_user:
            by_user.add(job.user, job.state)
            user_cpus.add(job.user, job.state, value=job.cpus)
            if job.account:
                by_account.add(job.account, job.state)
    families = [jobs, pending, oldest]
    return [*families, by_user, by_account, user_cpus] if per_user else families


def _unwrap(value: Any) -> Any:
    """Read Slurm's `{"set": true, "number": n}` wrapper as `n` (unset: None)."""
    if isinstance(value, dict):
        wrapped = cast(dict[str, Any], value)
        return wrapped.get("number") if wrapped.get("set", True) else None
    return value


Number = Annotated[float | None, BeforeValidator(_unwrap)]


class _Parsed(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Rpc(_Parsed):
    message_type: str = ""
    user: str = ""
    count: Number = 0
    total_time: Number = 0


class _Statistics(_Parsed):
    schedule_cycle_last: Number = None
    schedule_cycle_mean: Number = None
    schedule_cycle_max: Number = None
    schedule_queue_length: Number = None
    dbd_agent_queue_size: Number = None
    agent_queue_size: Number = None
    server_thread_count: Number = None
    bf_cycle_last: Number = None
    bf_cycle_mean: Number = None
    bf_when_last_cycle: Number = None
    bf_queue_len: Number = None
    jobs_submitted: Number = None
    jobs_started: Number = None
    jobs_completed: Number = None
    jobs_failed: Number = None
    bf_backfilled_jobs: Number = None
    rpcs_by_message_type: list[_Rpc] = Field(default_factory=list[_Rpc])
    rpcs_by_user: list[_Rpc] = Field(default_factory=list[_Rpc])


class _Sdiag(_Parsed):
    statistics: _Statistics


_SDIAG_GAUGES = (
    # name, sdiag key, scale to base units (microseconds to seconds), help
    ("slurm_scheduler_cycle_last_seconds", "schedule_cycle_last", 1e-6, "Last main cycle."),
    ("slurm_scheduler_cycle_mean_seconds", "schedule_cycle_mean", 1e-6, "Mean main cycle."),
    ("slurm_scheduler_cycle_max_seconds", "schedule_cycle_max", 1e-6, "Longest main cycle."),
    ("slurm_scheduler_queue_length", "schedule_queue_length", 1, "Jobs in the main queue."),
    (
        "slurm_scheduler_dbd_agent_queue_size",
        "dbd_agent_queue_size",
        1,
        "Unsent slurmdbd messages.",
    ),
    ("slurm_scheduler_agent_queue_size", "agent_queue_size", 1, "Outgoing RPCs queued."),
    ("slurm_scheduler_server_threads", "server_thread_count", 1, "RPC server threads."),
    ("slurm_backfill_cycle_last_seconds", "bf_cycle_last", 1e-6, "Last backfill cycle."),
    ("slurm_backfill_cycle_mean_seconds", "bf_cycle_mean", 1e-6, "Mean backfill cycle."),
    (
        "slurm_backfill_last_cycle_timestamp_seconds",
        "bf_when_last_cycle",
        1,
        "Last backfill cycle's time.",
    ),
    ("slurm_backfill_queue_length", "bf_queue_len", 1, "Jobs the last backfill cycle considered."),
)
_SINCE_START = "since slurmctld's start or `sdiag --reset`"
_SDIAG_COUNTERS = (
    ("slurm_scheduler_jobs_submitted", "jobs_submitted", f"Jobs submitted {_SINCE_START}."),
    ("slurm_scheduler_jobs_started", "jobs_started", f"Jobs started {_SINCE_START}."),
    ("slurm_scheduler_jobs_completed", "jobs_completed", f"Jobs completed {_SINCE_START}."),
    ("slurm_scheduler_jobs_failed", "jobs_failed", f"Jobs failed {_SINCE_START}."),
    (
        "slurm_backfill_backfilled_jobs",
        "bf_backfilled_jobs",
        f"Jobs backfill started {_SINCE_START}.",
    ),
)


def sdiag_families(output: str, per_user: bool, snapshot: Snapshot) -> list[Family]:
    """Return scheduler, backfill, RPC and slurmdbd-agent statistics of `sdiag --json`.

    Raises:
        ValueError: The output is not sdiag's JSON.

    """
    try:
        stats = _Sdiag.model_validate_json(output).statistics
    except ValidationError as e:
        raise ValueError(f"not sdiag's JSON: {e}") from e
    families: list[Family] = []
    for name, key, scale, documentation in _SDIAG_GAUGES:
        if (value := getattr(stats, key)) is not None:
            families.append(Family(name, documentation, samples={(): value * scale}))
    for name, key, documentation in _SDIAG_COUNTERS:
        if (value := getattr(stats, key)) is not None:
            families.append(Family(name, documentation, "counter", samples={(): value}))
    rpcs = Family("slurm_rpc_requests", "RPCs served, by message type.", "counter", ("type",))
    rpc_time = Family(
        "slurm_rpc_requests_duration_seconds",
        "Time spent serving RPCs, by message type.",
        "counter",
        ("type",),
    )
    for rpc in stats.rpcs_by_message_type:
        if not _RPC_TYPE_RE.fullmatch(kind := rpc.message_type):
            snapshot.skipped += 1
            continue
        rpcs.set(kind, value=rpc.count or 0)
        rpc_time.set(kind, value=(rpc.total_time or 0) * 1e-6)
    families += [rpcs, rpc_time]
    if per_user:
        families.append(_user_rpcs(stats.rpcs_by_user, snapshot))
    return families


def _user_rpcs(entries: list[_Rpc], snapshot: Snapshot) -> Family:
    by_user = Family("slurm_user_rpc_requests", "RPCs served, by user.", "counter", ("user",))
    for rpc in entries:
        try:
            by_user.set(name_label(rpc.user), value=rpc.count or 0)
        except ValueError:
            snapshot.skipped += 1
    return by_user


@dataclass(frozen=True)
class Ping:
    """One controller in `scontrol ping --json`, in `SlurmctldHost` order."""

    host: str
    up: bool


def controller_pings(controllers: Sequence[ControllerPing]) -> list[Ping]:
    """Return the controllers' answers (`scontrol.parse_pings`), each host a label.

    Raises:
        ValueError: A host name breaks Slurm's grammar.

    """
    return [Ping(host=name_label(c.hostname), up=c.is_up) for c in controllers]


def in_control(pings: list[Ping]) -> str | None:
    """Return the controller in control: the first that answers, in `SlurmctldHost` order.

    Slurm's clients try the controllers in that order and a backup in standby refuses them,
    and a primary that returns takes control back from a backup: so the first controller
    that answers is the one serving. None when none answers.
    """
    return next((p.host for p in pings if p.up), None)


def controller_families(pings: list[Ping], hostname: str, cluster_wide: bool) -> list[Family]:
    """Return this unit's role, and with `cluster_wide` every controller's answer.

    `slurm_controller_primary{host}` is this unit's own; `slurm_controller_up{host}` only the
    controller in control says, so two controllers never export the same series.
    """
    primary = gauge(
        "slurm_controller_primary", "Whether this controller is the one in control.", "host"
    )
    primary.set(hostname, value=1 if in_control(pings) == hostname else 0)
    if not cluster_wide:
        return [primary]
    up = gauge("slurm_controller_up", "Whether the controller answers `scontrol ping`.", "host")
    for ping in pings:
        up.set(ping.host, value=1 if ping.up else 0)
    return [primary, up]
