"""The `scaling-view` action: what slurm-autoscale reads from Slurm, with no token leaving.

slurm-autoscale (autoscaler/) runs this action on the controller's leader instead of asking
for a token and reading slurmrestd. The action runs, as root on the controller,
`scontrol show nodes|reservations --json` (JSON keeps users' text inside its strings, so no
user can shape a record) and, for the pending jobs, `squeue` printing only fields that cannot
hold its `|` separator and no user text (QUEUE_FORMAT: ids, numbers, partitions, the array's
task ranges, the TRES asked, then Slurm's reason last). At 10,000 jobs that is about 60 bytes
a job where `scontrol show jobs --json` prints about 5 KB (issue 41). Every record is checked
field by field; a reason that is not one of Slurm's bare words (a description slurmctld
composed, with spaces) sends the whole pass back to `scontrol show jobs --json`, as before,
rather than guessing. It returns, for the asked partitions only:

* `nodes`: name, state flags, CPUs, RealMemory, allocated CPUs, last busy time, reason
  (bounded), partitions, reservation;
* `pending`: pending jobs grouped by shape (partitions, nodes, CPUs and memory per node,
  Slurm's reason word; from squeue the memory is the job's memory TRES over its nodes): one
  record per shape with how many jobs, how many nodes-worth of copies (a pending array record
  counts the tasks that may run at once, arithmetically: `0-3000000%4` is 4) and the lowest
  job id as an example; at most MAX_SHAPES shapes, the jobs of the others counted in
  `omitted`;
* `reserved`: the asked partitions' nodes held by a reservation that has not ended;
* `time`: the controller's clock when it read Slurm (the nodes' `last_busy` is on it).

The data_parser version is negotiated, never pinned: `scontrol --json=list` says which ones
this Slurm has, the newest the action reads (`hpc_libs.slurm.data_parser.KNOWN`) is asked for
(`--json=v0.0.45`), and an answer in another version fails the action, naming both.

Nothing is written anywhere. The result travels in `action-set`'s argv, where one argument
holds at most 128 KiB: the JSON document is cut in `part-<n>` keys of PART_SIZE characters,
at most MAX_PARTS of them (`parts` says how many).
"""

import json
import re
import time
from typing import Annotated, Any, NamedTuple, TypeVar

import ops
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm import data_parser
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

QUERY_TIMEOUT = 120
"""Seconds each scontrol query may take (the jobs of a busy cluster are megabytes of JSON)."""
MAX_SHAPES = 500
MAX_REASON = 256
PART_SIZE = 100_000
MAX_PARTS = 16
MAX_NUMBER = 2**63 - 1
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A node or partition name as the charms make them (application names, `compute-3`)."""
WORD = re.compile(r"[A-Za-z0-9_]{1,64}")
"""A state flag or a pending reason: Slurm's own words, never users' text."""
DATA_PARSER = re.compile(r"v0\.0\.\d{1,4}")
_ARRAY_CHUNK = re.compile(r"(\d{1,10})(?:-(\d{1,10})(?::(\d{1,10}))?)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
_DIGITS = re.compile(r"\d{1,19}")
QUEUE_FIELDS = (
    "JobId",
    "NumNodes",
    "NumCPUs",
    "MinCpus",
    "MinMemory",
    "Partition",
    "ArrayTaskId",
    "tres-alloc",
)
QUEUE_FORMAT = ",".join(f"{field}:|" for field in QUEUE_FIELDS) + ",Reason:"
"""squeue's `--Format`: width 0 (never cut), `|` after each field, the reason last (it may be
a description with spaces or a `|`: the rest of the line)."""
QUEUE_ARGV = [
    "squeue",
    "--noheader",
    "--noconvert",
    "--states=PENDING",
    f"--Format={QUEUE_FORMAT}",
]
MEMORY_UNITS = {"M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
"""Units of Slurm's memory figures, in MB."""
_MEMORY = re.compile(r"(\d{1,15})(?:\.(00|50))?([MGTP])?")
"""`0`, `1000M`, `2G`, `1.50G`: Slurm converts a memory TRES only while it stays exact (halves
kept: src/common/slurm_protocol_api.c, convert_num_unit2); `--noconvert` keeps MB."""


class SlurmUnreadable(ValueError):  # noqa: N818 - says what happened
    """Slurm's answer is not what this module reads."""


def _number(value: Any) -> Any:
    """Unwrap data_parser's `{"set", "infinite", "number"}`; unset or infinite reads as None."""
    if isinstance(value, dict):
        wrapped: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
        if not wrapped.get("set", True) or wrapped.get("infinite", False):
            return None
        return wrapped.get("number")
    return value


def _list(value: Any) -> Any:
    """Accept Slurm's comma-separated strings where newer parsers give lists."""
    if isinstance(value, str):
        return [part for part in value.split(",") if part]
    return value


Count = Annotated[
    Annotated[int, Field(ge=0, le=MAX_NUMBER, strict=True)] | None, BeforeValidator(_number)
]
Words = Annotated[list[str], BeforeValidator(_list)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class _Node(_Record):
    name: str
    state: Words = Field(default_factory=list[str])
    cpus: Count = None
    real_memory: Count = None
    alloc_cpus: Count = None
    last_busy: Count = None
    reason: str = ""
    partitions: Words = Field(default_factory=list[str])
    reservation: str = ""


class _Job(_Record):
    job_id: Annotated[int, Field(ge=1, le=MAX_NUMBER, strict=True)]
    job_state: Words = Field(default_factory=list[str])
    partition: str = ""
    node_count: Count = None
    cpus: Count = None
    minimum_cpus_per_node: Count = None
    memory_per_node: Count = None
    memory_per_cpu: Count = None
    state_reason: str = ""
    array_task_string: str = ""
    array_max_tasks: Count = None


class _Reservation(_Record):
    name: str = ""
    node_list: str = ""
    end_time: Count = None


class _Answer(_Record):
    errors: list[Any] = Field(default_factory=list[Any])


class _Nodes(_Answer):
    nodes: list[_Node]


class _Jobs(_Answer):
    jobs: list[_Job]


class _Reservations(_Answer):
    reservations: list[_Reservation] = Field(default_factory=list[_Reservation])


_Model = TypeVar("_Model", bound=_Answer)


def partitions_asked(value: object) -> list[str]:
    """Read the `partitions` parameter: comma-separated partition names.

    Raises:
        ValueError: It is not a list of names.

    """
    if not isinstance(value, str):
        raise ValueError("partitions must be comma-separated partition names")
    names = value.split(",")
    for name in names:
        if not NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a partition name")
    return names


def data_parser_asked(value: object) -> str | None:
    """Read the `data-parser` parameter: absent (negotiate) or a version such as `v0.0.42`.

    Raises:
        ValueError: It is not a data_parser version.

    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not DATA_PARSER.fullmatch(value):
        raise ValueError(f"{str(value)[:32]!r} is not a data_parser version such as v0.0.42")
    return value


def array_copies(tasks: str, throttle: int | None) -> int:
    """How many tasks of a pending array record may run at once (`0-9%2` → 2; none → 1).

    Counted from the ranges' bounds, never by listing the tasks.

    Raises:
        SlurmUnreadable: `tasks` is not Slurm's task list (`1-5,7,10-20:2%3`).

    """
    if not tasks:
        return 1
    expression, percent, limit = tasks.partition("%")
    count = 0
    for chunk in expression.split(","):
        found = _ARRAY_CHUNK.fullmatch(chunk)
        if found is None:
            raise SlurmUnreadable(f"array task list {tasks[:64]!r}")
        low, high, step = (int(part) if part else None for part in found.groups())
        assert low is not None  # The pattern requires it.
        if high is None:
            count += 1
        elif high < low or step == 0:
            raise SlurmUnreadable(f"array task list {tasks[:64]!r}")
        else:
            count += (high - low) // (step or 1) + 1
    if percent and not limit.isdigit():
        raise SlurmUnreadable(f"array task list {tasks[:64]!r}")
    cap = int(limit) if percent else (throttle or 0)
    return max(1, min(count, cap) if cap > 0 else count)


def in_hostlist(name: str, hostlist: str) -> bool:
    """Whether node `name` is in a Slurm host list (`compute-[0-2,5],gpu-1`), arithmetically.

    Raises:
        SlurmUnreadable: The host list has a form this module does not read (nested brackets).

    """
    for part in _split_top_level(hostlist):
        prefix, bracket, rest = part.partition("[")
        if not bracket:
            if part == name:
                return True
            continue
        ranges, closing, suffix = rest.partition("]")
        if not closing or "[" in ranges or "[" in suffix or "]" in suffix:
            raise SlurmUnreadable(f"host list {hostlist[:64]!r}")
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        middle = name[len(prefix) : len(name) - len(suffix)]
        if middle.isdigit() and _in_ranges(middle, ranges, hostlist):
            return True
    return False


def _in_ranges(middle: str, ranges: str, hostlist: str) -> bool:
    """Whether `middle` (digits) is one of `0-3,07,10-12` as Slurm writes the names."""
    for chunk in ranges.split(","):
        low, dash, high = chunk.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise SlurmUnreadable(f"host list {hostlist[:64]!r}")
        top = int(high) if dash else int(low)
        width = len(low)
        if int(low) <= int(middle) <= top and middle == f"{int(middle):0{width}d}":
            return True
    return False


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part for part in parts if part]


def _checked(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not pattern.fullmatch(value):
        raise SlurmUnreadable(f"{what} {value[:64]!r}")
    return value


def node_records(nodes: _Nodes, wanted: set[str]) -> list[dict[str, Any]]:
    """Return the nodes in the wanted partitions, each field checked; the others left out."""
    records: list[dict[str, Any]] = []
    for node in nodes.nodes:
        partitions = [p for p in node.partitions if p in wanted]
        if not partitions:
            continue
        records.append(
            {
                "name": _checked(NAME, node.name, "node name"),
                "state": sorted({_checked(WORD, s, "node state").upper() for s in node.state}),
                "cpus": node.cpus or 0,
                "real_memory": node.real_memory or 0,
                "alloc_cpus": node.alloc_cpus or 0,
                "last_busy": node.last_busy or 0,
                "reason": _CONTROL.sub(" ", node.reason)[:MAX_REASON],
                "partitions": partitions,
                "reservation": _CONTROL.sub(" ", node.reservation)[:MAX_REASON],
            }
        )
    return records


class Pending(NamedTuple):
    """One pending job (or array record) as the shapes count it."""

    job_id: int
    partition: str
    nodes: int
    cpus_per_node: int
    memory: int
    reason: str
    copies: int


def pending_jobs(jobs: _Jobs) -> list[Pending]:
    """Return the pending records of scontrol's JSON answer."""
    records: list[Pending] = []
    for job in jobs.jobs:
        if "PENDING" not in job.job_state:
            continue
        nodes = max(1, job.node_count or 1)
        cpus_per_node = max(job.minimum_cpus_per_node or 1, -(-(job.cpus or 0) // nodes))
        memory = job.memory_per_node or (job.memory_per_cpu or 0) * cpus_per_node
        reason = _checked(WORD, job.state_reason or "None", "pending reason")
        copies = array_copies(job.array_task_string, job.array_max_tasks)
        records.append(
            Pending(job.job_id, job.partition, nodes, cpus_per_node, memory, reason, copies)
        )
    return records


def queue_jobs(text: str) -> list[Pending] | None:
    """Return the records of squeue's QUEUE_FORMAT lines; None if one is not exact.

    Not exact: a reason that is a description, or a memory that neither per node nor per
    CPU explains (squeue prints MinMemory without saying which; the memory TRES tells).
    Lines that differ only by the job id are read once (a queue has few shapes).

    Raises:
        SlurmUnreadable: A line is not a record of that format, or a job comes twice.

    """
    records: list[Pending] = []
    seen: set[int] = set()
    shapes: dict[str, Pending | None] = {}
    for line in text.split("\n"):
        if not line:
            continue
        job_id, _, rest = line.partition("|")
        if not _DIGITS.fullmatch(job_id) or int(job_id) < 1:
            raise SlurmUnreadable(f"squeue record {line[:64]!r}")
        if rest not in shapes:
            shapes[rest] = queue_shape(rest)
        shape = shapes[rest]
        if shape is None:
            return None  # Its JSON record says what squeue's line does not.
        if int(job_id) in seen:
            raise SlurmUnreadable(f"squeue printed job {job_id} twice")
        seen.add(int(job_id))
        records.append(shape._replace(job_id=int(job_id)))
    return records


def queue_shape(rest: str) -> Pending | None:
    """Read a QUEUE_FORMAT line after its job id; None if it is not exact (job id 0).

    Raises:
        SlurmUnreadable: It is not the rest of a record of that format.

    """
    fields = rest.split("|", len(QUEUE_FIELDS) - 1)
    if len(fields) != len(QUEUE_FIELDS):
        raise SlurmUnreadable(f"squeue record {rest[:64]!r}")
    count, cpus, min_cpus, min_memory, partition, tasks, tres, reason = fields
    for number in (count, cpus, min_cpus):
        _checked(_DIGITS, number, "squeue number")
    copies = array_copies("" if tasks == "N/A" else tasks, None)
    nodes = max(1, int(count))
    cpus_per_node = max(int(min_cpus) or 1, -(-int(cpus) // nodes))
    memory = memory_per_node(min_memory, tres, nodes, int(cpus), cpus_per_node)
    if memory is None or not WORD.fullmatch(reason):
        return None
    return Pending(0, partition, nodes, cpus_per_node, memory, reason, copies)


def megabytes(text: str) -> int | None:
    """Return MB of Slurm's memory figure (`0`, `1000M`, `1.50G`: exact, or halves); else None."""
    found = _MEMORY.fullmatch(text)
    if found is None:
        return None
    whole, fraction, unit = found.groups()
    if unit is None and whole != "0":
        return None  # Cut short by squeue's buffer.
    halves = int(whole) * 2 + (1 if fraction == "50" else 0)
    return halves * MEMORY_UNITS[unit or "M"] // 2


def memory_per_node(
    min_memory: str, tres: str, nodes: int, cpus: int, cpus_per_node: int
) -> int | None:
    """Return the memory each node must hold, as scontrol's JSON gives it; None if unsure.

    squeue's MinMemory drops the per-CPU flag; the job's memory TRES (`mem=` of `tres-alloc`)
    is MinMemory times the nodes (per node) or times the CPUs (per CPU). 0 is `--mem=0`.
    """
    asked = megabytes(min_memory)
    if asked == 0:
        return 0
    requested = [item.partition("=")[2] for item in tres.split(",") if item.startswith("mem=")]
    total = megabytes(requested[0]) if len(requested) == 1 else None
    if asked is None or total is None:
        return None
    if total == asked * nodes:
        return asked
    if total == asked * cpus:
        return asked * cpus_per_node
    return None


def pending_shapes(jobs: list[Pending], wanted: set[str]) -> tuple[list[dict[str, Any]], int]:
    """Return pending jobs of the wanted partitions by shape, and how many jobs were left out."""
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for job in sorted(jobs, key=lambda j: j.job_id):
        partitions = [p for p in job.partition.split(",") if p in wanted]
        if not partitions:
            continue
        key = (",".join(partitions), job.nodes, job.cpus_per_node, job.memory, job.reason)
        shape = shapes.setdefault(
            key,
            {
                "partition": key[0],
                "nodes": job.nodes,
                "cpus": job.cpus_per_node,
                "memory": job.memory,
                "reason": job.reason,
                "jobs": 0,
                "copies": 0,
                "example": job.job_id,
            },
        )
        shape["jobs"] += 1
        shape["copies"] = min(MAX_NUMBER, shape["copies"] + job.copies)
    kept = list(shapes.values())[:MAX_SHAPES]
    omitted = sum(shape["jobs"] for shape in list(shapes.values())[MAX_SHAPES:])
    return kept, omitted


def reserved_names(reservations: _Reservations, names: list[str], now: int) -> list[str]:
    """Return the names among `names` that a reservation not ended yet holds."""
    live = [r for r in reservations.reservations if (r.end_time or now + 1) > now]
    return [name for name in names if any(in_hostlist(name, r.node_list) for r in live)]


def view(
    nodes_json: str,
    jobs_json: str,
    reservations_json: str,
    partitions: list[str],
    now: int,
    *,
    version: str,
) -> dict[str, Any]:
    """Build the action's document from the three answers, asked for in data_parser `version`.

    Raises:
        SlurmUnreadable: An answer is not JSON of the expected form, is in another
            data_parser version, or Slurm reports errors.

    """
    nodes = _answer(nodes_json, _Nodes, version)
    jobs = _answer(jobs_json, _Jobs, version)
    reservations = _answer(reservations_json, _Reservations, version)
    return _document(nodes, pending_jobs(jobs), reservations, partitions, now)


def queue_view(
    nodes_json: str,
    queue: str,
    reservations_json: str,
    partitions: list[str],
    now: int,
    *,
    version: str,
) -> dict[str, Any] | None:
    """Build the action's document with squeue's QUEUE_FORMAT lines for the pending jobs.

    None when a reason is a description: `view` then reads scontrol's JSON of the jobs.

    Raises:
        SlurmUnreadable: As `view`, or a line of `queue` is not a record of QUEUE_FORMAT.

    """
    jobs = queue_jobs(queue)
    if jobs is None:
        return None
    nodes = _answer(nodes_json, _Nodes, version)
    reservations = _answer(reservations_json, _Reservations, version)
    return _document(nodes, jobs, reservations, partitions, now)


def _answer(text: str, model: type[_Model], version: str) -> _Model:
    """One scontrol answer, checked: JSON of `model`'s form, in `version`, without errors."""
    try:
        answer = json.loads(text)
        data_parser.check_answer(answer, version)
        checked = model.model_validate(answer)
    except data_parser.DataParserError as e:
        raise SlurmUnreadable(f"scontrol: {e}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SlurmUnreadable(f"unexpected scontrol answer at {where}: {first['msg']}") from None
    except (ValueError, RecursionError) as e:
        raise SlurmUnreadable(f"unexpected scontrol answer: {e}"[:300]) from None
    if checked.errors:
        raise SlurmUnreadable(f"scontrol reported errors: {str(checked.errors)[:300]}")
    return checked


def _document(
    nodes: _Nodes,
    jobs: list[Pending],
    reservations: _Reservations,
    partitions: list[str],
    now: int,
) -> dict[str, Any]:
    wanted = set(partitions)
    node_list = node_records(nodes, wanted)
    pending, omitted = pending_shapes(jobs, wanted)
    names = [node["name"] for node in node_list]
    return {
        "time": now,
        "nodes": node_list,
        "pending": pending,
        "omitted": omitted,
        "reserved": reserved_names(reservations, names, now),
    }


def as_results(document: dict[str, Any]) -> dict[str, str]:
    """Cut the document in action results: `parts`, `part-<n>` of at most PART_SIZE characters.

    Raises:
        SlurmUnreadable: It needs more than MAX_PARTS parts.

    """
    text = json.dumps(document, separators=(",", ":"))
    parts = [text[start : start + PART_SIZE] for start in range(0, len(text), PART_SIZE)]
    if len(parts) > MAX_PARTS:
        raise SlurmUnreadable(f"the view is {len(text)} characters, more than an action returns")
    return {"parts": str(len(parts)), **{f"part-{n}": part for n, part in enumerate(parts)}}


def _scontrol_json(what: str, version: str) -> str:
    """`scontrol show <what> --json=<version>`, as root on the controller."""
    argv = ["scontrol", "show", what, f"--json={version}"]
    return host.run(argv, timeout=QUERY_TIMEOUT).stdout


def negotiate(override: str | None = None) -> str:
    """Return the newest data_parser version both this Slurm's scontrol and this module read.

    `override` (the action's `data-parser`) replaces the newest; it must be one of both.

    Raises:
        SlurmOpsError: scontrol failed.
        SlurmUnreadable: It offers none that this module reads (the message names both).

    """
    listed = host.run(["scontrol", "--json=list"], timeout=QUERY_TIMEOUT).stdout
    try:
        return data_parser.choose(data_parser.offered_by_list(listed), override)
    except data_parser.DataParserError as e:
        raise SlurmUnreadable(f"scontrol: {e}") from None


def run(event: ops.ActionEvent) -> None:
    """Run the action: read Slurm, return the view; fail with Slurm's own words."""
    try:
        partitions = partitions_asked(event.params.get("partitions"))
        override = data_parser_asked(event.params.get("data-parser"))
    except ValueError as e:
        event.fail(f"invalid scaling-view request: {e}")
        return
    try:
        version = negotiate(override)
        nodes = _scontrol_json("nodes", version)
        queue = host.run(QUEUE_ARGV, timeout=QUERY_TIMEOUT).stdout
        reservations = _scontrol_json("reservations", version)
        now = int(time.time())
        document = queue_view(nodes, queue, reservations, partitions, now, version=version)
        if document is None:
            jobs = _scontrol_json("jobs", version)
            document = view(nodes, jobs, reservations, partitions, now, version=version)
        event.set_results(as_results(document))
    except SlurmOpsError as e:
        event.fail(f"cannot read Slurm: {(e.stderr or '').strip() or e.message}")
    except SlurmUnreadable as e:
        event.fail(f"cannot read Slurm: {e}")
