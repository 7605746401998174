"""The lab's Juju controller: a scheduler of hooks over the model, as Juju's unit agents run them.

Every change the backend makes (deploy, integrate, config, remove, ...) queues the hooks Juju
would run, in Juju's documented order (`lifecycle`). `Controller.drain` runs them as Juju's unit
agents do: one hook at a time per unit, in that unit's queue order, different units in parallel
(at most `MAX_PARALLEL_HOOKS` at once). Each hook runs in its unit's machine (`runner`) with
the unit's view of the model (`views`); its results are applied to the model by the thread
that drives the controller, in completion order (`commit`), and the events they trigger are
queued (relation-changed, secret-changed, secret-remove). This module keeps the queue, the
hooks in flight, retries and reboots; the events are described in `hooks`.

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
- A machine that is down (powered off, or between the two boots of a reboot) runs no hook: a
  hook due there, and a failed hook's retry, wait in the queue, as on Juju, whose unit agent
  is down with its machine; once it boots, `start` runs first, then what waited. A hook the
  power cut killed counts as failed and is retried after the boot. The difference: Juju shows
  such a unit's agent `lost`; the lab shows its last status. `juju exec` there fails at once.
- Leader election: the leader keeps leadership while its departure hooks run; the new leader is
  chosen right after the old one's `remove` hook (Juju waits for the lease to expire, up to a
  minute) and then gets leader-elected. The lowest-numbered remaining unit wins.
- Machine lifetime: a removed unit's machine is destroyed right after the unit's `remove` hook,
  as Juju does; whatever still runs there (a transient systemd unit) is killed with it.
- `juju-exec -u <unit> <command>` on a machine runs the command in the unit's hook context,
  queued with its hooks (`juju_exec`). Its changes commit if it exits 0; a failing command
  returns its exit status without putting the unit in error.
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
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from slurm_lab.errors import LabError
from slurm_lab.juju import charms, commit, hooks, juju_exec, lifecycle, runner, views
from slurm_lab.juju.hooks import (
    HOOK_GRACE,
    HOOK_TIMEOUT,
    MAX_PARALLEL_HOOKS,
    RETRY_FIRST,
    RETRY_MAX,
    LabLike,
    MachineLike,
    hook_name,
)
from slurm_lab.juju.model import App, JsonDict, ModelState, Unit
from slurm_lab.proc import start_time

logger = logging.getLogger(__name__)


class _InFlight:
    """A hook running in a worker thread."""

    def __init__(self, event: JsonDict, future: Future[JsonDict]) -> None:
        self.event = event
        self.future = future
        self.started = time.monotonic()


class _DownMachines:
    """Which machines are down (powered off, or rebooting), each asked once per scheduling pass.

    A lab without `is_running` (the backend's unit-test fakes) has every machine up.
    """

    def __init__(self, lab: LabLike) -> None:
        self._is_running: Callable[[str], bool] | None = getattr(lab, "is_running", None)
        self._seen: dict[str, bool] = {}

    def __call__(self, machine: str) -> bool:
        if self._is_running is None or not machine:
            return False
        if machine not in self._seen:
            try:
                self._seen[machine] = not self._is_running(machine)
            except LabError:  # no such machine (destroyed): the hook fails as before
                self._seen[machine] = False
        return self._seen[machine]


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
        self.enqueue_all([hooks.event(unit, kind, **fields)])

    def enqueue_all(self, events: Iterable[JsonDict]) -> None:
        """Queue events in order; a relation-changed already waiting is not queued again."""
        for event in events:
            if event["kind"] == "relation_changed" and event in self.model.queue:
                continue
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
        self.model.queue += juju_exec.collect_requests(self.lab, self.model)
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
        down = _DownMachines(self.lab)
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
                juju_exec.answer(self.lab, event, {"code": 1, "message": "ERROR the unit is gone"})
                progressed = True
                continue
            hook = event["kind"] != "custom"  # juju-exec runs in error too, and fails if down
            held = hook and (unit.in_error or down(unit.machine))
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
                and not down(unit.machine)
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
        commit.before(self.model, unit, event)
        app = self.model.apps[unit.app]
        if app.kind != "charm":
            self.builtin[app.kind](unit, event)
            self._succeeded(unit)
            commit.after(self.model, unit, event)
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
            juju_exec.answer(self.lab, event, response)
            if reboot:
                self._reboot(unit)
            return bool(response["ok"])
        if not response["ok"] or context is None:
            self.log(unit, "ERROR", f'hook "{name}" failed:\n{response["error"]}')
            self._failed(unit, event)
            return False
        self._succeeded(unit)
        self.commit(unit, context)
        commit.after(self.model, unit, event)
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
        command = f"exec /bin/bash -c {shlex.quote(script)}"
        event = hooks.event(unit.name, "custom", command=command, name=hooks.command_name(script))
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
            views.unit_view(self.model, self.spec(self.model.apps[unit.app]), unit, event),
            views.hook_vars(self.model, unit, event),
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

    # --- bookkeeping around hooks ----------------------------------------------------------------

    def _internal(self, event: JsonDict) -> None:
        kind = event["kind"]
        if kind == "_drop_relation":
            commit.drop_relation(self.model, event["relation_id"])
        elif kind == "_destroy_unit":
            self._destroy_unit(event["unit"])
        elif kind == "_enter_scope":
            self.enqueue_all(
                lifecycle.enter_scope(self.model, event["unit"], event["relation_id"])
            )
        elif kind == "_drop_app":
            commit.drop_app(self.model, event["app"])

    def _destroy_unit(self, name: str) -> None:
        """After a unit's last hook: its machine goes, as on Juju, and leadership moves on."""
        unit, events = commit.drop_unit(self.model, name)
        if unit is not None and unit.principal is None:
            with contextlib.suppress(LabError):
                self.lab.destroy(unit.machine)
        self.enqueue_all(events)

    def apply_immediate(self, unit: Unit, context: JsonDict) -> None:
        """Status and workload version, set at once (`commit.apply_immediate`)."""
        commit.apply_immediate(self.model, unit, context)

    def commit(self, unit: Unit, context: JsonDict) -> None:
        """Apply what a hook that exited 0 changed; queue the hooks those changes trigger."""
        self.enqueue_all(commit.commit(self.model, unit, context))

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
