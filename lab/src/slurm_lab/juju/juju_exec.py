"""`juju-exec` on the lab's machines: the host's side of the machine's program.

`juju-exec -u <unit> <command>` on a machine (`programs/juju_exec.py`, installed as
`JUJU_EXEC_PATH`) runs the command in the unit's hook context, queued with its hooks, for units
on that machine. The program leaves a request in the machine's spool; the engine turns each
into a `custom` event of the unit (`collect_requests`) and, once it ran, writes the answer the
program waits for (`answer`): the command's output and exit status. The host answers within
about a second while it is driven, else the command times out (`programs.juju_exec.TIMEOUT`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from slurm_lab.errors import LabError
from slurm_lab.juju import hooks
from slurm_lab.juju.model import JsonDict, ModelState
from slurm_lab.juju.programs import juju_exec as program

JUJU_EXEC_PATH = "/usr/local/bin/juju-exec"
EXEC_SPOOL = program.SPOOL


def install(machine: hooks.MachineLike) -> None:
    """Install the program on a unit's machine."""
    machine.write_file(JUJU_EXEC_PATH, Path(program.__file__).read_text(), 0o755)


def collect_requests(lab: hooks.LabLike, model: ModelState) -> list[JsonDict]:
    """Return a command event for each request a machine's juju-exec left, in order.

    A request for a unit that is not on its machine, or has no charm, is answered at once.
    """
    events: list[JsonDict] = []
    machines = {u.machine for u in model.units.values() if u.principal is None}
    for machine in sorted(machines):
        try:
            spool = lab.host_path(machine, f"{EXEC_SPOOL}/requests")
            files = sorted(spool.glob("*.json"))
        except (OSError, LabError):
            continue
        for path in files:
            found = _take_request(lab, model, machine, path)
            if found is not None:
                events.append(found)
    return events


def _take_request(
    lab: hooks.LabLike, model: ModelState, machine: str, path: Path
) -> JsonDict | None:
    request_id = path.stem
    try:
        raw: JsonDict = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # still being written; next time
    with contextlib.suppress(OSError):
        path.unlink()
    command = str(raw.get("command", ""))
    event = {"unit": "", "kind": "custom", "command": command, "exec": [machine, request_id]}
    unit = model.units.get(str(raw.get("unit")))
    if unit is None or unit.machine != machine:
        message = f'ERROR unit "{raw.get("unit")}" is not on this machine'
        answer(lab, event, {"code": 1, "message": message})
        return None
    if model.apps[unit.app].kind != "charm":
        answer(lab, event, {"code": 1, "message": f'ERROR unit "{unit.name}" has no charm'})
        return None
    return {**event, "unit": unit.name, "name": hooks.command_name(command)}


def answer(lab: hooks.LabLike, event: JsonDict, response: JsonDict) -> None:
    """Write the result a waiting juju-exec reads (its command's output and exit status)."""
    if event["kind"] != "custom" or not event.get("exec"):
        return
    machine, request_id = event["exec"]
    reply = {
        "code": response.get("code", 0 if response.get("ok") else 1),
        "stdout": response.get("stdout", ""),
        "stderr": response.get("stderr", ""),
        "message": response.get("message", ""),
    }
    if response.get("context") is None and response.get("error") and not reply["stderr"]:
        reply["message"] = f"ERROR {response['error']}"
    with contextlib.suppress(OSError, LabError):
        folder = lab.host_path(machine, f"{EXEC_SPOOL}/responses")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{request_id}.tmp"
        tmp.write_text(json.dumps(reply))
        tmp.replace(folder / f"{request_id}.json")
