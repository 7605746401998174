"""What the autoscaler reads from Slurm: slurmctld's read-only `scaling-view` action.

The leader of the controller application runs `scontrol show nodes|jobs|reservations --json`
and returns the asked partitions' nodes, their pending jobs grouped by shape, the reserved
nodes and its clock (charms/slurmctld/src/scaling_view.py). No token leaves the controller.
The answer is checked here with strict pydantic models: anything else is `SlurmUnreadable`,
so a malformed answer never reaches a decision.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

ACTION = "scaling-view"
ACTION_WAIT = 300
"""Seconds the action may take (scontrol's JSON of a busy queue is megabytes)."""
MAX_NUMBER = 2**63 - 1
MAX_PARTS = 16


class SlurmUnreadable(RuntimeError):  # noqa: N818 - says what happened, like Slurm's errors
    """The action failed, did not answer, or answered something this program does not read."""


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
    """Copies of the shape that may run at once: the jobs of one shape, a job array's tasks."""
    jobs: int = 1
    """Pending jobs of this shape (`job_id` is one of them)."""

    @property
    def nodes_wanted(self) -> int:
        """Nodes the record asks for: per copy, times the copies that may run at once."""
        return self.node_count * self.copies


Number = Annotated[int, Field(ge=0, le=MAX_NUMBER, strict=True)]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{1,64}$")]
Text = Annotated[str, StringConstraints(max_length=256)]
_PARTITIONS = re.compile(r"^[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64})*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ViewNode(_Strict):
    """A node of the action's `nodes`."""

    name: Name
    state: list[Word]
    cpus: Number
    real_memory: Number
    alloc_cpus: Number
    last_busy: Number
    reason: Text
    partitions: list[Name]
    reservation: Text


class ViewShape(_Strict):
    """A shape of pending jobs of the action's `pending`."""

    partition: Annotated[str, StringConstraints(pattern=_PARTITIONS.pattern, max_length=1024)]
    nodes: Annotated[int, Field(ge=1, le=MAX_NUMBER, strict=True)]
    cpus: Number
    memory: Number
    reason: Word
    jobs: Annotated[int, Field(ge=1, le=MAX_NUMBER, strict=True)]
    copies: Annotated[int, Field(ge=1, le=MAX_NUMBER, strict=True)]
    example: Annotated[int, Field(ge=1, le=MAX_NUMBER, strict=True)]


class View(_Strict):
    """The whole answer of the action."""

    time: Number
    nodes: list[ViewNode]
    pending: list[ViewShape]
    omitted: Number
    reserved: list[Name]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One consistent look at Slurm: the nodes, the pending jobs, the reserved nodes."""

    nodes: tuple[Node, ...]
    pending: tuple[Job, ...]
    reserved: frozenset[str]
    now: int
    omitted: int = 0
    """Pending jobs the action left out (more shapes than it returns)."""


def parse_view(results: Mapping[str, Any]) -> Snapshot:
    """Read the action's results (`parts`, `part-0`...) into a snapshot.

    Raises:
        SlurmUnreadable: Anything but a well-formed view.

    """
    try:
        count = results["parts"]
        if not isinstance(count, str) or not count.isdigit() or not 1 <= int(count) <= MAX_PARTS:
            raise ValueError(f"parts {str(count)[:20]!r}")
        parts = [results[f"part-{n}"] for n in range(int(count))]
        if not all(isinstance(part, str) for part in parts):
            raise ValueError("a part is not text")
        view = View.model_validate(json.loads("".join(parts)))
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SlurmUnreadable(f"unexpected {ACTION} answer at {where}: {first['msg']}") from None
    except (KeyError, TypeError, ValueError, RecursionError) as e:
        raise SlurmUnreadable(f"unexpected {ACTION} answer: {e!r}"[:300]) from None
    return Snapshot(
        nodes=tuple(_node(node) for node in view.nodes),
        pending=tuple(_job(shape) for shape in view.pending),
        reserved=frozenset(view.reserved),
        now=view.time,
        omitted=view.omitted,
    )


def _node(node: ViewNode) -> Node:
    return Node(
        name=node.name,
        state=frozenset(node.state),
        cpus=node.cpus,
        real_memory=node.real_memory,
        alloc_cpus=node.alloc_cpus,
        last_busy=node.last_busy,
        reason=node.reason,
        partitions=tuple(node.partitions),
        reservation=node.reservation,
    )


def _job(shape: ViewShape) -> Job:
    return Job(
        job_id=shape.example,
        partition=shape.partition,
        node_count=shape.nodes,
        cpus_per_node=shape.cpus,
        memory_per_node=shape.memory,
        reason=shape.reason,
        copies=shape.copies,
        jobs=shape.jobs,
    )


class ActionRunner(Protocol):
    """Runs an action on a unit and returns its results (`jubilant.Juju.run(...).results`)."""

    def __call__(self, unit: str, action: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run `action` on `unit` with `params`."""
        ...


def read(
    run_action: ActionRunner, leader: str, partitions: list[str], api_version: str | None = None
) -> Snapshot:
    """Run the action on the controller's leader for `partitions`; its snapshot.

    `api_version` overrides the data_parser version the action negotiates (`v0.0.42`).

    Raises:
        SlurmUnreadable: The action failed (with its reason) or answered something else.

    """
    params = {"partitions": ",".join(partitions)}
    if api_version:
        params["data-parser"] = api_version
    results = run_action(leader, ACTION, params)
    return parse_view(results)
