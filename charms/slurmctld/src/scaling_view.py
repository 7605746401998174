"""The `scaling-view` action: what slurm-autoscale reads from Slurm, with no token leaving.

slurm-autoscale (autoscaler/) runs this action on the controller's leader instead of asking
for a token and reading slurmrestd. The action runs, as root on the controller,
`scontrol show nodes|jobs|reservations --json`: JSON keeps users' text (job names, comments,
accounts, a newline, a `|`) inside its strings, so no user can shape a record. It returns, for
the asked partitions only:

* `nodes`: name, state flags, CPUs, RealMemory, allocated CPUs, last busy time, reason
  (bounded), partitions, reservation;
* `pending`: pending jobs grouped by shape (partitions, nodes, CPUs and memory per node,
  Slurm's reason word): one record per shape with how many jobs, how many nodes-worth of
  copies (a pending array record counts the tasks that may run at once, arithmetically:
  `0-3000000%4` is 4) and the lowest job id as an example; at most MAX_SHAPES shapes, the
  jobs of the others counted in `omitted`;
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
from typing import Annotated, Any

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
    model_config = ConfigDict(extra="ignore", frozen=True)


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


def pending_shapes(jobs: _Jobs, wanted: set[str]) -> tuple[list[dict[str, Any]], int]:
    """Return pending jobs of the wanted partitions by shape, and how many jobs were left out."""
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for job in sorted(jobs.jobs, key=lambda j: j.job_id):
        if "PENDING" not in job.job_state:
            continue
        partitions = [p for p in job.partition.split(",") if p in wanted]
        if not partitions:
            continue
        nodes = max(1, job.node_count or 1)
        cpus_per_node = max(job.minimum_cpus_per_node or 1, -(-(job.cpus or 0) // nodes))
        memory = job.memory_per_node or (job.memory_per_cpu or 0) * cpus_per_node
        reason = _checked(WORD, job.state_reason or "None", "pending reason")
        key = (",".join(partitions), nodes, cpus_per_node, memory, reason)
        copies = array_copies(job.array_task_string, job.array_max_tasks)
        shape = shapes.setdefault(
            key,
            {
                "partition": key[0],
                "nodes": nodes,
                "cpus": cpus_per_node,
                "memory": memory,
                "reason": reason,
                "jobs": 0,
                "copies": 0,
                "example": job.job_id,
            },
        )
        shape["jobs"] += 1
        shape["copies"] = min(MAX_NUMBER, shape["copies"] + copies)
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
    try:
        answers = [json.loads(text) for text in (nodes_json, jobs_json, reservations_json)]
        for answer in answers:
            data_parser.check_answer(answer, version)
        nodes = _Nodes.model_validate(answers[0])
        jobs = _Jobs.model_validate(answers[1])
        reservations = _Reservations.model_validate(answers[2])
    except data_parser.DataParserError as e:
        raise SlurmUnreadable(f"scontrol: {e}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SlurmUnreadable(f"unexpected scontrol answer at {where}: {first['msg']}") from None
    except (ValueError, RecursionError) as e:
        raise SlurmUnreadable(f"unexpected scontrol answer: {e}"[:300]) from None
    for answer in (nodes, jobs, reservations):
        if answer.errors:
            raise SlurmUnreadable(f"scontrol reported errors: {str(answer.errors)[:300]}")
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
        jobs = _scontrol_json("jobs", version)
        reservations = _scontrol_json("reservations", version)
        now = int(time.time())
        document = view(nodes, jobs, reservations, partitions, now, version=version)
        event.set_results(as_results(document))
    except SlurmOpsError as e:
        event.fail(f"cannot read Slurm: {(e.stderr or '').strip() or e.message}")
    except SlurmUnreadable as e:
        event.fail(f"cannot read Slurm: {e}")
