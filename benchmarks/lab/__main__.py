"""`python -m benchmarks.lab [--quick] [options]`: run the lab benchmarks, print, write JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
from slurm_lab.juju import LabJuju
from slurm_lab.machines import Lab

from . import autoscale as autoscale_figure
from . import exporter as exporter_figure
from . import failover as failover_figure
from . import figures as fig
from . import rebuild as rebuild_figure
from . import vm as vm_figure
from .cluster import (
    COMPUTE,
    CONTROLLER,
    REPO,
    SETTLE,
    Bench,
    BootLog,
    deploy,
    host_memory_available_mib,
    machine_footprint,
    other_lab_machines,
)
from .report import NOT_MEASURED, hook_table, table
from .watch import ControllerWatch

QUICK = {
    "nodes": 3,
    "jobs": 100,
    "partitions": 2,
    "scale_limit": 6,
    "scale_minutes": 4.0,
    "job_seconds": 20,
    "bare_runs": 1,
    "compare_jobs": 50,
    "failover_runs": 1,
    "failover_timeouts": ((6, 3),),
    "failover_calm": 10.0,
    "failover_burst": 20,
    "tool_rounds": 1,
    "exporter_nodes": 8,
    "exporter_jobs": 200,
    "exporter_runs": 2,
}
FULL = {
    "nodes": 8,
    "jobs": 1000,
    "partitions": 4,
    "scale_limit": 24,
    "scale_minutes": 10.0,
    "job_seconds": 30,
    "bare_runs": 2,
    "compare_jobs": 300,
    "failover_runs": 2,
    "failover_timeouts": failover_figure.TIMEOUTS,
    "failover_calm": 120.0,
    "failover_burst": failover_figure.BURST_JOBS,
    "tool_rounds": 2,
    "exporter_nodes": 64,
    "exporter_jobs": 10000,
    "exporter_runs": 5,
}
STEPS = (
    "config_changed_1",
    "hook_tools",
    "enlistment",
    "static_method",
    "throughput",
    "rebuild",
    "scale_in_idle",
    "scale_in_busy",
    "partitions_deploy_s",
    "config_changed_many",
    "scale",
    "throughput_pairs",
    "failover",
    "autoscale_from_zero",
    "exporter",
    "autoscale_pass",
    "vm",
)
"""The run's steps in order (`Run.go`), the names `--only` and `--skip` take."""
OPT_IN = frozenset({"vm"})
"""Steps that run only when asked for (`--vm`, or named in `--only`)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Options; `--quick` changes the defaults of the others to a smoke run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lab", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}")
    parser.add_argument("--nodes", type=int, help="scale compute 1 to N (figures 1-3), >= 3")
    parser.add_argument("--jobs", type=int, help="sbatch /bin/true jobs for figure 5")
    parser.add_argument(
        "--partitions", type=int, help="partitions for slurmctld's config-changed (issue: 20)"
    )
    parser.add_argument("--scale-limit", type=int, help="figure 7 stops at this many nodes")
    parser.add_argument("--scale-minutes", type=float, help="figure 7 stops after this long")
    parser.add_argument("--job-seconds", type=int, help="job length on the leaving node (3b)")
    parser.add_argument(
        "--compare-jobs", type=int, help="jobs per run of figure 5's comparator pairs"
    )
    parser.add_argument("--bare-runs", type=int, help="bare slurmd floor runs (figure 1)")
    parser.add_argument(
        "--failover-runs",
        type=int,
        help="failovers per fault kind and timeout (figure 4); 0 skips it",
    )
    parser.add_argument(
        "--failover-timeouts",
        type=lambda text: tuple(failover_figure.parse_timers(t) for t in text.split(",")),
        help="the SlurmctldTimeout values figure 4 sweeps (a,b,...; a:m sets MessageTimeout m,"
        " else half)",
    )
    parser.add_argument(
        "--failover-calm",
        type=float,
        help="seconds with no fault before each timeout's faults (spurious takeovers)",
    )
    parser.add_argument(
        "--failover-burst", type=int, help="sbatch submissions in each calm window (figure 4)"
    )
    parser.add_argument(
        "--tool-rounds",
        type=int,
        help="units added per hook-tool runtime, before/after (figure 6c)",
    )
    parser.add_argument("--exporter-nodes", type=int, help="nodes for the exporter figure (8)")
    parser.add_argument("--exporter-jobs", type=int, help="pending jobs for the exporter figure")
    parser.add_argument("--exporter-runs", type=int, help="passes of each exporter measured")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench-lab.json")
    parser.add_argument(
        "--no-network-state",
        dest="network_state",
        action="store_false",
        help="skip StateSaveLocation on the shared filesystem (5a)",
    )
    parser.add_argument(
        "--no-accounting", dest="accounting", action="store_false", help="skip slurmdbd (5b)"
    )
    parser.add_argument(
        "--vm",
        action="store_true",
        help="also figure 11: a slurmd unit on a VM (boot, memory, idle CPU, enlistment)"
        " beside a bare slurmd -Z on a VM (each VM takes a host core)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the lab up (prints its dir)")
    parser.add_argument(
        "--report",
        type=Path,
        help="print the tables of a JSON written before (--out) and run nothing",
    )
    parser.add_argument(
        "--only", type=lambda text: sorted(text.split(",")), help="run only these steps (a,b,...)"
    )
    parser.add_argument(
        "--skip",
        type=lambda text: sorted(text.split(",")),
        default=[],
        help="run every step but these (a,b,...)",
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if unknown := sorted(set(args.only or []).union(args.skip).difference(STEPS)):
        parser.error(f"no step {', '.join(unknown)} (steps: {', '.join(STEPS)})")
    if args.nodes < 3:
        parser.error("--nodes must be at least 3 (an idle and a busy node leave in figure 3)")
    return args


def _why(bench: Bench, error: Exception) -> str:
    """Why a set-up failed: the units in error or blocked, with their messages."""
    try:
        status = bench.juju.status()
    except Exception:  # the reason matters more than the status
        return str(error).splitlines()[0]
    stuck = [
        f"{name}: {unit.workload_status.current} ({unit.workload_status.message})"
        for app in status.apps.values()
        for name, unit in app.units.items()
        if unit.workload_status.current in ("error", "blocked")
    ]
    return "; ".join(stuck) or str(error).splitlines()[0]


def host_facts(lab: Lab) -> dict[str, Any]:
    """The machine the run is on, and whether it was shared with other labs."""
    return {
        "cpus": os.cpu_count(),
        "mem_total_mib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "other_lab_machines": other_lab_machines(lab),
    }


class Run:
    """One benchmark run: the steps in order, results gathered in `figures`."""

    def __init__(self, args: argparse.Namespace, bench: Bench) -> None:
        self.args = args
        self.bench = bench
        self.figures: dict[str, Any] = {}
        self.watch: ControllerWatch | None = None
        self.errors: list[str] = []
        self.peak_other_machines = 0

    def log(self, message: str) -> None:
        """Progress on stderr; notes how many other labs' machines share the host."""
        self.peak_other_machines = max(
            self.peak_other_machines, other_lab_machines(self.bench.lab)
        )
        print(f"[bench-lab {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def go(self) -> None:
        """Every figure, in an order that reuses the cluster: scale up, out, in, then wide.

        A failed step is recorded (`errors`) and the run goes on with the next one; a
        slurmctld found dead before a step (the host is shared) is noted and started again.
        """
        bench, args = self.bench, self.args
        self.log("deploying slurmctld, compute (1 unit), login")
        self.figures["deploy_s"] = round(deploy(bench), 1)
        self.watch = watch = ControllerWatch(bench.machine(CONTROLLER))
        watch.start()
        watch.until(ControllerWatch.idle("compute-0"), timeout=600, what="compute-0 idle")
        last = args.nodes - 1
        steps: list[tuple[str, Callable[[], object]]] = [
            ("config_changed_1", lambda: fig.config_changed(bench, 1000)),
            ("hook_tools", lambda: fig.hook_tools(bench, watch, args.tool_rounds)),
            ("enlistment", self.enlistment),
            ("static_method", lambda: fig.static_method(bench, watch, args.nodes)),
            ("throughput", lambda: fig.throughput(bench, args.jobs)),
            ("rebuild", lambda: rebuild_figure.rebuild(bench)),
            ("scale_in_idle", lambda: fig.scale_in(bench, watch, f"{COMPUTE}/{last}", 0)),
            (
                "scale_in_busy",
                lambda: fig.scale_in(bench, watch, f"{COMPUTE}/{last - 1}", args.job_seconds),
            ),
            ("partitions_deploy_s", lambda: fig.add_partitions(bench, args.partitions - 1)),
            ("config_changed_many", lambda: fig.config_changed(bench, 1024)),
            ("scale", self.scale),
            ("throughput_pairs", self.throughput_pairs),
            ("failover", self.failover),
            (
                "autoscale_from_zero",
                lambda: autoscale_figure.from_zero_figure(bench, args.exporter_jobs),
            ),
            (
                "exporter",
                lambda: exporter_figure.exporter_vs_naive(
                    bench, args.exporter_nodes, args.exporter_jobs, args.exporter_runs
                ),
            ),
            (
                "autoscale_pass",
                lambda: autoscale_figure.pass_cost_figure(
                    bench, args.exporter_nodes, args.exporter_jobs, args.exporter_runs
                ),
            ),
            ("vm", lambda: vm_figure.vm_figure(bench, watch)),
        ]
        assert tuple(name for name, _ in steps) == STEPS
        for name, step in steps:
            if (args.only and name not in args.only) or name in args.skip:
                continue
            if name in OPT_IN and not (args.vm or (args.only and name in args.only)):
                continue
            self.check_controller(name)
            self.log(name)
            try:
                result = step()
            except Exception as e:  # the other figures still count
                self.log(f"{name} FAILED: {traceback.format_exc()}")
                self.errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            if result is not None:
                self.figures[name] = result

    def check_controller(self, before: str) -> None:
        """Note (and undo) a slurmctld that died from outside the benchmark."""
        machine = self.bench.machine(CONTROLLER)
        if machine.exec(["systemctl", "is-active", "--quiet", "slurmctld"]).returncode == 0:
            return
        last = machine.exec(["journalctl", "-u", "slurmctld", "-n", "3", "--no-pager"]).stdout
        self.errors.append(f"slurmctld was down before {before}: {' / '.join(last.splitlines())}")
        machine.exec(["systemctl", "reset-failed", "slurmctld"])
        machine.exec(["systemctl", "start", "slurmctld"])

    def throughput_pairs(self) -> None:
        """Figure 5's comparators, last (they change the controller): each run beside the one
        before it on the same cluster; local state first, then shared state, then accounting.
        """
        bench, jobs = self.bench, self.args.compare_jobs
        self.log(f"throughput pairs: {jobs} jobs, local state")
        self.figures["throughput_local"] = fig.throughput(bench, jobs)
        if not self.args.network_state:
            self.figures["state_save"] = "not measured (--no-network-state)"
        else:
            self.log("use-network-state on (filesystem-client stand-in)")
            try:
                self.figures["state_save_setup"] = fig.use_network_state(bench)
                self.log(f"throughput: {jobs} jobs, shared state")
                self.figures["throughput_shared"] = fig.throughput(bench, jobs)
                self.figures["throughput_shared"]["baseline"] = "throughput_local"
            except (TimeoutError, jubilant.WaitError, RuntimeError) as e:
                self.figures["state_save"] = f"{NOT_MEASURED}: {_why(bench, e)}"
        if not self.args.accounting:
            self.figures["accounting"] = "not measured (--no-accounting)"
            return
        if not bench.active():
            self.figures["accounting"] = "not measured: the controller is not active"
            return
        self.log("accounting: slurmdbd and the MySQL stand-in")
        try:
            self.figures["accounting_setup"] = fig.add_accounting(bench)
        except (TimeoutError, jubilant.WaitError, RuntimeError) as e:
            self.figures["accounting"] = f"{NOT_MEASURED}: {_why(bench, e)}"
            return
        self.log(f"throughput: {jobs} jobs, with accounting")
        with_accounting = fig.throughput(bench, jobs)
        with_accounting["accounted_jobs"] = fig.accounted_jobs(bench)
        with_accounting["baseline"] = (
            "throughput_shared" if "throughput_shared" in self.figures else "throughput_local"
        )
        self.figures["throughput_accounting"] = with_accounting

    def failover(self) -> dict[str, Any] | None:
        """Figure 4, last: two backups join the controller on the share, then the faults.

        Network state is turned on first when figure 5's comparators did not (`--only`).
        """
        if not self.args.failover_runs:
            self.figures["failover_skipped"] = "not measured (--failover-runs 0)"
            return None
        if "state_save_setup" not in self.figures:
            self.log("use-network-state on (filesystem-client stand-in)")
            self.figures["state_save_setup"] = fig.use_network_state(self.bench)
        if self.watch is not None:
            self.watch.stop()  # Its controller is about to fail on purpose (stop is idempotent).
        self.log("failover: adding two backup controllers")
        self.figures["failover_setup"] = failover_figure.add_backups(self.bench)
        args = self.args
        self.log(
            f"failover: SlurmctldTimeout {args.failover_timeouts}, "
            f"{args.failover_runs} run(s) per fault kind"
        )
        return failover_figure.failover(
            self.bench,
            args.failover_runs,
            args.failover_timeouts,
            args.failover_calm,
            burst_jobs=args.failover_burst,
            log=self.log,
        )

    def enlistment(self) -> None:
        """Figures 1 and 2: one unit at a time from 1 to N, bare floors interleaved."""
        bench, args, watch = self.bench, self.args, self.watch
        assert watch is not None
        bare_at = {round(i * (args.nodes - 1) / args.bare_runs) for i in range(args.bare_runs)}
        self.figures["bare"], self.figures["enlistment"] = [], []
        writes, reconfigures = watch.snapshot()
        for step in range(args.nodes - 1):
            if step in bare_at:
                self.log(f"bare slurmd floor {len(self.figures['bare'])}")
                writes, reconfigures = self._bare(writes, reconfigures)
            self.log(f"add_unit {COMPUTE} ({step + 2} of {args.nodes})")
            self.figures["enlistment"].append(fig.charm_enlistment(bench, watch))
        after_writes, after_reconfigures = watch.snapshot()
        self.figures["controller_work"] = {
            "added_nodes": args.nodes - 1,
            "conf_writes": after_writes - writes,
            "reconfigures": after_reconfigures - reconfigures,
        }

    def _bare(self, writes: int, reconfigures: int) -> tuple[int, int]:
        """A bare floor run; the counters moved by hand are taken out of the charms' count."""
        watch = self.watch
        assert watch is not None
        before = watch.snapshot()
        bare = fig.bare_enlistment(self.bench, watch, len(self.figures["bare"]))
        bare["departure_s"] = fig.departure_floor(self.bench, watch, bare)
        self.figures["bare"].append(bare)
        after = watch.snapshot()
        return writes + after[0] - before[0], reconfigures + after[1] - before[1]

    def scale(self) -> None:
        """Figure 7: add slurmd units 4 at a time until the node or time limit."""
        bench, args, watch = self.bench, self.args, self.watch
        assert watch is not None
        scale: dict[str, Any] = {"steps": [], "limit_nodes": args.scale_limit}
        self.figures["scale"] = scale
        idle = [b.get("idle_machine") for b in self.figures.get("bare", [])]
        scale["idle_machine"] = idle[0] if idle and idle[0] else {}
        scale["start_mem_available_mib"] = host_memory_available_mib()
        start_nodes = len(watch.states)
        started = time.monotonic()
        scale["stopped_by"] = "node limit"
        while len(watch.states) < args.scale_limit:
            if time.monotonic() - started > args.scale_minutes * 60:
                scale["stopped_by"] = f"time limit ({args.scale_minutes:g} min)"
                break
            count = min(4, args.scale_limit - len(watch.states))
            self.log(f"scale: {len(watch.states)} nodes, adding {count}")
            scale["steps"].append(fig.scale_step(bench, watch, count))
        scale["minutes"] = round((time.monotonic() - started) / 60, 1)
        steps = scale["steps"]
        if steps:
            added = steps[-1]["nodes"] - start_nodes
            used = scale["start_mem_available_mib"] - steps[-1]["host_mem_available_mib"]
            per_node = used / added if added else 0
            scale["host_mib_per_node"] = round(per_node, 1)
        unit_machine = machine_footprint(bench.machine(f"{COMPUTE}/0"))
        scale["compute_unit_machine"] = unit_machine
        if steps:
            per_node = max(scale.get("host_mib_per_node", 0), unit_machine["rss_mib"])
            scale["fits_in_host_memory"] = int(
                steps[-1]["nodes"] + steps[-1]["host_mem_available_mib"] / per_node
            )


def print_tables(figures: dict[str, Any]) -> None:
    """The main table and the hook table, on stdout."""
    print(table(figures))
    print()
    print(hook_table(figures))


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write the JSON; exit 1 if a step failed (partial JSON kept)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report:
        print_tables(json.loads(args.report.read_text())["figures"])
        return 0
    # A plain `kill` still takes the lab down (the `finally` below), as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    state_dir = Path(tempfile.mkdtemp(prefix="bench-lab-"))
    lab = Lab(state_dir)
    boots = BootLog()
    boots.install()
    bench = Bench(lab, LabJuju(lab, wait_timeout=SETTLE), boots)
    run = Run(args, bench)
    started = time.monotonic()
    document: dict[str, Any] = {
        "command": "python -m benchmarks.lab " + " ".join(sys.argv[1:] if argv is None else argv),
        "options": {k: v for k, v in vars(args).items() if k not in ("out", "keep")},
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host_at_start": host_facts(lab),
        "figures": run.figures,
    }
    failed = None
    try:
        run.go()
    except (Exception, KeyboardInterrupt):  # report what was measured, then fail
        failed = traceback.format_exc()
        run.log(f"FAILED:\n{failed}")
        if bench.juju.state.units:
            print(bench.juju.dump_logs(journal_lines=50)[-20000:], file=sys.stderr)
    finally:
        if run.watch is not None:
            run.watch.stop()
        try:
            run.figures["hooks"] = fig.hook_costs(bench.hook_runs())
        except OSError as e:
            run.log(f"hook logs unreadable: {e}")
        document["host_at_end"] = host_facts(lab)
        document["run_minutes"] = round((time.monotonic() - started) / 60, 1)
        if not args.keep:
            lab.down()
            shutil.rmtree(state_dir, ignore_errors=True)
    shared = max(
        document["host_at_start"]["other_lab_machines"],
        document["host_at_end"]["other_lab_machines"],
        run.peak_other_machines,
    )
    document["peak_other_lab_machines"] = shared
    document["shared_host"] = shared > 0
    document["failed"] = failed
    document["errors"] = run.errors
    if run.watch is not None:
        document["watch_poll_s"] = fig.summary(run.watch.counters.poll_seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print_tables(run.figures)
    print()
    host = document["host_at_start"]
    print(
        f"{document['command']}: {document['run_minutes']} min on {host['cpus']} CPUs, "
        f"{host['mem_total_mib']} MiB, kernel {host['kernel']}"
        + (f"; host SHARED with {shared} other lab machines" if shared else "")
        + f". JSON: {args.out}"
        + (f"; lab kept at {state_dir}" if args.keep else "")
    )
    for error in run.errors:
        print(f"ERROR {error}")
    return 1 if failed or run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
