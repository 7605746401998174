"""What the autoscaler reads from Slurm: slurmrestd's jobs, nodes and reservations.

Responses of data_parser v0.0.40, v0.0.41 and v0.0.42 (Slurm 24.11) are read alike: numbers
come either bare or as `{"set": ..., "infinite": ..., "number": ...}`; state lists are flags.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

API_VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42")
DEFAULT_API_VERSION = "v0.0.41"
REQUEST_TIMEOUT = 30


class SlurmUnreadable(RuntimeError):  # noqa: N818 - says what happened, like Slurm's errors
    """slurmrestd did not answer, refused the token, or answered something unreadable."""


@dataclasses.dataclass(frozen=True)
class Node:
    """A Slurm node as the autoscaler judges it."""

    name: str
    state: frozenset[str]
    cpus: int
    real_memory: int
    alloc_cpus: int
    last_busy: int
    reason: str
    partitions: tuple[str, ...]
    reservation: str = ""

    @property
    def busy(self) -> bool:
        """Whether jobs hold (part of) the node, or it is finishing one."""
        return bool(self.state & {"ALLOCATED", "MIXED", "COMPLETING"}) or self.alloc_cpus > 0

    @property
    def drained(self) -> bool:
        """Drained or draining, by anyone (an operator, or a unit that is leaving)."""
        return bool(self.state & {"DRAIN", "DRAINING", "DRAINED"})

    @property
    def usable(self) -> bool:
        """Whether the node takes new jobs: up, not drained, not reserved."""
        unusable = {"DOWN", "NOT_RESPONDING", "FAIL", "FUTURE", "INVALID_REG", "RESERVED"}
        return not self.drained and not self.state & unusable and not self.reservation


@dataclasses.dataclass(frozen=True)
class Job:
    """A pending job, with what each of its nodes must hold."""

    job_id: int
    partition: str
    node_count: int
    cpus_per_node: int
    memory_per_node: int
    reason: str
    copies: int = 1
    """Pending tasks of a job array (one record for all of them), else 1."""

    @property
    def nodes_wanted(self) -> int:
        """Nodes the record asks for: per task, times the tasks that may run at once."""
        return self.node_count * self.copies


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One consistent look at Slurm: the nodes, the pending jobs, the reserved nodes."""

    nodes: tuple[Node, ...]
    pending: tuple[Job, ...]
    reserved: frozenset[str]
    now: int


def number(value: Any, default: int = 0) -> int:
    """Read an integer from a bare number or a `{"set", "infinite", "number"}` object."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number", default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def parse_node(raw: Mapping[str, Any]) -> Node:
    """Read a node from a `/nodes` entry."""
    return Node(
        name=str(raw["name"]),
        state=frozenset(str(flag) for flag in raw.get("state", [])),
        cpus=number(raw.get("cpus")),
        real_memory=number(raw.get("real_memory")),
        alloc_cpus=number(raw.get("alloc_cpus")),
        last_busy=number(raw.get("last_busy")),
        reason=str(raw.get("reason") or ""),
        partitions=tuple(str(p) for p in raw.get("partitions", [])),
        reservation=str(raw.get("reservation") or ""),
    )


def parse_job(raw: Mapping[str, Any]) -> Job:
    """Read a job from a `/jobs` entry: its nodes, and the CPUs and memory each node must have."""
    nodes = max(1, number(raw.get("node_count"), 1))
    cpus_total = number(raw.get("cpus"))
    cpus_per_node = max(number(raw.get("minimum_cpus_per_node"), 1), -(-cpus_total // nodes))
    memory = number(raw.get("memory_per_node"))
    if not memory and (per_cpu := number(raw.get("memory_per_cpu"))):
        memory = per_cpu * cpus_per_node
    return Job(
        job_id=number(raw.get("job_id")),
        partition=str(raw.get("partition") or ""),
        node_count=nodes,
        cpus_per_node=cpus_per_node,
        memory_per_node=memory,
        reason=str(raw.get("state_reason") or ""),
        copies=_array_tasks(str(raw.get("array_task_string") or ""), raw.get("array_max_tasks")),
    )


def _array_tasks(tasks: str, throttle: object) -> int:
    """How many tasks of a pending array record may run at once (`0-9%2` → 2; none → 1)."""
    expression, _, limit = tasks.partition("%")
    count = len(_hostlist(f"x[{expression}]")) if expression else 1
    cap = int(limit) if limit.isdigit() else number(throttle)
    return max(1, min(count, cap) if cap > 0 else count)


def reserved_nodes(reservations: list[Mapping[str, Any]], now: int) -> frozenset[str]:
    """Nodes of reservations that are active now or start later (listed hostnames only)."""
    names: set[str] = set()
    for reservation in reservations:
        if number(reservation.get("end_time"), now + 1) <= now:
            continue
        names.update(_hostlist(str(reservation.get("node_list") or "")))
    return frozenset(names)


def _hostlist(text: str) -> list[str]:
    """Expand a Slurm host list such as `compute-[0-2,5],gpu-1`."""
    names: list[str] = []
    for part in _split_top_level(text):
        prefix, bracket, rest = part.partition("[")
        if not bracket:
            names.append(part)
            continue
        ranges, _, suffix = rest.partition("]")
        for chunk in ranges.split(","):
            low, dash, high = chunk.partition("-")
            if not dash:
                names.append(f"{prefix}{low}{suffix}")
                continue
            width = len(low)
            names.extend(
                f"{prefix}{index:0{width}d}{suffix}" for index in range(int(low), int(high) + 1)
            )
    return names


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def snapshot(
    jobs: Mapping[str, Any],
    nodes: Mapping[str, Any],
    reservations: Mapping[str, Any],
    now: int,
) -> Snapshot:
    """Build a snapshot from the three responses; raises SlurmUnreadable on errors in them."""
    for response in (jobs, nodes, reservations):
        if errors := response.get("errors"):
            raise SlurmUnreadable(f"slurmrestd answered errors: {errors}")
    try:
        pending = tuple(
            parse_job(job) for job in jobs["jobs"] if "PENDING" in job.get("job_state", [])
        )
        return Snapshot(
            nodes=tuple(parse_node(node) for node in nodes["nodes"]),
            pending=pending,
            reserved=reserved_nodes(list(reservations["reservations"]), now),
            now=now,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SlurmUnreadable(f"unexpected slurmrestd response: {e!r}") from e


class Transport(Protocol):
    """Sends a GET with the token headers to slurmrestd; returns (HTTP status, body)."""

    def __call__(self, url: str, headers: Mapping[str, str]) -> tuple[int, str]:
        """GET `url` with `headers`."""
        ...


def http_get(url: str, headers: Mapping[str, str]) -> tuple[int, str]:
    """GET over HTTP from this machine."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        raise SlurmUnreadable(f"slurmrestd unreachable at {url}: {e}") from e


def curl_on_unit(exec_on_unit: Callable[[str], str]) -> Transport:
    """Return a transport that runs curl on a unit (`juju exec`).

    For a slurmrestd this machine cannot reach. The token is then on that unit's command
    line (and in Juju's task log): the program asks for short-lived tokens.
    """

    def get(url: str, headers: Mapping[str, str]) -> tuple[int, str]:
        options = " ".join(f"-H {shlex.quote(f'{k}: {v}')}" for k, v in headers.items())
        marker = "\n--http-status--"
        command = (
            f"curl -sS --max-time {REQUEST_TIMEOUT} {options} "
            f"-w {shlex.quote(marker + '%{http_code}')} {shlex.quote(url)}"
        )
        try:
            out = exec_on_unit(command)
        except Exception as e:
            raise SlurmUnreadable(f"slurmrestd unreachable at {url} (via juju exec): {e}") from e
        body, _, status = out.rpartition(marker.strip("\n"))
        return int(status.strip() or 0) if status.strip().isdigit() else 0, body

    return get


@dataclasses.dataclass
class RestClient:
    """Reads Slurm through slurmrestd (`X-SLURM-USER-NAME`/`-TOKEN` headers)."""

    base_url: str
    user: str
    token: str
    transport: Transport = http_get
    version: str = DEFAULT_API_VERSION

    def get(self, endpoint: str) -> dict[str, Any]:
        """GET `/slurm/<version>/<endpoint>`; raises SlurmUnreadable unless HTTP 200 JSON."""
        url = f"{self.base_url.rstrip('/')}/slurm/{self.version}/{endpoint}"
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token}
        status, body = self.transport(url, headers)
        if status != 200:
            raise SlurmUnreadable(f"slurmrestd answered HTTP {status} for {endpoint}")
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError as e:
            raise SlurmUnreadable(f"slurmrestd answered non-JSON for {endpoint}") from e
        if not isinstance(parsed, dict):
            raise SlurmUnreadable(f"slurmrestd answered a non-object for {endpoint}")
        return parsed

    def snapshot(self, now: int) -> Snapshot:
        """Read the jobs, nodes and reservations."""
        return snapshot(self.get("jobs"), self.get("nodes"), self.get("reservations"), now)
