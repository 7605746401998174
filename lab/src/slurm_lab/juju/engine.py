"""The lab's Juju controller: an event queue, hook execution in unit machines, state updates.

Every change the backend makes (deploy, integrate, config, remove, ...) enqueues the hooks Juju
would run, in Juju's documented order. `Controller.drain` runs them as Juju's unit agents do:
one hook at a time per unit, in that unit's queue order, different units in parallel (at most
`MAX_PARALLEL_HOOKS` at once). Each hook's results are applied to the model by the thread that
drives the controller, in completion order. A hook that changes a databag or a secret enqueues
the follow-up hooks (relation-changed, secret-changed) on the units Juju would notify.

Secret revisions follow Juju's rule: a revision is obsolete once it is not the latest and no
consumer unit tracks it (after the owner adds a revision, or after a consumer moves on with
`secret-get --refresh`). Juju then runs `secret-remove` once per obsolete revision on the
owner: the owner unit, or the leader of the owning application. The revision stays until the
charm removes it (`secret-remove --revision`); the owner's own units always read the latest.

An event is a small JSON document: {"unit": "app/0", "kind": "install"} or, for relations,
{"unit", "kind": "relation_changed", "relation_id", "remote_unit": "other/1"}, custom events
dispatched from a machine with `juju-exec` ({"kind": "custom", "name": "my-event"}), and a few
internal kinds starting with "_" for bookkeeping once hooks have run (dropping a relation,
destroying a unit's machine).

How the lab still differs from Juju 3 (everything else is meant to match it):

- Machines are Debian 13 systemd-nspawn containers sharing the host kernel, not Ubuntu VMs or
  LXD containers; the status document says base debian/13.
- Hooks run only while the backend is driven: during a `LabJuju` call, `wait()` polling (about
  every second) and at the start of every model session. Between calls nothing runs: no
  update-status, no hook retry, no `juju-exec` dispatch. A hook still running when its call
  returns (past `HOOK_GRACE` seconds) keeps running in a thread of the calling process; its
  results are applied by that process in a later call, `wait()` poll or at its exit (a CLI
  process exits only when its background hooks are done). Another process sees the unit as
  executing meanwhile and runs other units' hooks; if the owning process dies, the hook counts
  as failed and is retried.
- Concurrency: at most `MAX_PARALLEL_HOOKS` hooks at once in one process (Juju has no limit).
  Each hook sees the model as it was when the hook started; ops.testing sends its databag,
  secret and status changes back when it ends (Juju applies relation-set at hook end too, but
  status-set immediately: the lab shows in-hook statuses by reading a file the runner writes).
- update-status fires every `update_status_interval` seconds (300, as Juju's default) of
  `wait()` polling, counted per `LabJuju` object, not per unit from the unit's start.
- Hook retries: a failed hook is retried after 5 s, doubling up to 5 minutes, as Juju does; the
  next retry time is kept in the model. Retries run only while the backend is driven (above).
- Leader election: the leader keeps leadership while its departure hooks run; the new leader is
  chosen right after the old one's `remove` hook (Juju waits for the lease to expire, up to a
  minute) and then gets leader-elected. The lowest-numbered remaining unit wins.
- Machine lifetime: a removed unit's machine is destroyed right after the unit's `remove` hook,
  as Juju does; whatever still runs there (a transient systemd unit) is killed with it.
- `juju-exec` on a machine accepts only the dispatch form
  (`juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"`) for units on
  that machine; the host answers within about a second while it is driven, else the command
  times out (`EXEC_TIMEOUT`). A failing dispatch returns non-zero without putting the unit in
  error and without applying the charm's changes.
- Actions run at once in the calling process, after the unit's own background hook (if any).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from slurm_lab.errors import LabError
from slurm_lab.juju import charms
from slurm_lab.juju.model import (
    App,
    Consumer,
    JsonDict,
    ModelState,
    Relation,
    Secret,
    SecretRevision,
    StatusValue,
    Unit,
)

logger = logging.getLogger(__name__)

HOOK_TIMEOUT = 900.0
UNIT_AGENT_DIR = "/var/lib/juju/agents"
PYCACHE_DIR = "/var/cache/lab-juju/pycache"
MAX_PARALLEL_HOOKS = 4
HOOK_GRACE = 15.0
"""A backend call returns once its hooks are done, except those running longer than this."""
RETRY_FIRST = 5.0
RETRY_MAX = 300.0
EXEC_SPOOL = "/var/lib/juju/exec-spool"
EXEC_TIMEOUT = 300
JUJU_EXEC_PATH = "/usr/local/bin/juju-exec"
LIVE_STATUS_FILE = "lab-status.json"
EVENT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


JUJU_EXEC_SCRIPT = f"""#!/usr/bin/python3
# juju-exec of the slurm lab: runs a charm event of a unit on this machine, Juju's way:
#   juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"
# The lab host picks the request up from {EXEC_SPOOL} and answers there.
import json, os, re, sys, time, uuid

USAGE = 'usage: juju-exec -u|--unit <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"'
args, unit = sys.argv[1:], None
while args and args[0].startswith("-"):
    opt = args.pop(0)
    if opt in ("-u", "--unit") and args:
        unit = args.pop(0)
    elif opt.startswith("--unit="):
        unit = opt.split("=", 1)[1]
    else:
        sys.exit(USAGE)
command = " ".join(args)
match = re.fullmatch(r"JUJU_DISPATCH_PATH=hooks/([a-z][a-z0-9-]*) (/\\S+)/dispatch", command)
if unit is None or match is None or not re.fullmatch(r"[a-z][a-z0-9-]*/[0-9]+", unit):
    sys.exit(USAGE + "\\n(the lab's juju-exec only dispatches charm events)")
app, number = unit.split("/")
expected = f"{UNIT_AGENT_DIR}/unit-{{app}}-{{number}}/charm"
if match.group(2) != expected:
    sys.exit(f"ERROR charm dir of {{unit}} is {{expected}}")
request_id = uuid.uuid4().hex
requests = "{EXEC_SPOOL}/requests"
answer = f"{EXEC_SPOOL}/responses/{{request_id}}.json"
os.makedirs(requests, exist_ok=True)
tmp = f"{{requests}}/.{{request_id}}.tmp"
with open(tmp, "w") as handle:
    json.dump({{"unit": unit, "event": match.group(1)}}, handle)
os.replace(tmp, f"{{requests}}/{{request_id}}.json")
deadline = time.monotonic() + {EXEC_TIMEOUT}
while time.monotonic() < deadline:
    if os.path.exists(answer):
        with open(answer) as handle:
            result = json.load(handle)
        os.unlink(answer)
        if result["message"]:
            print(result["message"], file=sys.stderr)
        sys.exit(result["code"])
    time.sleep(0.2)
try:
    os.unlink(f"{{requests}}/{{request_id}}.json")
except FileNotFoundError:
    pass
sys.exit("ERROR timed out waiting for the hook to run")
"""
"""The juju-exec installed on every unit machine (see `Controller._collect_exec_requests`)."""


class MachineLike(Protocol):
    """What the backend needs from a lab machine (slurm_lab.machines.Machine)."""

    name: str
    address: str

    def exec(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        timeout: float | None = 120,
        env: dict[str, str] | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the machine."""
        ...

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

    def create(self, name: str) -> Any:
        """Create and boot a machine."""
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _InFlight:
    """A hook running in a worker thread."""

    def __init__(self, event: JsonDict, future: Future[JsonDict]) -> None:
        self.event = event
        self.future = future
        self.started = time.monotonic()


class Controller:
    """Runs hooks for a model on a lab; owns the event queue."""

    def __init__(
        self,
        model: ModelState,
        lab: LabLike,
        log_dir: Path,
        save: Callable[[], None],
        charms_mount: str = "/lab/charms",
    ) -> None:
        self.model = model
        self.lab = lab
        self.log_dir = log_dir
        self.save = save
        self.charms_mount = charms_mount
        self._specs: dict[str, charms.CharmSpec] = {}
        self.hook_times: list[float] = []
        # stand-in subordinate apps implemented in Python: app kind -> handler
        self.builtin: dict[str, Callable[[Unit, JsonDict], None]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: dict[str, _InFlight] = {}  # unit name -> its running hook
        self._log_lock = threading.Lock()

    # --- queue ---------------------------------------------------------------------------------

    def enqueue(self, unit: str, kind: str, **fields: Any) -> None:
        """Queue an event unless the same one is already waiting."""
        event = {"unit": unit, "kind": kind, **fields}
        if kind == "relation_changed" and event in self.model.queue:
            return
        self.model.queue.append(event)

    @property
    def busy(self) -> bool:
        """Whether this process has hooks running."""
        return bool(self._inflight)

    def drain(self, grace: float = HOOK_GRACE) -> None:
        """Run queued events until none can run, waiting for hooks younger than grace seconds.

        Hooks running longer than grace go on in the background; events queued behind them
        (same unit) wait. Failed hooks due for a retry and `juju-exec` requests are picked up.
        """
        self._collect_exec_requests()
        self._recover_lost_hooks()
        while True:
            progressed = self._apply_finished()
            progressed = self._start_runnable() or progressed
            self._refresh_live_status()
            if progressed:
                self.save()
            now = time.monotonic()
            young = [f for f in self._inflight.values() if now - f.started < grace]
            if young:
                oldest = min(f.started for f in young)
                wait(
                    [f.future for f in young],
                    timeout=max(0.0, grace - (now - oldest)),
                    return_when=FIRST_COMPLETED,
                )
                continue
            if not progressed:
                return

    def wait_unit_idle(self, name: str) -> None:
        """Wait for this process's running hook of a unit (if any), then apply it."""
        flight = self._inflight.get(name)
        if flight is not None:
            flight.future.result()
            self._apply_finished()
            self.save()

    def forget_inflight(self) -> None:
        """Drop track of running hooks (their machines are gone)."""
        self._inflight.clear()

    def _start_runnable(self) -> bool:
        """Start every event that may run now; whether anything started or was dropped."""
        busy = {u.name for u in self.model.units.values() if u.running is not None}
        pending, self.model.queue = self.model.queue, []
        waiting: list[JsonDict] = []
        progressed = False
        for event in pending:
            if self._blocked(event, waiting, busy):
                waiting.append(event)
                continue
            if event["kind"].startswith("_"):
                self._internal(event)
                progressed = True
                continue
            unit = self.model.units.get(event["unit"])
            if unit is None or not self._applies(unit, event):
                self._answer_exec(event, 1, "the unit is gone")
                progressed = True
                continue
            held = unit.in_error and event["kind"] != "custom"  # juju-exec runs in error too
            if held or len(self._inflight) >= MAX_PARALLEL_HOOKS:
                waiting.append(event)
                continue
            self._start(unit, event)
            busy.add(unit.name)
            progressed = True
        self.model.queue = waiting + self.model.queue
        for unit in list(self.model.units.values()):
            if (
                unit.failed_event is not None
                and unit.name not in busy
                and time.time() >= unit.retry_at
                and len(self._inflight) < MAX_PARALLEL_HOOKS
            ):
                if self._applies(unit, unit.failed_event):
                    retried = hook_name(unit.failed_event, self.model)
                    self.log(unit, "INFO", f'retrying "{retried}"')
                    self._start(unit, unit.failed_event)
                else:
                    self._succeeded(unit)
                progressed = True
        return progressed

    def _blocked(self, event: JsonDict, earlier: list[JsonDict], busy: set[str]) -> bool:
        """Whether event must wait for an earlier queued event or a running hook."""
        kind, unit = event["kind"], event["unit"]
        if kind == "_drop_relation":
            rel = event["relation_id"]
            running = [u.running for u in self.model.units.values() if u.running is not None]
            return any(e.get("relation_id") == rel for e in [*earlier, *running])
        if kind == "_drop_app":
            app = event["app"]
            return any(e["unit"].split("/")[0] == app for e in earlier) or any(
                name.split("/")[0] == app for name in busy
            )
        if unit in busy:
            return True
        return any(
            e["unit"] == unit
            or (e["kind"] == "_drop_relation" and e["relation_id"] == event.get("relation_id"))
            for e in earlier
        )

    def _applies(self, unit: Unit, event: JsonDict) -> bool:
        """Relation events only reach units that joined the relation (it may be gone)."""
        if not event["kind"].startswith("relation_"):
            return True
        rel = self.model.relations.get(str(event["relation_id"]))
        member = rel is not None and unit.name in rel.members
        if rel is None or (event["kind"] != "relation_created" and not member):
            logger.debug("dropping %s for %s: not in the relation", event["kind"], unit.name)
            return False
        return True

    def retry_now(self, unit: Unit) -> None:
        """Make a failed hook due for its retry (like `juju resolve`)."""
        unit.retry_at = 0.0

    # --- running one event ---------------------------------------------------------------------

    def spec(self, app: App) -> charms.CharmSpec:
        """Return the charm spec of an app (read once per process)."""
        if app.name not in self._specs:
            self._specs[app.name] = charms.load_spec(Path(app.charm_dir))
        return self._specs[app.name]

    def forget_spec(self, app: str) -> None:
        """Drop a cached spec (the app was redeployed)."""
        self._specs.pop(app, None)

    def machine(self, unit: Unit) -> MachineLike:
        """Return the lab machine a unit runs on."""
        return self.lab.get(unit.machine)

    def _start(self, unit: Unit, event: JsonDict) -> None:
        """Start a hook: stand-ins run at once, charms in a worker thread."""
        self._before(unit, event)
        app = self.model.apps[unit.app]
        if app.kind != "charm":
            self.builtin[app.kind](unit, event)
            self._succeeded(unit)
            self._after(unit, event)
            return
        try:
            machine = self.machine(unit)
        except LabError as e:
            self._finish(unit, event, {"ok": False, "error": str(e), "log": []})
            return
        request = self.request(unit, event)
        unit.running, unit.runner_pid, unit.agent = event, os.getpid(), "executing"
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_PARALLEL_HOOKS, thread_name_prefix="lab-hook")
        try:
            future = self._pool.submit(self.execute, unit, machine, request)
        except RuntimeError:
            # The interpreter is exiting (a CLI finishing its background hooks at exit):
            # concurrent.futures refuses new work then, so run the hook in this thread.
            future = Future()
            future.set_result(self.execute(unit, machine, request))
        self._inflight[unit.name] = _InFlight(event, future)

    def _apply_finished(self) -> bool:
        """Apply the results of hooks that ended, in completion order."""
        done = [(n, f) for n, f in self._inflight.items() if f.future.done()]
        for name, flight in done:
            del self._inflight[name]
            unit = self.model.units.get(name)
            if unit is None:
                continue
            unit.running, unit.runner_pid, unit.agent = None, 0, "idle"
            self._finish(unit, flight.event, flight.future.result())
        return bool(done)

    def _recover_lost_hooks(self) -> None:
        """Count a hook whose process died (a CLI killed mid-hook) as failed, to retry it."""
        for unit in self.model.units.values():
            if unit.running is None or unit.name in self._inflight:
                continue
            if unit.runner_pid == os.getpid() or _pid_alive(unit.runner_pid):
                continue
            event, unit.running, unit.runner_pid, unit.agent = unit.running, None, 0, "idle"
            lost = hook_name(event, self.model)
            self.log(unit, "ERROR", f'hook "{lost}" lost: its process died')
            self._failed(unit, event)

    def _finish(self, unit: Unit, event: JsonDict, response: JsonDict) -> bool:
        name = hook_name(event, self.model)
        if event["kind"] == "custom":
            if not response["ok"]:
                error = response["error"] or ""
                self.log(unit, "ERROR", f'juju-exec dispatch of "{name}" failed:\n{error}')
                self._answer_exec(event, 1, response["error"] or "")
                return False
            if response.get("state") is not None:
                self.apply(unit, response)
            self._answer_exec(event, 0, "")
            return True
        if not response["ok"]:
            self.log(unit, "ERROR", f'hook "{name}" failed:\n{response["error"]}')
            self._failed(unit, event)
            return False
        self._succeeded(unit)
        self.apply(unit, response)
        self._after(unit, event)
        return True

    def _failed(self, unit: Unit, event: JsonDict) -> None:
        """Put the unit in error; the hook is retried with Juju's back-off (5 s, doubling)."""
        unit.failed_event = event
        delay = min(unit.retry_delay * 2, RETRY_MAX) if unit.retry_delay else RETRY_FIRST
        unit.retry_delay = delay
        unit.retry_at = time.time() + unit.retry_delay

    @staticmethod
    def _succeeded(unit: Unit) -> None:
        unit.failed_event, unit.retry_delay, unit.retry_at = None, 0.0, 0.0

    def run_charm(self, unit: Unit, event: JsonDict) -> JsonDict:
        """Run an event in the unit's machine now, in this thread (actions)."""
        return self.execute(unit, self.machine(unit), self.request(unit, event))

    def request(self, unit: Unit, event: JsonDict) -> JsonDict:
        """Build the runner's request: the charm, the unit, the event and the unit's view."""
        app = self.model.apps[unit.app]
        spec = self.spec(app)
        unit_dir = f"{UNIT_AGENT_DIR}/unit-{app.name}-{unit.number}"
        return {
            "charm": {
                "dir": f"{self.charms_mount}/{app.name}",
                "meta": spec.meta,
                "config": spec.config,
                "actions": spec.actions,
            },
            "app": app.name,
            "unit_id": unit.number,
            "machine_id": unit.machine_id,
            "principal_unit": unit.principal,
            "unit_dir": unit_dir,
            "live_status_file": f"{unit_dir}/{LIVE_STATUS_FILE}",
            "hook": hook_name(event, self.model),
            "event": self._event_for_runner(event),
            "state": self.unit_state(unit, event),
        }

    def execute(self, unit: Unit, machine: MachineLike, request: JsonDict) -> JsonDict:
        """Execute the runner in the unit's machine; the parsed response (ok False on crash).

        Runs in worker threads: reads nothing from the model, writes only the unit's logs.
        """
        charm_dir = request["charm"]["dir"]
        env = {
            "PYTHONPATH": f"{charm_dir}/deps:{charm_dir}/src",
            "PYTHONPYCACHEPREFIX": PYCACHE_DIR,
        }
        name = request["hook"]
        started = time.monotonic()
        try:
            result = machine.exec(
                ["python3", f"{self.charms_mount}/{charms.RUNNER_DIR}/runner.py"],
                input=json.dumps(request),
                env=env,
                timeout=HOOK_TIMEOUT,
            )
        except LabError as e:
            return {"ok": False, "error": str(e), "log": []}
        except Exception as e:  # a worker must always answer
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "log": []}
        elapsed = time.monotonic() - started
        self.hook_times.append(elapsed)
        try:
            response: JsonDict = json.loads(result.stdout)
        except ValueError:
            response = {
                "ok": False,
                "error": result.stderr or f"runner exited {result.returncode}",
            }
        response["secrets_shown"] = [secret["id"] for secret in request["state"]["secrets"]]
        # what the hook started from: only its own changes are applied (others ran meanwhile)
        response["relations_in"] = {str(r["id"]): r for r in request["state"]["relations"]}
        for level, message in response.get("log") or []:
            self.log(unit, level, message)
        if result.stderr.strip():
            self.log(unit, "DEBUG", f"{name} output:\n{result.stderr.rstrip()}")
        self.log(unit, "INFO", f'ran "{name}" hook ({elapsed:.2f}s)')
        return response

    def _refresh_live_status(self) -> None:
        """Show the status a running hook set (status-set takes effect at once on Juju)."""
        for unit in self.model.units.values():
            if unit.running is None:
                continue
            app = self.model.apps[unit.app]
            path = f"{UNIT_AGENT_DIR}/unit-{app.name}-{unit.number}/{LIVE_STATUS_FILE}"
            try:
                live: JsonDict = json.loads(self.lab.host_path(unit.machine, path).read_text())
            except (OSError, ValueError, LabError):
                continue
            if isinstance(live.get("unit"), dict):
                self._set_status(
                    unit.workload, live["unit"], lambda s, u=unit: setattr(u, "workload", s)
                )
            if isinstance(live.get("app"), dict) and app.leader == unit.name:
                self._set_status(app.status, live["app"], lambda s, a=app: setattr(a, "status", s))

    # --- juju-exec: charm events dispatched from a machine --------------------------------------

    def _collect_exec_requests(self) -> None:
        """Queue a custom event for each dispatch request a machine's juju-exec left."""
        machines = {u.machine for u in self.model.units.values() if u.principal is None}
        for machine in sorted(machines):
            try:
                spool = self.lab.host_path(machine, f"{EXEC_SPOOL}/requests")
                files = sorted(spool.glob("*.json"))
            except (OSError, LabError):
                continue
            for path in files:
                self._take_exec_request(machine, path)

    def _take_exec_request(self, machine: str, path: Path) -> None:
        request_id = path.stem
        try:
            raw: JsonDict = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # still being written; next time
        with contextlib.suppress(OSError):
            path.unlink()
        event = {"unit": "", "kind": "custom", "name": "", "exec": [machine, request_id]}
        unit = self.model.units.get(str(raw.get("unit")))
        name = str(raw.get("event", ""))
        if unit is None or unit.machine != machine:
            self._answer_exec(event, 1, f'unit "{raw.get("unit")}" is not on this machine')
        elif self.model.apps[unit.app].kind != "charm":
            self._answer_exec(event, 1, f'unit "{unit.name}" has no charm')
        elif not EVENT_NAME.match(name):
            self._answer_exec(event, 1, f'bad event name "{name}"')
        else:
            self.model.queue.append({**event, "unit": unit.name, "name": name})

    def _answer_exec(self, event: JsonDict, code: int, message: str) -> None:
        """Write the result a waiting juju-exec reads (custom events only)."""
        if event["kind"] != "custom" or not event.get("exec"):
            return
        machine, request_id = event["exec"]
        with contextlib.suppress(OSError, LabError):
            folder = self.lab.host_path(machine, f"{EXEC_SPOOL}/responses")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{request_id}.tmp"
            tmp.write_text(json.dumps({"code": code, "message": message}))
            tmp.replace(folder / f"{request_id}.json")

    @staticmethod
    def _event_for_runner(event: JsonDict) -> JsonDict:
        """Turn unit names into the unit numbers ops.testing events take."""
        out = dict(event)
        if event.get("remote_unit"):
            out["remote_unit"] = int(event["remote_unit"].split("/")[1])
        if event.get("departing_unit"):
            out["departing_unit_id"] = int(event["departing_unit"].split("/")[1])
        return out

    # --- state for one unit --------------------------------------------------------------------

    def unit_state(self, unit: Unit, event: JsonDict | None = None) -> JsonDict:
        """Return the JSON view of the model one unit's charm sees (the runner builds a State)."""
        app = self.model.apps[unit.app]
        breaking = event["relation_id"] if event and event["kind"] == "relation_broken" else None
        relations = [
            self._relation_view(unit, rel, broken=rel.id == breaking)
            for rel in self.model.relations_of(unit.app)
            if unit.name in rel.members
        ]
        networks = [
            {"binding": name, "address": unit.address}
            for name, (_, spec) in self.spec(app).endpoints().items()
            if spec.get("scope") != "container"
        ]
        return {
            "config": app.config,
            "leader": app.leader == unit.name,
            "planned_units": len(app.units),
            "model": {"name": self.model.name, "uuid": self.model.uuid},
            "relations": relations,
            "networks": networks,
            "secrets": [self._secret_view(unit, s) for s in self._visible_secrets(unit)],
            "stored_states": unit.stored_states,
            "deferred": unit.deferred,
            "ports": unit.ports,
            "unit_status": {"name": unit.workload.name, "message": unit.workload.message},
            "app_status": {"name": app.status.name, "message": app.status.message},
            "workload_version": unit.workload_version,
        }

    def _relation_view(self, unit: Unit, rel: Relation, *, broken: bool) -> JsonDict:
        local = rel.endpoint_of(unit.app)
        other = rel.other_app(unit.app)
        seen = [] if broken else rel.seen.get(unit.name, [])
        declared = self.spec(self.model.apps[unit.app]).endpoints()[local.endpoint][1]
        kind = "peer" if rel.is_peer else "regular"
        if declared.get("scope") == "container":  # else ops sees a plain one-unit relation
            kind = "subordinate"
        view: JsonDict = {
            "type": kind,
            "id": rel.id,
            "endpoint": local.endpoint,
            "interface": local.interface,
            "remote_app": other,
            "local_app_data": rel.app_data.get(unit.app, {}),
            "local_unit_data": rel.unit_data.get(unit.name, {}),
            "remote_app_data": {} if rel.is_peer else rel.app_data.get(other, {}),
            "remote_units_data": {
                str(self.model.units[r].number if r in self.model.units else r.split("/")[1]): (
                    rel.unit_data.get(r, {})
                )
                for r in seen
            },
        }
        if kind == "subordinate":
            partner = rel.seen.get(unit.name) or [self._partner(unit, rel)]
            view["remote_unit_id"] = int(partner[0].split("/")[1])
            view["remote_units_data"] = {
                str(int(partner[0].split("/")[1])): rel.unit_data.get(partner[0], {})
            }
        limit = declared.get("limit")
        if limit:
            view["limit"] = limit
        return view

    def _partner(self, unit: Unit, rel: Relation) -> str:
        """For a container-scoped relation: the unit on the other side in the same machine."""
        other = rel.other_app(unit.app)
        for candidate in self.model.apps[other].units:
            peer = self.model.units[candidate]
            if peer.machine == unit.machine:
                return candidate
        return f"{other}/0"

    def _visible_secrets(self, unit: Unit) -> list[Secret]:
        found: list[Secret] = []
        for secret in self.model.secrets.values():
            if secret.owner in (unit.app, unit.name) or self._granted(secret, unit):
                found.append(secret)
        return found

    def _granted(self, secret: Secret, unit: Unit) -> bool:
        for rel_id, grantees in secret.grants.items():
            if rel_id in self.model.relations and (unit.app in grantees or unit.name in grantees):
                return True
        return False

    def _secret_view(self, unit: Unit, secret: Secret) -> JsonDict:
        owned = secret.owner in (unit.app, unit.name)
        latest = secret.latest
        consumer = secret.consumers.get(unit.name)
        tracked = latest.revision if owned or consumer is None else consumer.tracked
        return {
            "id": secret.id,
            "owner": secret.owner_kind if owned else None,
            "label": secret.label if owned else (consumer.label if consumer else None),
            "description": secret.description if owned else None,
            "tracked_content": secret.content_of(tracked),
            "latest_content": latest.content,
            "tracked_revision": tracked,
            "latest_revision": latest.revision,
            "remote_grants": secret.grants if owned else {},
        }

    # --- applying a hook's output ----------------------------------------------------------------

    def apply(self, unit: Unit, response: JsonDict) -> None:
        """Store what the hook changed; queue the hooks those changes trigger elsewhere."""
        app = self.model.apps[unit.app]
        state: JsonDict = response["state"]
        self._set_status(
            unit.workload, state["unit_status"], lambda s: setattr(unit, "workload", s)
        )
        if app.leader == unit.name:
            self._set_status(app.status, state["app_status"], lambda s: setattr(app, "status", s))
        unit.workload_version = state["workload_version"]
        unit.ports = state["ports"]
        unit.stored_states = state["stored_states"]
        unit.deferred = state["deferred"]
        started_from: dict[str, JsonDict] = response.get("relations_in") or {}
        for rel_out in state["relations"]:
            rel = self.model.relations.get(str(rel_out["id"]))
            if rel is not None:
                self._apply_databags(unit, rel, rel_out, started_from.get(str(rel.id)))
        self._apply_secrets(
            unit,
            state["secrets"],
            read=set(response.get("secrets_read") or []),
            shown=set(response.get("secrets_shown") or []),
        )
        self._remove_revisions(unit, response.get("secret_revisions_removed") or [])
        for secret in self.model.secrets.values():
            self._queue_obsolete(secret)

    @staticmethod
    def _set_status(
        current: StatusValue, raw: dict[str, str], store: Callable[[StatusValue], None]
    ) -> None:
        if (current.name, current.message) != (raw["name"], raw["message"]):
            store(StatusValue(raw["name"], raw["message"]))

    def _apply_databags(
        self, unit: Unit, rel: Relation, rel_out: JsonDict, rel_in: JsonDict | None
    ) -> None:
        """Store the databags the hook changed (compared with what it started from)."""
        unit_before = rel_in["local_unit_data"] if rel_in else rel.unit_data.get(unit.name, {})
        app_before = rel_in["local_app_data"] if rel_in else rel.app_data.get(unit.app, {})
        if rel_out["local_unit_data"] != unit_before:
            rel.unit_data[unit.name] = rel_out["local_unit_data"]
            for other in rel.members:
                if unit.name in rel.seen.get(other, []):
                    self.enqueue(
                        other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                    )
        if rel_out["local_app_data"] != app_before:
            rel.app_data[unit.app] = rel_out["local_app_data"]
            readers = [
                m
                for m in rel.members
                if m != unit.name and self.model.units[m].app == rel.other_app(unit.app)
            ]
            for other in readers:
                if rel.seen.get(other):
                    self.enqueue(other, "relation_changed", relation_id=rel.id, remote_unit=None)

    def _apply_secrets(
        self, unit: Unit, secrets_out: list[JsonDict], *, read: set[str], shown: set[str]
    ) -> None:
        present = {s["id"] for s in secrets_out}
        for raw in secrets_out:
            secret = self.model.secrets.get(raw["id"])
            if secret is None:
                if raw["owner"] is None:
                    continue
                owner = unit.app if raw["owner"] == "app" else unit.name
                secret = Secret(
                    id=raw["id"],
                    owner=owner,
                    owner_kind=raw["owner"],
                    revisions=[SecretRevision(raw["latest_revision"], raw["latest_content"])],
                )
                self.model.secrets[secret.id] = secret
            if raw["owner"] is not None:
                if self._manages(unit, secret):
                    self._apply_owned_secret(secret, raw)
            elif secret.id in read or unit.name in secret.consumers:
                secret.consumers[unit.name] = Consumer(raw["tracked_revision"], raw["label"])
        for secret in list(self.model.secrets.values()):
            owned = secret.owner in (unit.app, unit.name)
            removed = secret.id in shown and secret.id not in present
            if owned and removed and self._manages(unit, secret):  # the charm removed it
                del self.model.secrets[secret.id]

    def _remove_revisions(self, unit: Unit, removed: list[list[Any]]) -> None:
        """Drop the revisions the charm removed (`secret-remove --revision`), if it may."""
        for secret_id, revision in removed:
            secret = self.model.secrets.get(secret_id)
            if secret is None or not self._manages(unit, secret):
                continue
            if revision == secret.latest.revision:
                continue  # A secret keeps its latest revision (removing it removes the secret).
            secret.revisions = [r for r in secret.revisions if r.revision != revision]

    def _queue_obsolete(self, secret: Secret) -> None:
        """Queue secret-remove on the owner for each revision no consumer tracks any more."""
        owner = secret.owner
        if secret.owner_kind == "app":
            app = self.model.apps.get(secret.owner)
            owner = app.leader if app is not None else None
        if owner is None or owner not in self.model.units:
            return
        tracked = {consumer.tracked for consumer in secret.consumers.values()}
        for revision in secret.revisions[:-1]:
            number = revision.revision
            if number in tracked or number in secret.removal_notified:
                continue
            secret.removal_notified.append(number)
            self.enqueue(owner, "secret_remove", secret_id=secret.id, revision=number)

    def _manages(self, unit: Unit, secret: Secret) -> bool:
        """Whether the unit may change the secret: its owner unit, or the owning app's leader.

        In Juju only the leader grants, updates or removes an application's secret; another
        unit's hook output still carries the grants it saw when its hook began, which must not
        undo what the leader did meanwhile.
        """
        if secret.owner_kind == "unit":
            return secret.owner == unit.name
        return self.model.apps[unit.app].leader == unit.name

    def _apply_owned_secret(self, secret: Secret, raw: JsonDict) -> None:
        secret.label = raw["label"]
        secret.description = raw["description"]
        secret.grants = {k: list(v) for k, v in raw["remote_grants"].items()}
        if raw["latest_revision"] > secret.latest.revision:
            secret.revisions.append(SecretRevision(raw["latest_revision"], raw["latest_content"]))
            for consumer_unit, consumer in sorted(secret.consumers.items()):
                if consumer.tracked < raw["latest_revision"]:
                    self.enqueue(consumer_unit, "secret_changed", secret_id=secret.id)

    # --- bookkeeping around hooks ----------------------------------------------------------------

    def _before(self, unit: Unit, event: JsonDict) -> None:
        kind = event["kind"]
        rel = self.model.relations.get(str(event.get("relation_id")))
        if rel is None:
            return
        if kind == "relation_created" and unit.name not in rel.members:
            rel.members.append(unit.name)
            rel.unit_data.setdefault(unit.name, self.address_bag(unit))
            rel.app_data.setdefault(unit.app, {})
        elif kind == "relation_joined":
            seen = rel.seen.setdefault(unit.name, [])
            if event["remote_unit"] not in seen:
                seen.append(event["remote_unit"])
        elif kind == "relation_departed":
            gone = event["departing_unit"] if event["departing_unit"] != unit.name else None
            gone = gone or event["remote_unit"]
            seen = rel.seen.get(unit.name, [])
            if gone in seen:
                seen.remove(gone)

    def _after(self, unit: Unit, event: JsonDict) -> None:
        if event["kind"] == "relation_broken":
            rel = self.model.relations.get(str(event["relation_id"]))
            if rel is not None and unit.name in rel.members:
                rel.members.remove(unit.name)
                rel.seen.pop(unit.name, None)
        elif event["kind"] == "start" and unit.agent != "executing":
            unit.agent = "idle"

    @staticmethod
    def address_bag(unit: Unit) -> dict[str, str]:
        """Return the keys Juju puts in every unit databag."""
        return {
            "egress-subnets": f"{unit.address}/32",
            "ingress-address": unit.address,
            "private-address": unit.address,
        }

    def _internal(self, event: JsonDict) -> None:
        kind = event["kind"]
        if kind == "_drop_relation":
            rel_id = str(event["relation_id"])
            self.model.relations.pop(rel_id, None)
            for secret in self.model.secrets.values():
                secret.grants.pop(rel_id, None)
        elif kind == "_destroy_unit":
            self._destroy_unit(event["unit"])
        elif kind == "_drop_app":
            app = event["app"]
            self.model.apps.pop(app, None)
            for secret in list(self.model.secrets.values()):
                if secret.owner == app:
                    del self.model.secrets[secret.id]

    def _destroy_unit(self, name: str) -> None:
        """After a unit's last hook: its machine goes, as on Juju, and leadership moves on."""
        unit = self.model.units.pop(name, None)
        if unit is not None and unit.principal is None:
            with contextlib.suppress(LabError):
                self.lab.destroy(unit.machine)
        for secret in list(self.model.secrets.values()):
            secret.consumers.pop(name, None)
            if secret.owner == name:
                del self.model.secrets[secret.id]
            else:
                self._queue_obsolete(secret)  # The unit tracked a revision no one else does.
        app = self.model.apps.get(name.split("/", maxsplit=1)[0])
        if app is not None and app.leader == name:
            app.leader = app.units[0] if app.units else None
            if app.leader:
                self.enqueue(app.leader, "leader_elected")

    # --- logs ------------------------------------------------------------------------------------

    def log(self, unit: Unit, level: str, message: str) -> None:
        """Append a line to the unit's log and the model's debug log."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        tag = f"unit-{unit.app}-{unit.number}"
        line = f"{tag}: {stamp} {level} {message}\n"
        with self._log_lock:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with (self.log_dir / f"{tag}.log").open("a") as handle:
                handle.write(line)
            with (self.log_dir / "debug.log").open("a") as handle:
                handle.write(line)
