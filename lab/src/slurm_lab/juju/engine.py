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
{"unit", "kind": "relation_changed", "relation_id", "remote_unit": "other/1"}, commands run
from a machine with `juju-exec` ({"kind": "custom", "command", "name"}), and a few internal kinds
starting with "_" for bookkeeping once hooks have run (a unit entering a relation's scope after
its relation-created, dropping a relation, destroying a unit's machine).

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
  Each hook runs the charm's dispatch with hook tools answering from the model as it was when
  the hook started (`runner`, `jujuc`); its relation data, secrets, ports and unit state are
  committed when it exits 0, as on Juju. Status is set at once, as Juju's status-set does (the
  lab shows a running hook's status by reading its context file).
- update-status fires every `update_status_interval` seconds (300, as Juju's default) of
  `wait()` polling, counted per `LabJuju` object, not per unit from the unit's start.
- Hook retries: a failed hook is retried after 5 s, doubling up to 5 minutes, as Juju does; the
  next retry time is kept in the model. Retries run only while the backend is driven (above).
- Leader election: the leader keeps leadership while its departure hooks run; the new leader is
  chosen right after the old one's `remove` hook (Juju waits for the lease to expire, up to a
  minute) and then gets leader-elected. The lowest-numbered remaining unit wins.
- Machine lifetime: a removed unit's machine is destroyed right after the unit's `remove` hook,
  as Juju does; whatever still runs there (a transient systemd unit) is killed with it.
- `juju-exec -u <unit> <command>` on a machine runs the command in the unit's hook context,
  queued with its hooks, for units on that machine; the host answers within about a second
  while it is driven, else the command times out (`EXEC_TIMEOUT`). Its changes commit if it
  exits 0; a failing command returns its exit status without putting the unit in error.
- Actions run at once in the calling process, after the unit's own background hook (if any).
- `juju exec --unit` from the backend (jubilant's `exec`) runs in the hook context of
  `juju-exec` once the unit is idle, holding the unit (`start_exec`, `end_exec`) but not the
  model: Juju holds a lock per machine, the lab serialises per unit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal, Protocol

from slurm_lab.errors import LabError
from slurm_lab.juju import charms, lifecycle, runner
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
from slurm_lab.proc import start_time

logger = logging.getLogger(__name__)

HOOK_TIMEOUT = 900.0
MAX_PARALLEL_HOOKS = 4
HOOK_GRACE = 15.0
"""A backend call returns once its hooks are done, except those running longer than this."""
RETRY_FIRST = 5.0
RETRY_MAX = 300.0
EXEC_SPOOL = "/var/lib/juju/exec-spool"
EXEC_TIMEOUT = 300
JUJU_EXEC_PATH = "/usr/local/bin/juju-exec"
DISPATCH_COMMAND = re.compile(r"JUJU_DISPATCH_PATH=hooks/([a-z][a-z0-9-]{0,63}) \S+/dispatch")
"""A juju-exec command that dispatches a charm event (named in the logs by the event)."""


JUJU_EXEC_SCRIPT = f"""#!/usr/bin/python3
# juju-exec of the slurm lab: runs a command in a unit's hook context on this machine, Juju's
# way (serialised with the unit's hooks, the hook tools on PATH, cwd the charm dir):
#   juju-exec -u <unit> <command...>
#   juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"
# The lab host picks the request up from {EXEC_SPOOL} and answers there.
import json, os, re, sys, time, uuid

USAGE = "usage: juju-exec -u|--unit <unit> [--timeout <seconds>] <command...>"
args, unit, timeout = sys.argv[1:], None, {EXEC_TIMEOUT}
while args and args[0].startswith("-"):
    opt = args.pop(0)
    if opt == "--":
        break
    if opt in ("-u", "--unit") and args:
        unit = args.pop(0)
    elif opt.startswith("--unit="):
        unit = opt.split("=", 1)[1]
    elif opt == "--timeout" and args:
        timeout = float(args.pop(0).rstrip("s"))
    elif opt.startswith("--timeout="):
        timeout = float(opt.split("=", 1)[1].rstrip("s"))
    else:
        sys.exit(USAGE)
command = " ".join(args)
if unit is None or not command or not re.fullmatch(r"[a-z][a-z0-9-]*/[0-9]+", unit):
    sys.exit(USAGE)
request_id = uuid.uuid4().hex
requests = "{EXEC_SPOOL}/requests"
answer = f"{EXEC_SPOOL}/responses/{{request_id}}.json"
os.makedirs(requests, exist_ok=True)
tmp = f"{{requests}}/.{{request_id}}.tmp"
with open(tmp, "w") as handle:
    json.dump({{"unit": unit, "command": command}}, handle)
os.replace(tmp, f"{{requests}}/{{request_id}}.json")
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    if os.path.exists(answer):
        with open(answer) as handle:
            result = json.load(handle)
        os.unlink(answer)
        sys.stdout.write(result.get("stdout", ""))
        sys.stderr.write(result.get("stderr", ""))
        if result.get("message"):
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
        #: One tool server per hook (False: a Python process per tool call; bench-lab's before).
        self.serve_tools = True
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
        self._notice_reboots()
        while True:
            progressed = self._apply_finished()
            # Again until nothing starts: an event handled in a pass (a unit entering a
            # relation's scope) may queue hooks for idle units that can start at once.
            while self._start_runnable():
                progressed = True
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
                self._answer_exec(event, {"code": 1, "message": "ERROR the unit is gone"})
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
        entering = self.model.units.get(unit) if kind == "_enter_scope" else None
        if entering is not None and entering.in_error:  # in scope once relation-created succeeds
            return True
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
            run = self.hook_run(unit, event)
        except LabError as e:
            self._finish(unit, event, {"ok": False, "error": str(e), "context": None})
            return
        unit.running, unit.agent = event, "executing"
        unit.runner_pid, unit.runner_start = os.getpid(), start_time(os.getpid())
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_PARALLEL_HOOKS, thread_name_prefix="lab-hook")
        try:
            future = self._pool.submit(self.execute, unit, machine, run)
        except RuntimeError:
            # The interpreter is exiting (a CLI finishing its background hooks at exit):
            # concurrent.futures refuses new work then, so run the hook in this thread.
            future = Future()
            future.set_result(self.execute(unit, machine, run))
        self._inflight[unit.name] = _InFlight(event, future)

    def _apply_finished(self) -> bool:
        """Apply the results of hooks that ended, in completion order."""
        done = [(n, f) for n, f in self._inflight.items() if f.future.done()]
        for name, flight in done:
            del self._inflight[name]
            unit = self.model.units.get(name)
            if unit is None:
                continue
            unit.running, unit.runner_pid, unit.runner_start, unit.agent = None, 0, 0, "idle"
            self._finish(unit, flight.event, flight.future.result())
        return bool(done)

    def _recover_lost_hooks(self) -> None:
        """Count a hook whose process died (a CLI killed mid-hook) as failed, to retry it."""
        for unit in self.model.units.values():
            if unit.running is None or unit.name in self._inflight:
                continue
            if start_time(unit.runner_pid) == unit.runner_start:  # that very process runs
                continue
            event, unit.running, unit.agent = unit.running, None, "idle"
            unit.runner_pid = unit.runner_start = 0
            if event["kind"] == "custom" and not event.get("exec"):
                continue  # the backend's `juju exec`: a command, not a hook, nothing to retry
            lost = hook_name(event, self.model)
            self.log(unit, "ERROR", f'hook "{lost}" lost: its process died')
            self._failed(unit, event)

    def _finish(self, unit: Unit, event: JsonDict, response: JsonDict) -> bool:
        """Commit a hook that exited 0; for one that failed keep only what Juju keeps.

        Status and workload version were set at once (Juju's status-set is not part of the
        hook's commit); relation data, secrets, ports and unit state are dropped.
        """
        name = hook_name(event, self.model)
        context: JsonDict | None = response.get("context")
        if context is not None:
            self.apply_immediate(unit, context)
        reboot = (context or {}).get("out", {}).get("reboot")
        if reboot == "now":  # the hook was killed: nothing commits, it runs again after boot
            self.log(unit, "INFO", f'"{name}" asked for a reboot now')
            self._reboot(unit, rerun=event)
            return False
        if event["kind"] == "custom":
            if response["ok"] and context is not None:
                self.commit(unit, context)
            elif not response["ok"]:  # the backend's `juju exec` failing is no error of the unit
                level = "ERROR" if event.get("exec") else "DEBUG"
                self.log(unit, level, f'juju-exec of "{name}" failed:\n{response["error"]}')
            self._answer_exec(event, response)
            if reboot:
                self._reboot(unit)
            return bool(response["ok"])
        if not response["ok"] or context is None:
            self.log(unit, "ERROR", f'hook "{name}" failed:\n{response["error"]}')
            self._failed(unit, event)
            return False
        self._succeeded(unit)
        self.commit(unit, context)
        self._after(unit, event)
        if reboot:
            self._reboot(unit)
        return True

    def _reboot(self, unit: Unit, rerun: JsonDict | None = None) -> None:
        """juju-reboot: power-cycle the unit's machine; `start` runs again after boot.

        With --now, the interrupted hook runs again after `start`, as Juju re-queues it.
        """
        host = self.model.units.get(unit.principal) if unit.principal else unit
        machine = host.machine if host is not None else unit.machine
        power_off = getattr(self.lab, "power_off", None)
        power_on = getattr(self.lab, "power_on", None)
        if power_off is None or power_on is None:
            self.log(unit, "ERROR", "juju-reboot: this lab cannot power-cycle machines")
            return
        power_off(machine)
        power_on(machine)
        self._boot_seen(machine)
        self._queue_start(machine)
        if rerun is not None:
            position = next(
                (
                    i + 1
                    for i, e in enumerate(self.model.queue)
                    if e == {"unit": unit.name, "kind": "start"}
                ),
                0,
            )
            self.model.queue.insert(position, rerun)

    def _notice_reboots(self) -> None:
        """Queue `start` on a machine's units once it booted again (`reboot` in it, a power cycle).

        Juju's machine agent starts with each boot and runs `start` again. A boot is told by
        the machine's init, a new process each time.
        """
        for machine in sorted({u.machine for u in self.model.units.values()}):
            seen = self.model.boots.get(machine)
            current = self._boot_seen(machine)
            if seen and current and current != seen:
                self.log(self._first_unit(machine), "INFO", f"machine {machine} booted again")
                self._queue_start(machine)

    def _boot_seen(self, machine: str) -> int:
        """Record the machine's current boot (when its init started, 0 while it has none).

        The start time, not the PID: a new init may get the PID an old one had.
        """
        try:
            boot = int(getattr(self.lab.get(machine), "init_start", 0) or 0)
        except LabError:
            return 0
        if boot:
            self.model.boots[machine] = boot
        return boot

    def _first_unit(self, machine: str) -> Unit:
        return min(
            (u for u in self.model.units.values() if u.machine == machine), key=lambda u: u.name
        )

    def _queue_start(self, machine: str) -> None:
        """Put `start` first in the queue for every unit on the machine."""
        on_machine = sorted(u.name for u in self.model.units.values() if u.machine == machine)
        for name in on_machine:
            self.model.queue.insert(0, {"unit": name, "kind": "start"})

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
        return self.execute(unit, self.machine(unit), self.hook_run(unit, event))

    # --- `juju exec --unit` from the backend ---------------------------------------------------

    def start_exec(self, unit: Unit, script: str) -> tuple[JsonDict, runner.HookRun]:
        """`juju exec --unit`: claim the idle unit for a bash script run in its hook context.

        As the machine's juju-exec: the hook tools first on PATH, the hook's variables, cwd the
        charm dir. The unit shows as executing and none of its hooks starts until `end_exec`;
        the caller runs the script (`execute`) outside the model session, so other units'
        hooks and other commands go on meanwhile.
        """
        match = DISPATCH_COMMAND.fullmatch(script)
        event = {
            "unit": unit.name,
            "kind": "custom",
            "command": f"exec /bin/bash -c {shlex.quote(script)}",
            "name": match.group(1) if match else "juju-exec",
        }
        run = self.hook_run(unit, event)
        unit.running, unit.agent = event, "executing"
        unit.runner_pid, unit.runner_start = os.getpid(), start_time(os.getpid())
        return event, run

    def end_exec(self, name: str, event: JsonDict, response: JsonDict | None) -> None:
        """Release the unit `start_exec` claimed; commit the script's changes if it exited 0.

        A failing script returns its status, not an error of the unit. Nothing commits when
        the lab could not run it (no response, or `lab_error`: machine down, timeout).
        """
        unit = self.model.units.get(name)
        if unit is None or unit.running != event:
            return
        unit.running, unit.runner_pid, unit.runner_start, unit.agent = None, 0, 0, "idle"
        if response is not None and not response.get("lab_error"):
            self._finish(unit, event, response)

    def hook_run(self, unit: Unit, event: JsonDict) -> runner.HookRun:
        """Prepare one hook: the unit's view of the model and the hook's Juju variables."""
        command = event.get("command") if event["kind"] == "custom" else None
        return runner.HookRun(
            unit.name,
            unit.app,
            self.unit_view(unit, event),
            self.hook_vars(unit, event),
            name=hook_name(event, self.model),
            command=command,
        )

    def execute(
        self,
        unit: Unit,
        machine: MachineLike,
        run: runner.HookRun,
        timeout: float = HOOK_TIMEOUT,
    ) -> JsonDict:
        """Run dispatch (or a juju-exec command) in the unit's machine; the response.

        Runs in worker threads: reads nothing from the model, writes only the unit's logs.
        `lab_error` in the response: the lab failed to run it (machine down, timeout).
        """
        name = run.name
        try:
            host_path = self.lab.host_path(machine.name, run.context_path)
            response = runner.execute(
                run,
                machine,
                host_path,
                self.charms_mount,
                timeout,
                serve_tools=self.serve_tools,
            )
        except LabError as e:
            return {"ok": False, "error": str(e), "context": None, "lab_error": True}
        except Exception as e:  # a worker must always answer
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "context": None}
        self.hook_times.append(response["elapsed"])
        context = response.get("context") or {}
        for level, message in context.get("out", {}).get("log", []):
            self.log(unit, level, message)
        output = (response.get("stdout", "") + response.get("stderr", "")).rstrip()
        if output and not run.command:
            self.log(unit, "DEBUG", f"{name} output:\n{output}")
        self.log(unit, "INFO", f'ran "{name}" hook ({response["elapsed"]:.2f}s)')
        return response

    def _refresh_live_status(self) -> None:
        """Show the status a running hook set (status-set takes effect at once on Juju)."""
        for unit in self.model.units.values():
            if unit.running is None or unit.name not in self._inflight:
                continue
            folder = f"{runner.unit_dir(unit.name)}/{runner.CONTEXT_DIR}"
            try:
                found = list(self.lab.host_path(unit.machine, folder).glob("*.json"))
                live: JsonDict = json.loads(found[0].read_text()) if found else {}
            except (OSError, ValueError, LabError):
                continue
            if live:
                self.apply_immediate(unit, live)

    # --- juju-exec: commands run in a unit's hook context from its machine ----------------------

    def _collect_exec_requests(self) -> None:
        """Queue a juju-exec command for each request a machine's juju-exec left."""
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
        command = str(raw.get("command", ""))
        event = {"unit": "", "kind": "custom", "command": command, "exec": [machine, request_id]}
        unit = self.model.units.get(str(raw.get("unit")))
        if unit is None or unit.machine != machine:
            self._answer_exec(
                event,
                {
                    "code": 1,
                    "message": f'ERROR unit "{raw.get("unit")}" is not on this machine',
                },
            )
        elif self.model.apps[unit.app].kind != "charm":
            self._answer_exec(
                event, {"code": 1, "message": f'ERROR unit "{unit.name}" has no charm'}
            )
        else:
            match = DISPATCH_COMMAND.fullmatch(command)
            name = match.group(1) if match else "juju-exec"
            self.model.queue.append({**event, "unit": unit.name, "name": name})

    def _answer_exec(self, event: JsonDict, response: JsonDict) -> None:
        """Write the result a waiting juju-exec reads (its command's output and exit status)."""
        if event["kind"] != "custom" or not event.get("exec"):
            return
        machine, request_id = event["exec"]
        answer = {
            "code": response.get("code", 0 if response.get("ok") else 1),
            "stdout": response.get("stdout", ""),
            "stderr": response.get("stderr", ""),
            "message": response.get("message", ""),
        }
        if response.get("context") is None and response.get("error") and not answer["stderr"]:
            answer["message"] = f"ERROR {response['error']}"
        with contextlib.suppress(OSError, LabError):
            folder = self.lab.host_path(machine, f"{EXEC_SPOOL}/responses")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{request_id}.tmp"
            tmp.write_text(json.dumps(answer))
            tmp.replace(folder / f"{request_id}.json")

    # --- the unit's view: what its hook tools answer from --------------------------------------

    def hook_vars(self, unit: Unit, event: JsonDict) -> dict[str, str | None]:
        """Return the variables Juju sets for this hook (dispatch path, relation, secret...)."""
        kind: str = event["kind"]
        if kind == "custom":
            return {}  # juju-exec: the command sets JUJU_DISPATCH_PATH itself if it dispatches
        if kind == "action":
            return {
                "JUJU_DISPATCH_PATH": f"actions/{event['name']}",
                "JUJU_ACTION_NAME": event["name"],
                "JUJU_ACTION_UUID": str(event["id"]),
            }
        name = hook_name(event, self.model)
        out: dict[str, str | None] = {
            "JUJU_DISPATCH_PATH": f"hooks/{name}",
            "JUJU_HOOK_NAME": name,
        }
        if kind.startswith("relation_"):
            rel = self.model.relations.get(str(event["relation_id"]))
            if rel is not None:
                endpoint = rel.endpoint_of(unit.app).endpoint
                out["JUJU_RELATION"] = endpoint
                out["JUJU_RELATION_ID"] = f"{endpoint}:{rel.id}"
                out["JUJU_REMOTE_APP"] = rel.other_app(unit.app)
            out["JUJU_REMOTE_UNIT"] = event.get("remote_unit")
            if kind == "relation_departed":
                out["JUJU_DEPARTING_UNIT"] = event.get("departing_unit")
        if kind.startswith("secret_"):
            secret = self.model.secrets.get(event["secret_id"])
            out["JUJU_SECRET_ID"] = event["secret_id"]
            if secret is not None:
                consumer = secret.consumers.get(unit.name)
                owned = secret.owner in (unit.app, unit.name)
                out["JUJU_SECRET_LABEL"] = (
                    secret.label if owned else (consumer.label if consumer else None)
                )
            if event.get("revision") is not None:
                out["JUJU_SECRET_REVISION"] = str(event["revision"])
        return out

    def unit_view(self, unit: Unit, event: JsonDict) -> JsonDict:
        """Return the hook context's view of the model for one unit (see `jujuc`)."""
        app = self.model.apps[unit.app]
        spec = self.spec(app)
        endpoints = spec.endpoints()
        config = {
            name: option["default"]
            for name, option in spec.options.items()
            if isinstance(option, dict) and option.get("default") is not None
        }
        config.update(app.config)
        relations = {
            str(rel.id): self._relation_view(unit, rel, event)
            for rel in self.model.relations_of(unit.app)
            if unit.name in rel.members
        }
        extra = list((spec.meta.get("extra-bindings") or {}).keys())
        units_of_app = {
            name: {"status": u.workload.name, "message": u.workload.message}
            for name in app.units
            if (u := self.model.units.get(name)) is not None
        }
        action = None
        if event["kind"] == "action":
            action = {
                "name": event["name"],
                "id": str(event["id"]),
                "params": event.get("params") or {},
            }
        return {
            "unit": unit.name,
            "app": unit.app,
            "machine_id": unit.machine_id,
            "principal": unit.principal,
            "model": {"name": self.model.name, "uuid": self.model.uuid},
            "leader": app.leader == unit.name,
            "config": config,
            "endpoints": {
                name: {"role": role, **dict(spec_)} for name, (role, spec_) in endpoints.items()
            },
            "bindings": [*endpoints.keys(), *extra],
            "address": unit.address,
            "cidr": f"{unit.address.rsplit('.', 1)[0]}.0/24",
            "relations": relations,
            "secrets": {s.id: self._secret_view(unit, s) for s in self._visible_secrets(unit)},
            "ports": list(unit.ports),
            "status": {
                "unit": {"status": unit.workload.name, "message": unit.workload.message},
                "app": {"status": app.status.name, "message": app.status.message},
                "units_of_app": units_of_app,
            },
            "workload_version": unit.workload_version,
            "action": action,
            "goal_state": self._goal_state(unit),
            "storage": [],
            "state": dict(unit.server_state),
            "out": {},
        }

    def _goal_state(self, unit: Unit) -> JsonDict:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        app = self.model.apps[unit.app]
        units = {name: {"status": "active", "since": since} for name in app.units}
        relations: JsonDict = {}
        for rel in self.model.relations_of(unit.app):
            endpoint = rel.endpoint_of(unit.app).endpoint
            other = rel.other_app(unit.app)
            goals = relations.setdefault(endpoint, {})
            if not rel.is_peer:
                goals[other] = {"status": "joined", "since": since}
            for name in self.model.apps[other].units if other in self.model.apps else []:
                if name != unit.name:
                    goals[name] = {"status": "active", "since": since}
        return {"units": units, "relations": relations}

    def _relation_view(self, unit: Unit, rel: Relation, event: JsonDict) -> JsonDict:
        local = rel.endpoint_of(unit.app)
        other = rel.other_app(unit.app)
        broken = event["kind"] == "relation_broken" and event.get("relation_id") == rel.id
        seen = [] if broken else list(rel.seen.get(unit.name, []))
        readable = {name: dict(bag) for name, bag in rel.unit_data.items()}
        readable.setdefault(unit.name, {})
        for name in seen:  # a unit in scope has settings (Juju writes its addresses on entry)
            if name not in readable and (remote := self.model.units.get(name)) is not None:
                readable[name] = self.address_bag(remote)
        apps = {unit.app: dict(rel.app_data.get(unit.app, {}))}
        if not rel.is_peer:
            apps[other] = dict(rel.app_data.get(other, {}))
        return {
            "endpoint": local.endpoint,
            "interface": local.interface,
            "remote_app": other,
            "peer": rel.is_peer,
            "key": rel.key(),
            "units": seen,
            "app_data": apps,
            "unit_data": readable,
        }

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
        if owned:
            return {
                "owner": "application" if secret.owner_kind == "app" else "unit",
                "label": secret.label,
                "description": secret.description,
                "revisions": {str(r.revision): dict(r.content) for r in secret.revisions},
                "latest": latest.revision,
                "tracked": latest.revision,
                "grants": {k: list(v) for k, v in secret.grants.items()},
            }
        consumer = secret.consumers.get(unit.name)
        revisions = {str(latest.revision): dict(latest.content)}
        if consumer is not None:
            revisions[str(consumer.tracked)] = dict(secret.content_of(consumer.tracked))
        return {
            "owner": None,
            "consumer_label": consumer.label if consumer else None,
            "revisions": revisions,
            "latest": latest.revision,
            "tracked": consumer.tracked if consumer else None,
            "grants": {},
        }

    # --- committing a hook's changes -------------------------------------------------------------

    def apply_immediate(self, unit: Unit, context: JsonDict) -> None:
        """Status and workload version: Juju sets them when the tool runs, not at commit."""
        out = context.get("out", {})
        status = context.get("status", {})
        app = self.model.apps.get(unit.app)
        if out.get("status_set"):
            self._set_status(
                unit.workload, status.get("unit"), lambda s: setattr(unit, "workload", s)
            )
            if app is not None and app.leader == unit.name:
                self._set_status(
                    app.status, status.get("app"), lambda s: setattr(app, "status", s)
                )
        if out.get("version_set"):
            unit.workload_version = str(context.get("workload_version", ""))

    def commit(self, unit: Unit, context: JsonDict) -> None:
        """Apply what a hook that exited 0 changed; queue the hooks those changes trigger."""
        out: JsonDict = context.get("out", {})
        unit.ports = list(context.get("ports", unit.ports))
        unit.server_state = dict(context.get("state", unit.server_state))
        for rel_id in out.get("relations_written", []):
            rel = self.model.relations.get(str(rel_id))
            view = context["relations"].get(str(rel_id))
            if rel is not None and view is not None:
                self._apply_databags(unit, rel, view)
        self._apply_secret_ops(unit, out.get("secret_ops", []))

    @staticmethod
    def _set_status(
        current: StatusValue, raw: dict[str, str] | None, store: Callable[[StatusValue], None]
    ) -> None:
        if not raw:
            return
        if (current.name, current.message) != (raw["status"], raw["message"]):
            store(StatusValue(raw["status"], raw["message"]))

    def _apply_databags(self, unit: Unit, rel: Relation, view: JsonDict) -> None:
        """Store the unit's (and, for the leader, the app's) databag as the hook left it."""
        mine = view["unit_data"].get(unit.name, {})
        if mine != rel.unit_data.get(unit.name, {}):
            rel.unit_data[unit.name] = dict(mine)
            for other in rel.members:
                if unit.name in rel.seen.get(other, []):
                    self.enqueue(
                        other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                    )
        app_bag = view["app_data"].get(unit.app, {})
        leader = self.model.apps[unit.app].leader == unit.name
        if leader and app_bag != rel.app_data.get(unit.app, {}):
            rel.app_data[unit.app] = dict(app_bag)
            readers = [
                m
                for m in rel.members
                if m != unit.name and self.model.units[m].app == rel.other_app(unit.app)
            ]
            for other in readers:
                if rel.seen.get(other):
                    self.enqueue(other, "relation_changed", relation_id=rel.id, remote_unit=None)

    @staticmethod
    def _remove_revision(secret: Secret, revision: int) -> None:
        """Drop a revision the owner removed (`secret-remove --revision`); never the latest."""
        if revision != secret.latest.revision:  # Removing the latest removes the secret.
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
        """Whether the unit may change the secret: its owner unit, or the owning app's leader."""
        if secret.owner_kind == "unit":
            return secret.owner == unit.name
        return self.model.apps[unit.app].leader == unit.name

    def _apply_secret_ops(self, unit: Unit, ops: list[JsonDict]) -> None:
        """Apply the secret tools' calls in order; one new revision per secret per hook."""
        pending: dict[str, dict[str, str]] = {}
        for op in ops:
            if op["op"] == "add":
                self._add_secret(unit, op)
                continue
            secret = self.model.secrets.get(op["id"])
            if secret is None:
                continue
            if op["op"] in ("track", "consumer_label"):
                self._apply_consumer_op(unit, secret, op)
            elif self._manages(unit, secret):
                self._apply_owner_op(secret, op, pending)
        for secret_id, content in pending.items():
            secret = self.model.secrets.get(secret_id)
            if secret is not None and content != secret.latest.content:
                self._new_revision(secret, content)
        for secret in self.model.secrets.values():
            self._queue_obsolete(secret)

    def _add_secret(self, unit: Unit, op: JsonDict) -> None:
        owned_by_app = op["owner"] == "application"
        self.model.secrets[op["id"]] = Secret(
            id=op["id"],
            owner=unit.app if owned_by_app else unit.name,
            owner_kind="app" if owned_by_app else "unit",
            revisions=[SecretRevision(1, dict(op["content"]))],
            label=op.get("label"),
            description=op.get("description"),
        )

    @staticmethod
    def _apply_consumer_op(unit: Unit, secret: Secret, op: JsonDict) -> None:
        """Record a consumer's tracked revision (first read, --refresh) or its label."""
        known = secret.consumers.get(unit.name)
        if op["op"] == "track":
            secret.consumers[unit.name] = Consumer(op["revision"], known.label if known else None)
        else:
            tracked = known.tracked if known else secret.latest.revision
            secret.consumers[unit.name] = Consumer(tracked, op["label"])

    def _apply_owner_op(
        self, secret: Secret, op: JsonDict, pending: dict[str, dict[str, str]]
    ) -> None:
        """secret-set, -grant, -revoke or -remove by the unit that manages the secret."""
        kind = op["op"]
        if kind == "set":
            for name in ("label", "description"):
                if op.get(name) is not None:
                    setattr(secret, name, op[name])
            if op.get("content") is not None:
                pending[secret.id] = dict(op["content"])
        elif kind in ("grant", "revoke"):
            self._apply_grant(secret, op)
        elif kind == "remove" and op.get("revision") is None:
            del self.model.secrets[secret.id]
            pending.pop(secret.id, None)
        elif kind == "remove":
            self._remove_revision(secret, op["revision"])

    def _apply_grant(self, secret: Secret, op: JsonDict) -> None:
        rel_id = op.get("relation")
        if rel_id is None:
            return
        rel = self.model.relations.get(str(rel_id))
        if rel is None:
            return
        grantee = op.get("unit") or op.get("app") or rel.other_app(secret.owner.split("/")[0])
        grantees = secret.grants.setdefault(str(rel_id), [])
        if op["op"] == "grant" and grantee not in grantees:
            grantees.append(grantee)
        elif op["op"] == "revoke" and grantee in grantees:
            grantees.remove(grantee)
            if not grantees:
                del secret.grants[str(rel_id)]

    def _new_revision(self, secret: Secret, content: dict[str, str]) -> None:
        """Add a revision; every consumer tracking an older one gets secret-changed."""
        revision = secret.latest.revision + 1
        secret.revisions.append(SecretRevision(revision, content))
        for consumer_unit, consumer in sorted(secret.consumers.items()):
            if consumer.tracked < revision:
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
                if unit.name in rel.in_scope:
                    rel.in_scope.remove(unit.name)
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
        elif kind == "_enter_scope":
            lifecycle.enter_scope(self, event["unit"], event["relation_id"])
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
