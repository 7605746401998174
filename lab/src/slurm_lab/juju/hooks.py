"""What the lab's engine schedules: hook names, events, its timeouts, machines and lab.

An event is a small JSON document: {"unit": "app/0", "kind": "install"} or, for relations,
{"unit", "kind": "relation_changed", "relation_id", "remote_unit": "other/1"}, commands run in
a unit's hook context ({"kind": "custom", "command", "name"}: `juju-exec` from a machine, or
`juju exec --unit` from the backend), and a few internal kinds starting with "_" for
bookkeeping once hooks have run (a unit entering a relation's scope after its
relation-created, dropping a relation or an application, destroying a unit's machine).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Protocol

from slurm_lab.juju import runner
from slurm_lab.juju.model import JsonDict, ModelState

HOOK_TIMEOUT = 900.0
MAX_PARALLEL_HOOKS = 4
HOOK_GRACE = 15.0
"""A backend call returns once its hooks are done, except those running longer than this."""
RETRY_FIRST = 5.0
RETRY_MAX = 300.0
DISPATCH_COMMAND = re.compile(r"JUJU_DISPATCH_PATH=hooks/([a-z][a-z0-9-]{0,63}) \S+/dispatch")
"""A juju-exec command that dispatches a charm event (named in the logs by the event)."""


def event(unit: str, kind: str, **fields: Any) -> JsonDict:
    """Return an event for a unit (`unit` is "" for the internal kinds of no unit)."""
    return {"unit": unit, "kind": kind, **fields}


def command_name(command: str) -> str:
    """Name a command run in a hook context: the event it dispatches, else `juju-exec`."""
    match = DISPATCH_COMMAND.fullmatch(command)
    return match.group(1) if match else "juju-exec"


def hook_name(event: JsonDict, model: ModelState) -> str:
    """Return the Juju hook name for an event, like 'slurmd-relation-changed'."""
    kind: str = event["kind"]
    if kind == "action":
        return f"action {event['name']}"
    if kind == "custom":
        return str(event["name"])
    if kind.startswith("relation_"):
        relation = model.relations.get(str(event["relation_id"]))
        unit = model.units.get(event["unit"])
        endpoint = relation.endpoint_of(unit.app).endpoint if relation and unit else "?"
        return f"{endpoint}-{kind.replace('_', '-')}"
    return kind.replace("_", "-")


class MachineLike(runner.MachineLike, Protocol):
    """What the backend needs from a lab machine: what a hook needs, and its journal."""

    def journal(self, unit: str | None = None, lines: int = 500) -> str:
        """Return the machine's journal."""
        ...

    def write_file(self, dest: str, content: str | bytes, mode: int = 0o644) -> None:
        """Write a file inside the machine."""
        ...


class LabLike(Protocol):
    """What the backend needs from the lab (slurm_lab.machines.Lab)."""

    state_dir: Path
    shared_dir: Path
    charms_dir: Path
    suite: str

    def create(self, name: str, kind: Literal["container", "vm"] = "container") -> Any:
        """Create and boot a machine (a container, or a VM for `virt-type=virtual-machine`)."""
        ...

    def get(self, name: str) -> Any:
        """Return the named machine."""
        ...

    def destroy(self, name: str) -> None:
        """Remove the named machine."""
        ...

    def machines(self) -> list[Any]:
        """Return every machine."""
        ...

    def host_path(self, name: str, path: str) -> Path:
        """Where a path inside the named machine is on the host."""
        ...
