"""`just soak`: a seeded chaos soak of the whole cluster on the lab, checked against invariants.

Issue 37. A fresh lab gets the cluster (`deploy`), a workload thread submits jobs from the
login node at `--rate` jobs a minute (mixed sizes, lengths, requeueable and not, batch and
`srun` steps, root and a user `soak`; each submission recorded with its id and time), the
autoscaler runs a pass every `AUTOSCALE_EVERY_S` on the `scaled` application, and the faults
drawn from `--seed` (`plan.draw_schedule`, printed before the run) come one after the other
at their times. After `--minutes` the workload stops and the settle phase waits for the
cluster to be healthy and every job to end; then the final checks (`history`) run and
`build/soak-report.json` is written. A violation or a job lost in silence exits 1.

Run: `just soak --minutes 20 --seed 7 --rate 6` (root; the lab's charms packed: `just
lab-pack`). `--dry-run` prints the schedule only. `--small` deploys the smaller shape (two
controllers, one slurmdbd, one compute unit, the autoscaled application up to 1 unit) for a
host that cannot hold the whole cluster. `--keep` leaves the lab up (its directory is printed);
`--lab DIR` soaks again on such a kept lab without deploying (debugging only: its cluster is
not fresh). Every `PROGRESS_EVERY_S` a line says the phase, the faults done, the jobs and what
the loop waits for, so a run that stops moving shows where.

A fault has converged when, after its repair, every unit is idle and active, every controller
answers `scontrol ping`, no node of the charms is down or drained, and the services past
slurmctld answer from the login node: accounting (`sacctmgr`) and each slurmrestd unit's API
(an authenticated GET). The time from the repair to then is the fault's `convergence_s`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests" / "integration")]

import history  # noqa: E402
import jubilant  # noqa: E402
import plan  # noqa: E402
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm  # noqa: E402
from history import FaultRecord, Submission, Violation  # noqa: E402

from conftest import charm_path, lab_usable  # noqa: E402

logger = logging.getLogger("soak")

REPORT = REPO / "build" / "soak-report.json"
EVIDENCE = REPO / "build" / "soak-evidence"
"""What a failed run keeps of its lab: the unit logs and each controller's slurmctld journal."""
CONTROLLER_EVENTS = (
    "fatal|MISMATCH|started on cluster|Running as primary|taking over|BackupController|"
    "clustername|Main process|Stopped|Started|relinquish"
)
"""The lines of a controller's journal printed when a run fails: who ran, who took over, why
a slurmctld died."""
USER, UID = "soak", 2500
RUNS = "/tmp/soak-runs"
DAEMONS = {
    "slurmctld": "slurmctld",
    "slurmdbd": "slurmdbd",
    "compute": "slurmd",
    "scaled": "slurmd",
    "login": "sackd",
    "slurmrestd": "slurmrestd",
}
CONFIG_TOGGLES: dict[str, tuple[str, str, str]] = {
    "slurmctld": ("slurmctld-timeout", "4", "6"),
    "compute": ("partition-config", "", "DefaultTime=120"),
}
"""A harmless option of each application and its two values, flipped by config faults."""
AUTOSCALE_EVERY_S = 30.0
HOOK_KILL_WINDOW_S = 60.0
"""How long a `hook-kill` fault waits for a hook to run on its machine."""
LOOP_S = 5.0
CONVERGENCE_BOUND_S = 600.0
"""After a fault's repair, how long the cluster may take to be healthy again before the
fault is recorded as not converged (a violation)."""
SETTLE_S = 15 * 60.0
PROBE_TIMEOUT = 30
PROGRESS_EVERY_S = 30.0
"""How often the loop prints a progress line (phase, faults, jobs, what it waits for)."""
REST_PORT = 6820
REST_PROBE = """
import subprocess, sys, urllib.request
out = subprocess.run(["scontrol", "token", "lifespan=60"], capture_output=True, text=True,
                     timeout=20, check=True).stdout
token = out.strip().removeprefix("SLURM_JWT=")
request = urllib.request.Request(sys.argv[1], headers={"X-SLURM-USER-TOKEN": token})
urllib.request.urlopen(request, timeout=10).read()
"""
"""Run on the login node with a slurmrestd URL: a token from slurmctld (`scontrol token`, signed
with the JWT key of the moment, so a key rotation does not fail it) and one authenticated GET."""


@dataclass(frozen=True)
class Shape:
    controllers: int
    dbd_units: int
    computes: int
    scaled_max: int

    @staticmethod
    def of(small: bool) -> Shape:
        return Shape(2, 1, 1, 1) if small else Shape(3, 2, 2, 2)


class Cluster:
    """The model and the lab behind it, with the Slurm queries the soak makes."""

    def __init__(self, juju: Any, shape: Shape) -> None:
        self.juju = juju
        self.lab = juju.lab
        self.shape = shape
        self.login_machine = ""

    def machine_of(self, unit: str) -> str:
        return self.juju.state.units[unit].machine

    def units(self, app: str) -> list[str]:
        state = self.juju.state
        names = state.apps[app].units if app in state.apps else []
        return sorted(names, key=lambda name: int(name.split("/")[1]))

    def on(self, machine: str, command: str, timeout: float = PROBE_TIMEOUT) -> str | None:
        """A shell command on a lab machine, directly (not through the model); None if it
        fails, the machine is down or the command times out."""
        try:
            result = self.lab.get(machine).exec(["sh", "-c", command], timeout=timeout)
        except Exception:
            return None
        return result.stdout if result.returncode == 0 else None

    def login(self, command: str, timeout: float = PROBE_TIMEOUT) -> str | None:
        return self.on(self.login_machine, f"timeout {timeout} {command}", timeout + 5)

    def squeue(self) -> dict[str, history.JobSeen] | None:
        out = self.login("squeue --all --states=all --json")
        if out is None:
            return None
        try:
            return history.parse_squeue_json(json.loads(out), time.time())
        except (ValueError, KeyError, TypeError):
            return None

    def sacct(self, since: float) -> dict[str, str] | None:
        back = int(time.time() - since) + 60
        out = self.login(f"sacct -a -X -n -P -S now-{back} -E now -o JobIDRaw,State")
        return None if out is None else history.parse_sacct(out)

    def pings(self) -> list[dict[str, Any]] | None:
        out = self.login("scontrol ping --json")
        try:
            return None if out is None else list(json.loads(out).get("pings", []))
        except ValueError:
            return None

    def in_charge(self) -> str | None:
        """The controller unit serving: the first of `scontrol ping` that answers."""
        for ping in self.pings() or []:
            if ping.get("responding") is True and str(ping.get("pinged", "UP")) == "UP":
                return self.unit_of_host(str(ping["hostname"]))
        return None

    def unit_of_host(self, hostname: str) -> str | None:
        status = self.juju.status()
        for app in status.apps.values():
            for name, unit in app.units.items():
                if status.machines[unit.machine].hostname == hostname:
                    return name
        return None

    def bad_nodes(self) -> list[str]:
        """The charms' nodes that are down, drained or not responding (not by an operator)."""
        out = self.login("scontrol show nodes --json")
        if out is None:
            return ["(scontrol show nodes failed)"]
        bad = []
        for node in json.loads(out).get("nodes", []):
            name = str(node.get("name", ""))
            if "_future" in name:
                continue
            states = {str(s).upper() for s in node.get("state", [])}
            if states & {"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE"} or not states:
                bad.append(f"{name} {sorted(states)} {node.get('reason', '')!r}")
        return bad

    def services_down(self) -> list[str]:
        """The services a user reaches past slurmctld that do not answer from the login node:
        accounting (`sacctmgr`, through whichever slurmdbd serves) and each slurmrestd unit's API
        (an authenticated GET). A unit's status alone says the daemon runs, not that it serves."""
        down = []
        if self.login("sacctmgr -n -P list cluster format=cluster") is None:
            down.append("accounting (sacctmgr)")
        status = self.juju.status()
        rest = status.apps.get("slurmrestd")
        for name, unit in sorted(rest.units.items() if rest else []):
            url = f"http://{unit.public_address}:{REST_PORT}/openapi/v3"
            if self.login(f"python3 -c {shlex.quote(REST_PROBE)} {shlex.quote(url)}") is None:
                down.append(f"{name}'s REST API")
        return down

    def expected_nodes(self) -> set[str]:
        return {u.replace("/", "-") for app in ("compute", "scaled") for u in self.units(app)}


def app_of(unit: str) -> str:
    return unit.split("/", maxsplit=1)[0]


# --- the workload ---------------------------------------------------------------------------


def job_script(shape: plan.JobShape) -> str:
    """The job's script: it records each start (and end) on its node for `history.Run`."""
    work = f"srun sleep {shape.seconds}" if shape.steps else f"sleep {shape.seconds}"
    return (
        f"f={RUNS}/$SLURM_JOB_ID.${{SLURM_RESTART_COUNT:-0}}.$(hostname); echo $$ > $f.pid; "
        f"date +%s.%N > $f.start; {work}; date +%s.%N > $f.end; exit {shape.exit_code}"
    )


class Workload(threading.Thread):
    """Submits a job every 60 / rate seconds from the login node; records each id and time."""

    def __init__(self, cluster: Cluster, seed: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stream = plan.JobStream(
            seed, ("root", USER), ("compute", "scaled"), max_nodes=cluster.shape.computes
        )
        self.period = 60.0 / rate
        self.submissions: list[Submission] = []
        self.refused = 0
        self.stop = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.submit(self.stream.next())
            next_at += self.period
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def submit(self, shape: plan.JobShape) -> None:
        argv = " ".join(["sbatch", "--parsable", *shape.sbatch_options()])
        script = job_script(shape).replace("'", "'\\''")
        command = f"{argv} --wrap '{script}'"
        if shape.user != "root":
            command = f"runuser -u {shape.user} -- {command}"
        out = self.cluster.login(command)
        job_id = (out or "").strip().split(";")[0]
        if job_id.isdigit():
            self.submissions.append(Submission(job_id, time.time(), asdict(shape)))
        else:
            self.refused += 1


# --- the soak -------------------------------------------------------------------------------


class Soak:
    """One run: the schedule, the cluster, the history, the report."""

    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.args = args
        self.schedule = plan.draw_schedule(args.seed, args.minutes, gap_s=args.fault_gap)
        self.workload = Workload(cluster, args.seed, args.rate)
        self.faults: list[FaultRecord] = []
        self.violations: list[Violation] = []
        self.history: dict[str, history.JobSeen] = {}
        self.runs: dict[tuple[str, int, str], history.Run] = {}
        self.reported: set[str] = set()
        self.action_outputs: list[str] = []
        self.autoscaled_removed: dict[str, float] = {}
        self.autoscale_units: list[int] = []
        self.started = 0.0
        self.policy = Path(tempfile.mkdtemp(prefix="soak-autoscale-"))
        (self.policy / "policy.toml").write_text(
            f"[scaled]\nmin = 0\nmax = {cluster.shape.scaled_max}\nidle-timeout = 60\n"
            "step = 1\ncooldown = 0\ncpus = 2\nmemory = 1\n"
        )
        self.last_autoscale = 0.0
        self.held: tuple[FaultRecord, Callable[[], None], float] | None = None
        self.converging: list[FaultRecord] = []
        self.prepared: set[str] = set()
        self.phase = "faults"
        self.last_update_status = time.monotonic()
        self.last_progress = 0.0
        self.hook_errors: list[dict[str, Any]] = []
        self.debug_lines = 0

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        self.started = time.time()
        self.workload.start()
        pending = list(self.schedule)
        end = self.started + self.args.minutes * 60
        # Every scheduled fault comes, late if one before it (an action, a hold) took long.
        while time.time() < end or pending:
            self.tick()
            if self.held is None and pending and time.time() >= self.started + pending[0].at_s:
                self.inject(pending.pop(0))
            time.sleep(LOOP_S)
        self.workload.stop.set()
        self.workload.join(timeout=60)
        self.phase = "settle"
        self.settle()
        self.phase = "final checks"
        self.progress(force=True)
        return self.finish()

    def progress(self, force: bool = False) -> None:
        """Every `PROGRESS_EVERY_S` a line: phase, faults done, jobs, what the loop waits for,
        so that a run that stops moving shows where."""
        now = time.time()
        if not force and now - self.last_progress < PROGRESS_EVERY_S:
            return
        self.last_progress = now
        ended = sum(1 for s in self.history.values() if s.state not in history.LIVE)
        live = len(self.history) - ended
        held = f"{self.held[0].kind} {self.held[0].target}" if self.held else "-"
        waiting = ", ".join(f"{r.kind} {r.target}" for r in self.converging) or "-"
        line = (
            f"[{self.phase} {now - self.started:5.0f}s] faults {len(self.faults)}/"
            f"{len(self.schedule)} held {held}; jobs submitted {len(self.workload.submissions)}"
            f" refused {self.workload.refused} ended {ended} live {live}; converging {waiting}"
        )
        if self.converging or self.phase != "faults":
            line += f"; unhealthy: {self.unhealthy_reason() or 'no'}"
        print(line, flush=True)

    def tick(self) -> None:
        """One look: drive the model (hooks run only then), record jobs and runs, autoscale,
        undo a held fault whose time is up, and time the convergence of the earlier ones."""
        with contextlib.suppress(Exception):
            self.cluster.juju.status()
        self.note_hook_errors()
        self.fire_update_status()
        seen = self.cluster.squeue()
        if seen is not None:
            history.merge_seen(self.history, seen)
        if time.time() - self.last_autoscale >= AUTOSCALE_EVERY_S:
            self.autoscale()
        if self.held is not None and time.time() >= self.held[2]:
            record, undo, _ = self.held
            self.held = None
            try:
                undo()
            except Exception as e:
                record.note += f"; undo failed: {e}"
            record.repaired_at = time.time()
        ready = [r for r in self.converging if r.repaired_at is not None]
        if ready and self.healthy():
            now = time.time()
            for record in ready:
                record.convergence_s = round(now - (record.repaired_at or record.at), 1)
                self.converging.remove(record)
                print(
                    f"converged after {record.kind} {record.target}: {record.convergence_s} s",
                    flush=True,
                )
            if any(r.kind in plan.HARD and r.target.startswith("slurmctld/") for r in ready):
                self.collect_lost_jobs()
        for record in list(self.converging):
            since = record.repaired_at
            if since is not None and time.time() - since > CONVERGENCE_BOUND_S:
                self.violations.append(
                    Violation(
                        "the cluster did not converge after a fault",
                        f"{record.kind} {record.target}: {self.unhealthy_reason()}",
                        time.time(),
                    )
                )
                self.converging.remove(record)
        self.prepare_new_machines()
        self.scan_runs()
        self.progress()

    def note_hook_errors(self) -> None:
        """Record every hook failure the lab logged since the last look, with what the hook
        printed; one the soak did not cause is a violation, for the charms turn failures into
        statuses. The soak causes one only by killing a hook or cutting the power under one
        (`history.hook_failure_cause`)."""
        lines = self.cluster.juju.debug_log().splitlines()
        failures = history.hook_failures(lines[self.debug_lines :])
        self.debug_lines = len(lines)
        for failure in failures:
            caused = history.hook_failure_cause(failure.unit, self.converging, self.machine_of)
            self.hook_errors.append({**asdict(failure), "by_a_fault": caused})
            print(f"{failure.unit}: hook {failure.hook} failed (by a fault: {caused})", flush=True)
            if not caused:
                self.violations.append(
                    Violation(
                        "a hook failed (failures are statuses)",
                        f"{failure.unit}: {failure.text[:1500]}",
                        time.time(),
                    )
                )

    def machine_of(self, unit: str) -> str | None:
        try:
            return self.cluster.machine_of(unit)
        except KeyError:  # a removed unit
            return None

    def fire_update_status(self) -> None:
        """update-status on every unit each `update_status_interval` (300 s), as Juju's agents
        fire it: the lab fires it only in `wait()`, which the soak does not call, and a charm
        retries a failure (a daemon it found masked during a fault) on that next event."""
        juju = self.cluster.juju
        if time.monotonic() - self.last_update_status >= juju.update_status_interval:
            self.last_update_status = time.monotonic()
            with contextlib.suppress(Exception):
                juju.update_status()

    def healthy(self) -> bool:
        return not self.unhealthy_reason()

    def unhealthy_reason(self) -> str:
        """Why the cluster is not healthy yet ("" if it is): units, controllers, nodes and the
        services past slurmctld."""
        return self.model_unhealthy() or self.slurm_unhealthy()

    def model_unhealthy(self) -> str:
        """Why the model is not settled ("" if it is): a unit in error, busy or not active."""
        try:
            status = self.cluster.juju.status()
        except Exception as e:
            return f"no status: {e}"
        if jubilant.any_error(status):
            failed = [
                f"{name} ({unit.workload_status.message})"
                for app in status.apps.values()
                for name, unit in app.units.items()
                if unit.workload_status.current == "error"
            ]
            return f"in error: {', '.join(failed) or 'an application'}"
        busy = [
            name
            for app in status.apps.values()
            for name, unit in app.units.items()
            if unit.juju_status.current != "idle"
        ]
        if busy:
            return f"hooks running on {busy}"
        return "; ".join(
            f"{name} {unit.workload_status.current}: {unit.workload_status.message}"
            for app in status.apps.values()
            for name, unit in app.units.items()
            if unit.workload_status.current != "active"
        )

    def slurm_unhealthy(self) -> str:
        """Why Slurm does not serve yet ("" if it does): controllers, nodes, services."""
        pings = self.cluster.pings()
        if not pings or not all(p.get("responding") is True for p in pings):
            return f"controllers not all up: {pings}"
        bad = self.cluster.bad_nodes()
        if bad:
            return f"nodes {bad}"
        down = self.cluster.services_down()
        return f"not answering: {', '.join(down)}" if down else ""

    def autoscale(self) -> None:
        from slurm_autoscale import cli

        self.last_autoscale = time.time()
        before = set(self.cluster.units("scaled"))
        argv = ["--policy", str(self.policy / "policy.toml"), "--once"]
        argv += ["--state-file", str(self.policy / "state.json")]
        try:
            cli.run(argv, juju=self.cluster.juju)
        except Exception as e:
            logger.warning("autoscale pass failed: %s", e)
        after = set(self.cluster.units("scaled"))
        self.autoscale_units.append(len(after))
        if len(after) > self.cluster.shape.scaled_max:
            self.violations.append(
                Violation(
                    "the autoscaler went past max",
                    f"{len(after)} units of scaled {sorted(after)}, max "
                    f"{self.cluster.shape.scaled_max}",
                    time.time(),
                )
            )
        for unit in before - after:
            self.autoscaled_removed[unit.replace("/", "-")] = time.time()
        self.prepare_new_machines()

    def prepare_new_machines(self) -> None:
        """Prepare the machines not seen before where the workload's user must exist."""
        units = {app: self.cluster.units(app) for app in plan.USER_APPS}
        for machine in plan.user_machines(units, self.cluster.machine_of):
            if machine not in self.prepared:
                self.prepare_machine(machine)
                self.prepared.add(machine)

    def prepare_machine(self, machine: str) -> None:
        """The user `soak` and the runs' directory on a machine (idempotent)."""
        self.cluster.on(
            machine,
            f"id {USER} >/dev/null 2>&1 || useradd -u {UID} -m {USER}; "
            f"mkdir -p {RUNS} && chmod 1777 {RUNS}",
        )

    def scan_runs(self) -> None:
        """Read what the jobs wrote on the compute machines: starts, ends, and which run
        without an end still has its script alive."""
        for app in ("compute", "scaled"):
            for unit in self.cluster.units(app):
                out = self.cluster.on(
                    self.cluster.machine_of(unit),
                    f"cd {RUNS} 2>/dev/null || exit 0; for f in *.start; do "
                    '[ -e "$f" ] || continue; b=${f%.start}; '
                    'e=$(cat "$b.end" 2>/dev/null); p=$(cat "$b.pid" 2>/dev/null); '
                    'kill -0 "${p:-0}" 2>/dev/null && a=1 || a=0; '
                    'echo "$b $(cat "$f") ${e:--} $a"; done',
                )
                for line in (out or "").split("\n"):
                    self.record_run(line, time.time())

    def record_run(self, line: str, now: float) -> None:
        fields = line.split(" ")
        if len(fields) != 4:
            return
        name, start, end, alive = fields
        parts = name.split(".", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            return
        key = (parts[0], int(parts[1]), parts[2])
        run = self.runs.get(key) or history.Run(
            parts[0], int(parts[1]), parts[2], float(start), None
        )
        if end != "-":
            run.end = float(end)
        elif alive == "1":
            run.last_alive = now
        self.runs[key] = run

    # --- faults ----------------------------------------------------------------------------

    def resolve(self, fault: plan.Fault) -> str | None:
        """The unit a scheduled fault hits now."""
        if fault.pick < 0:
            return self.cluster.in_charge() or (self.cluster.units("slurmctld") or [None])[0]
        units = self.cluster.units(fault.app)
        if not units and fault.app == "scaled":
            units = self.cluster.units("compute")
        return units[fault.pick % len(units)] if units else None

    def inject(self, fault: plan.Fault) -> None:
        unit = self.resolve(fault)
        now = time.time()
        print(f"fault {fault.describe()} on {unit}", flush=True)
        if unit is None:
            self.faults.append(FaultRecord(fault.kind, fault.app, now, now, note="no unit"))
            return
        record = FaultRecord(fault.kind, unit, now)
        record.late_s = round(now - self.started - fault.at_s, 1)
        in_charge = self.cluster.in_charge() if unit.startswith("slurmctld/") else None
        record.controller_in_charge = in_charge == unit and fault.kind in plan.HARD
        app = app_of(unit)
        if app in ("compute", "scaled") and fault.kind in (*plan.HARD, "remove-unit"):
            record.nodes = [unit.replace("/", "-")]
        self.faults.append(record)
        try:
            undo = self.act(fault, unit, record)
        except Exception as e:
            record.note = f"failed: {e}"[:500]
            undo = None
        if undo is not None:
            self.held = (record, undo, time.time() + max(fault.hold_s, 15.0))
        else:
            record.repaired_at = time.time()
        self.converging.append(record)
        print(
            f"  done in {time.time() - now:.0f} s{'; held' if undo else ''}: {record.note}",
            flush=True,
        )

    def act(self, fault: plan.Fault, unit: str, record: FaultRecord) -> Callable[[], None] | None:
        """Do the fault; return how to undo it after its hold (None: nothing to undo)."""
        if fault.kind in plan.HARD:
            return self.hard(fault.kind, unit)
        actions: dict[str, Callable[[str, FaultRecord], Callable[[], None] | None]] = {
            "remove-unit": self.replace_unit,
            "add-unit-during-hook": self.add_unit_during_hook,
            "hook-kill": self.kill_a_hook,
            "rebuild-nodes": lambda _, r: self.act_on_leader(
                "rebuild-nodes", {"partition": "compute"}, r
            ),
            "rotate-auth-key": lambda _, r: self.act_on_leader("rotate-auth-key", {}, r),
            "rotate-jwt-key": lambda _, r: self.act_on_leader("rotate-jwt-key", {}, r),
            "config-slurmctld": lambda _, r: self.toggle("slurmctld", r),
            "config-slurmd": lambda _, r: self.toggle("compute", r),
            "leader-change": self.change_leader,
        }
        return actions[fault.kind](unit, record)

    def hard(self, kind: str, unit: str) -> Callable[[], None]:
        lab, machine = self.cluster.lab, self.cluster.machine_of(unit)
        service = DAEMONS[app_of(unit)]
        lab.fault(kind, machine, service=service)
        return lambda: lab.repair(kind, machine, service=service)

    def replace_unit(self, unit: str, record: FaultRecord) -> None:
        app = app_of(unit)
        if len(self.cluster.units(app)) < 2:
            record.note = "skipped: the last unit"
            return
        self.cluster.juju.remove_unit(unit)
        self.cluster.juju.add_unit(app)
        record.note = "replaced by a new unit"

    def add_unit_during_hook(self, unit: str, record: FaultRecord) -> Callable[[], None]:
        app = app_of(unit)
        self.toggle(app, record)
        self.cluster.juju.add_unit(app)
        added = self.cluster.units(app)[-1]
        record.note += f"; added {added} during config-changed"
        return lambda: self.cluster.juju.remove_unit(added)

    def change_leader(self, unit: str, record: FaultRecord) -> None:
        record.note = f"new leader {self.cluster.juju.change_leader(app_of(unit))}"

    def toggle(self, app: str, record: FaultRecord) -> None:
        """Flip the application's harmless option (`CONFIG_TOGGLES`): its hooks run."""
        target = app if app in CONFIG_TOGGLES else "slurmctld"
        option, one, other = CONFIG_TOGGLES[target]
        current = str(self.cluster.juju.config(target).get(option, one))
        value = other if current == one else one
        self.cluster.juju.config(target, {option: value})
        record.note = f"{target} {option}={value!r}"

    def kill_a_hook(self, unit: str, record: FaultRecord) -> None:
        """SIGKILL the charm's process on the unit's machine while one of its hooks runs.

        A watcher looks for one (up to `HOOK_KILL_WINDOW_S`) from before the config change
        that makes the hooks run: the lab's `config` returns only once they have, so a look
        after it found none (seed 74, stop 50: "no hook ran there in 60 s").
        """
        machine = self.cluster.machine_of(unit)
        killed: list[str] = []
        done = threading.Event()

        def watch() -> None:
            deadline = time.time() + HOOK_KILL_WINDOW_S
            while not done.is_set() and time.time() < deadline:
                out = self.cluster.on(machine, "pkill -KILL -f -e 'src/charm[.]py'", timeout=10)
                if out and "killed" in out:
                    killed.append(out.strip())
                    return
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, name="hook-kill", daemon=True)
        watcher.start()
        try:
            self.toggle(app_of(unit), record)
            while watcher.is_alive():  # the model runs hooks only while it is driven
                with contextlib.suppress(Exception):
                    self.cluster.juju.status()
                watcher.join(timeout=0.5)
        finally:
            done.set()
            watcher.join(timeout=15)
        record.note += f"; killed {killed[0]}" if killed else "; no hook ran there"

    def act_on_leader(self, action: str, params: dict[str, Any], record: FaultRecord) -> None:
        try:
            task = self.cluster.juju.run("slurmctld/leader", action, params, wait=600)
            text = json.dumps(task.results)
        except jubilant.TaskError as e:
            text = json.dumps(e.task.results) + (e.task.message or "")
        self.action_outputs.append(text)
        record.note = text[:300]

    def collect_lost_jobs(self) -> None:
        """Run `lost-jobs` on every controller unit; keep the ids they report."""
        for unit in self.cluster.units("slurmctld"):
            try:
                results = self.cluster.juju.run(unit, "lost-jobs", wait=120).results
            except Exception:
                continue
            self.action_outputs.append(json.dumps(results))
            for key, value in results.items():
                if key.startswith("job-") and isinstance(value, dict):
                    self.reported.add(str(value.get("id")))

    # --- the end ---------------------------------------------------------------------------

    def settle(self) -> None:
        """Undo a held fault, then wait for health and for every job to end (`SETTLE_S`)."""
        if self.held is not None:
            self.held = (self.held[0], self.held[1], 0.0)
        settle_start = time.time()
        while time.time() - settle_start < SETTLE_S:
            self.tick()
            seen = self.cluster.squeue() or {}
            live = [j for j, s in seen.items() if s.state in history.LIVE]
            if self.held is None and not self.converging and not live and self.healthy():
                break
            time.sleep(LOOP_S)
        self.settled_s = round(time.time() - settle_start, 1)

    def finish(self) -> int:
        now = time.time()
        self.collect_lost_jobs()
        final = self.cluster.squeue()
        sacct = None
        for _ in range(10):
            sacct = self.cluster.sacct(self.started)
            if sacct is not None:
                break
            time.sleep(10)
        if final is None:
            self.violations.append(Violation("no final job list", "squeue failed", now))
            final = {}
        if sacct is None:
            self.violations.append(Violation("no accounting at the end", "sacct failed", now))
        self.scan_runs()
        ends = history.Ends(
            final, self.history, sacct or {}, self.reported, self.faults, now, self.runs.values()
        )
        tally, found = history.classify(self.workload.submissions, ends)
        self.violations += found
        self.violations += history.sacct_disagreements(final, sacct or {}, now)
        self.violations += history.overlapping_runs(self.runs.values())
        self.violations += history.autoscaler_removed_busy(
            self.workload.submissions, self.history, final, self.autoscaled_removed
        )
        self.violations += self.leaks(now)
        reason = self.unhealthy_reason()
        if reason:
            self.violations.append(Violation("not healthy at the end", reason, now))
        self.write_report(tally)
        failed = bool(self.violations or tally.lost_unreported)
        if failed:
            self.keep_evidence()
        return 1 if failed else 0

    def keep_evidence(self) -> None:
        """Keep what explains a failed run before its lab goes (`EVIDENCE`), and print each
        controller's turns and deaths (`CONTROLLER_EVENTS`): a CI run shows only its output."""
        shutil.rmtree(EVIDENCE, ignore_errors=True)
        logs = self.cluster.lab.state_dir / "juju" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, EVIDENCE / "juju-logs")
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        for unit in self.cluster.units("slurmctld"):
            machine = self.cluster.machine_of(unit)
            journal = self.cluster.on(
                machine, "journalctl -u slurmctld -o short-precise --no-pager", timeout=60
            )
            state = self.cluster.on(machine, "cat /var/lib/slurm/checkpoint/slurmctld/clustername")
            name = unit.replace("/", "-")
            (EVIDENCE / f"{name}-slurmctld.journal").write_text(journal or "(unreadable)\n")
            events = [
                line for line in (journal or "").splitlines() if re.search(CONTROLLER_EVENTS, line)
            ]
            print(f"{unit} ({machine}), clustername {state!r}; slurmctld's turns:", flush=True)
            print("\n".join(f"  {line}" for line in events[-40:]), flush=True)
        print(f"evidence: {EVIDENCE}", flush=True)

    def leaks(self, now: float) -> list[Violation]:
        """Every secret's content, looked for in the logs, databags, statuses and action
        outputs."""
        juju = self.cluster.juju
        secrets = [
            value
            for secret in juju.state.secrets.values()
            for revision in secret.revisions
            for value in history.secret_values(revision.content)
        ]
        bags = {
            f"relation {rel.id}": json.dumps([rel.app_data, rel.unit_data])
            for rel in juju.state.relations.values()
        }
        texts = {
            "debug-log": juju.debug_log(),
            "status": json.dumps(juju.status_dict()),
            "action outputs": "\n".join(self.action_outputs),
            **bags,
        }
        return history.secret_leaks(texts, secrets, now)

    def write_report(self, tally: history.Tally) -> None:
        by_kind: dict[str, list[float | None]] = {}
        for record in self.faults:
            by_kind.setdefault(record.kind, []).append(record.convergence_s)
        report = {
            "seed": self.args.seed,
            "minutes": self.args.minutes,
            "rate": self.args.rate,
            "shape": asdict(self.cluster.shape),
            "schedule": [f.as_dict() for f in self.schedule],
            "faults": [
                {
                    "kind": r.kind,
                    "target": r.target,
                    "time": round(r.at - self.started, 1),
                    "repaired_after_s": None
                    if r.repaired_at is None
                    else round(r.repaired_at - r.at, 1),
                    "controller_in_charge": r.controller_in_charge,
                    "late_s": r.late_s,
                    "note": r.note,
                }
                for r in self.faults
            ],
            "jobs": {**asdict(tally), "refused_at_submission": self.workload.refused},
            "violations": [
                {
                    "invariant": v.invariant,
                    "evidence": v.evidence,
                    "time": round(v.at - self.started, 1),
                }
                for v in self.violations
            ],
            "convergence_s": [r.convergence_s for r in self.faults],
            "settle_s": getattr(self, "settled_s", None),
            "autoscaler_units_per_pass": self.autoscale_units,
            "hook_errors": self.hook_errors,
        }
        REPORT.parent.mkdir(exist_ok=True)
        REPORT.write_text(json.dumps(report, indent=1) + "\n")
        print(summary(report, by_kind), flush=True)


def summary(report: dict[str, Any], by_kind: dict[str, list[float | None]]) -> str:
    """The human summary of a report."""
    jobs = report["jobs"]
    lines = [
        f"soak seed {report['seed']}: {report['minutes']} min, {report['rate']} jobs/min, "
        f"shape {report['shape']}",
        "jobs: " + ", ".join(f"{k} {v}" for k, v in jobs.items()),
        "faults (kind: count, convergence s):",
    ]
    for kind, values in sorted(by_kind.items()):
        shown = [v if v is not None else "-" for v in values]
        lines.append(f"  {kind:22} {len(values):3}  {shown}")
    lines.append(f"settle: {report['settle_s']} s")
    lines.append(f"violations: {len(report['violations'])}")
    lines += [
        f"  {v['time']:7.1f}s {v['invariant']}: {v['evidence']}" for v in report["violations"]
    ]
    lines.append(f"report: {REPORT}")
    return "\n".join(lines)


# --- the cluster ----------------------------------------------------------------------------


def reporting(ready: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """`ready` for `juju.wait`, printing the units not active yet every `PROGRESS_EVERY_S`."""
    last = [time.time()]

    def check(status: Any) -> bool:
        done = ready(status)
        if not done and time.time() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.time()
            waiting = [
                f"{name} {unit.juju_status.current}/{unit.workload_status.current}: "
                f"{unit.workload_status.message}"
                for app in status.apps.values()
                for name, unit in app.units.items()
                if unit.workload_status.current != "active" or unit.juju_status.current != "idle"
            ]
            print(f"[wait] {'; '.join(waiting) or 'units active, not ready yet'}", flush=True)
        return done

    return check


def deploy(juju: Any, shape: Shape) -> Cluster:
    """The cluster of issue 37 (or the smaller shape), settled, with the user on its nodes."""
    deploy_slurm(
        juju,
        charm_path,
        controllers=shape.controllers,
        network_state=True,
        computes=(("compute", shape.computes), ("scaled", 0)),
    )
    juju.config(
        "slurmctld",
        {
            "future-nodes": f"scaled={shape.scaled_max} cpus=2 realmemory=1",
            "slurm-conf-parameters": "MinJobAge=3600",
        },
    )
    deploy_accounting(juju, charm_path, units=shape.dbd_units)
    deploy_rest_api(juju, charm_path)
    print("deployed; waiting for every unit to be active", flush=True)
    juju.wait(reporting(history.deployed_and_active), error=jubilant.any_error, timeout=40 * 60)
    cluster = Cluster(juju, shape)
    cluster.login_machine = cluster.machine_of("login/0")
    return cluster


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="just soak", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20, help="of faults and workload")
    parser.add_argument("--seed", type=int, default=1, help="draws the fault schedule")
    parser.add_argument("--rate", type=float, default=6, help="jobs a minute")
    parser.add_argument("--fault-gap", type=float, default=60, help="mean seconds between faults")
    parser.add_argument("--small", action="store_true", help="the smaller cluster")
    parser.add_argument("--dry-run", action="store_true", help="print the schedule, no lab")
    parser.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    parser.add_argument(
        "--lab", help="a kept soak lab's directory: soak on its cluster again, no deploy (debug)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    schedule = plan.draw_schedule(args.seed, args.minutes, gap_s=args.fault_gap)
    print(f"seed {args.seed}: {len(schedule)} faults")
    print("\n".join(f.describe() for f in schedule), flush=True)
    if args.dry_run:
        return 0
    if not lab_usable():
        print("the soak needs the lab: root, debootstrap and systemd-nspawn", file=sys.stderr)
        return 2
    from slurm_lab.juju import LabJuju
    from slurm_lab.machines import Lab

    lab = Lab(Path(args.lab) if args.lab else Path(tempfile.mkdtemp(prefix="soak-lab-")))
    print(f"lab: {lab.state_dir} (`uv run slurm-lab --state-dir {lab.state_dir} ...`)")
    juju = LabJuju(lab, wait_timeout=40 * 60)
    try:
        began = time.time()
        if args.lab:
            cluster = Cluster(juju, Shape.of(args.small))
            cluster.login_machine = cluster.machine_of("login/0")
        else:
            cluster = deploy(juju, Shape.of(args.small))
        print(f"deployed in {time.time() - began:.0f} s", flush=True)
        soak = Soak(cluster, args)
        soak.prepare_new_machines()
        return soak.run()
    finally:
        if not args.keep:
            lab.down()


if __name__ == "__main__":
    sys.exit(main())
