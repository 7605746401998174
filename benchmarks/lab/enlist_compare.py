"""`python -m benchmarks.lab.enlist_compare --before <slurmd charm dir>`: enlistment, A/B.

Issue 19's target (enlistment within 2x a bare `slurmd -Z`) compared across two slurmd charms
in one lab: `compute` is this tree's charm (after), `before` another checkout's (for example
`git worktree add /tmp/before main`, then `--before /tmp/before/charms/slurmd`; it is packed
with that checkout's charmcraft-common.yaml). Both join the same slurmctld. Each round runs
one bare `slurmd -Z` floor (figure 1's) and one `add_unit` on each application, in turns
(before first in even rounds), so load and cluster growth weigh on both. Each enlistment
keeps the new unit's hooks (start and end, seconds after `add_unit`), its machine's boot
and slurmd's start, for the per-hook timeline. Medians, ratios and the JSON on stdout and
in `--out`.

Idle as the watcher sees it is late by up to its poll period (0.4 s plus the poll, 0.1-0.2 s),
on both sides. Each controller's slurmctld therefore logs at debug2, and each enlistment and
floor also gets `registered_s`: up to the millisecond line of slurmctld's log where the node's
registration completed (`_slurm_rpc_node_registration complete for <node>`, the moment a new
dynamic node with no jobs turns idle), with its own medians and ratio (`registered`).

With `--before-controller <slurmctld charm dir>` the before slurmd joins its own controller,
`slurmctld-before` (that checkout's slurmctld), so both charms are compared, each cluster
whole. Each round then also fires update-status on its new units and on both controllers,
one at a time, and `hook_costs` gives the median wall time of each hook of each charm
(install, relation-created and -changed, update-status; the controllers' slurmd-relation
hooks) for before and after.

With `--ops-floor` each round also enlists a unit of `benchmarks/charms/opsfloor`, an ops
charm that does nothing but start `slurmd -Z` (the bare floor's options and key) in its
relation-created, the hook in which slurmd's charm starts it: the least any ops charm
takes on Juju's hook order, beside `before` and `after` in the rotation (`ops_floor`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_lab.juju import LabJuju
from slurm_lab.machines import Lab, Machine

from . import figures as fig
from .cluster import (
    CHARMS,
    COMPUTE,
    CONTROLLER,
    CONTROLLER_OPTIONS,
    LAB_OPTIONS,
    REPO,
    SETTLE,
    Bench,
    BootLog,
    slurmd_options,
    slurmd_started,
)
from .watch import SLURMCTLD_LOG, ControllerWatch

BEFORE = "before"
"""The application of the `--before` charm (this tree's is `compute`)."""
CONTROLLER_BEFORE = "slurmctld-before"
"""The application of the `--before-controller` charm (this tree's is `slurmctld`)."""
OPS_FLOOR = "ops_floor"
"""The mode of the `--ops-floor` charm; its applications are `opsfloor` and its anchor."""
OPS_FLOOR_CHARM = REPO / "benchmarks" / "charms" / "opsfloor"
OPS_FLOOR_KEY = "opsfloor/slurm.key"
"""Where the ops floor's units take slurm.key: the lab's shared mount (the charm's KEY_SOURCE)."""
MEASURED = {
    "slurmd": (
        "install",
        "slurmctld-relation-created",
        "slurmctld-relation-changed",
        "update-status",
    ),
    "slurmctld": ("slurmd-relation-joined", "slurmd-relation-changed", "update-status"),
}
"""The hooks `hook_costs` reports, per charm."""
REGISTERED_LINE = "_slurm_rpc_node_registration complete for"
"""slurmctld's debug2 line for a node's completed registration."""


class HookClock:
    """Wraps the controller's hook runner: each hook's unit, name, start and end (epoch s)."""

    def __init__(self, juju: LabJuju) -> None:
        self.runs: list[tuple[str, str, float, float]] = []
        controller = juju.ctl
        execute = controller.execute

        def timed(unit: Any, machine: Any, run: Any) -> Any:
            started = time.time()
            response = execute(unit, machine, run)
            self.runs.append((unit.name, run.name, started, time.time()))
            return response

        controller.execute = timed  # type: ignore[method-assign]


def log_registrations(bench: Bench, controller: str) -> None:
    """Have the controller's slurmctld log each node's registration (debug2, from now on)."""
    bench.sh(controller, "scontrol setdebug debug2")


def registered_wall(bench: Bench, controller: str, node: str) -> float | None:
    """Epoch seconds of the controller's log line for the node's first registration, or None."""
    script = (
        f"line=$(grep -m1 -F '{REGISTERED_LINE} {node} ' {SLURMCTLD_LOG}) || exit 0\n"
        'stamp=${line%%]*}\ndate -d "${stamp#[}" +%s.%N\n'
    )
    out = bench.sh(controller, script).strip()
    return float(out) if out else None


def enlist(
    bench: Bench, watch: ControllerWatch, clock: HookClock, app: str, controller: str
) -> dict[str, Any]:
    """`add_unit` on app until its node is idle; the new unit's hook timeline."""
    before = set(bench.juju.state.apps[app].units)
    started, wall = time.monotonic(), time.time()
    bench.juju.add_unit(app)
    (unit,) = set(bench.juju.state.apps[app].units) - before
    node = fig.node_of(unit)
    watch.until(ControllerWatch.idle(node), timeout=fig.ENLIST_TIMEOUT, what=node, tick=bench.tick)
    idle = watch.seen(node).first_idle
    assert idle is not None
    bench.wait_active()
    machine: Machine = bench.machine(unit)
    slurmd = slurmd_started(machine)
    registered = registered_wall(bench, controller, node)
    return {
        "unit": unit,
        "total_s": round(idle - started, 2),
        "registered_s": round(registered - wall, 3) if registered else None,
        "boot_s": bench.boots.boots.get(machine.name),
        "slurmd_start_s": round(slurmd - started, 2) if slurmd else None,
        "hooks": [
            [hook, round(start - wall, 2), round(end - wall, 2)]
            for name, hook, start, end in clock.runs
            if name == unit
        ],
    }


def hook_costs(clock: HookClock, apps: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Median and count of each measured hook's wall time, per mode and charm.

    `apps` maps a mode to its application of each charm (`{"after": {"slurmd": "compute"}}`).
    """
    found: dict[str, Any] = {}
    for mode, charms in apps.items():
        for charm, app in charms.items():
            for hook in MEASURED[charm]:
                times = [
                    end - start
                    for unit, name, start, end in clock.runs
                    if unit.split("/")[0] == app and name == hook
                ]
                if times:
                    found.setdefault(mode, {}).setdefault(charm, {})[hook] = {
                        "median_s": round(statistics.median(times), 2),
                        "count": len(times),
                    }
    return found


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median enlistment of each charm and of the floor, and their ratios to the floor.

    `registered`: the same from the log's registration times (rounds that have them all).
    """
    floor = statistics.median(r["bare"]["total_s"] for r in rounds)
    found: dict[str, Any] = {"bare_s": floor}
    modes = [m for m in (BEFORE, "after", OPS_FLOOR) if all(m in r for r in rounds)]
    for mode in modes:
        total = statistics.median(r[mode]["total_s"] for r in rounds)
        found[mode] = {"enlistment_s": total, "ratio_to_bare": round(total / floor, 2)}
    timed = [r for r in rounds if all(r[k].get("registered_s") for k in ("bare", *modes))]
    if timed:
        bare = statistics.median(r["bare"]["registered_s"] for r in timed)
        found["registered"] = {"rounds": len(timed), "bare_s": round(bare, 3)}
        for mode in modes:
            total = statistics.median(r[mode]["registered_s"] for r in timed)
            found["registered"][mode] = {
                "enlistment_s": round(total, 3),
                "ratio_to_bare": round(total / bare, 2),
            }
    return found


def deploy_pair(
    bench: Bench, before: Path, before_controller: Path | None
) -> tuple[dict[str, dict[str, str]], dict[str, ControllerWatch]]:
    """Deploy both charms; return each mode's applications and the watch of its controller."""
    juju = bench.juju
    juju.deploy(CHARMS / "slurmctld", "slurmctld", config=CONTROLLER_OPTIONS)
    juju.deploy(CHARMS / "slurmd", COMPUTE, config=LAB_OPTIONS)
    juju.deploy(before, BEFORE, config=LAB_OPTIONS)
    apps = {
        "after": {"slurmd": COMPUTE, "slurmctld": "slurmctld"},
        BEFORE: {"slurmd": BEFORE, "slurmctld": "slurmctld"},
    }
    if before_controller:
        juju.deploy(before_controller, CONTROLLER_BEFORE, config=CONTROLLER_OPTIONS)
        apps[BEFORE]["slurmctld"] = CONTROLLER_BEFORE
    for charms in apps.values():
        juju.integrate(f"{charms['slurmctld']}:slurmd", f"{charms['slurmd']}:slurmctld")
    bench.wait_active()
    watches = {"after": ControllerWatch(bench.machine(CONTROLLER))}
    watches[BEFORE] = (
        ControllerWatch(bench.machine(f"{CONTROLLER_BEFORE}/0"))
        if before_controller
        else watches["after"]
    )
    for watch in {id(w): w for w in watches.values()}.values():
        watch.start()
    if not before_controller:  # one controller: its hooks are after's alone
        del apps[BEFORE]["slurmctld"]
    return apps, watches


def deploy_ops_floor(bench: Bench) -> None:
    """Deploy the ops floor (`opsfloor`, its anchor) with compute/0's options, and enlist one."""
    options = slurmd_options(bench, f"{COMPUTE}/0")
    key = bench.lab.host_path(bench.machine(CONTROLLER).name, fig.SLURM_KEY).read_bytes()
    shared_key = bench.lab.shared_dir / OPS_FLOOR_KEY
    shared_key.parent.mkdir(mode=0o700, exist_ok=True)
    shared_key.write_bytes(key)
    shared_key.chmod(0o600)
    conf_server = options["SLURMD_OPTIONS"].split("--conf-server", 1)[1].split()[0]
    config = {"conf-server": conf_server, "conf": options["SLURMD_CONF"]}
    bench.juju.deploy(OPS_FLOOR_CHARM, "opsfloor-anchor")
    bench.juju.deploy(OPS_FLOOR_CHARM, "opsfloor", config=config)
    bench.juju.integrate("opsfloor:anchor", "opsfloor-anchor:floor")
    bench.wait_active()


def one_round(
    bench: Bench,
    watches: dict[str, ControllerWatch],
    controllers: dict[str, str],
    clock: HookClock,
    index: int,
    *,
    ops_floor: bool = False,
) -> dict[str, Any]:
    """The floor, then one enlistment of each charm, in turns (each first in its rounds)."""
    watch = watches["after"]
    found: dict[str, Any] = {"load": round(os.getloadavg()[0], 1)}
    bare = fig.bare_enlistment(bench, watch, 300 + index)
    registered = registered_wall(bench, controllers["after"], bare["node"])
    bare["registered_s"] = (
        round(bare["before_slurmd_s"] + registered - bare["slurmd_start_wall"], 3)
        if registered
        else None
    )
    found["bare"] = bare
    order = [(BEFORE, BEFORE), ("after", COMPUTE)] + ([(OPS_FLOOR, "opsfloor")] * ops_floor)
    turn = index % len(order)
    for mode, app in order[turn:] + order[:turn]:
        watch_of, controller = (mode, mode) if mode != OPS_FLOOR else ("after", "after")
        found[mode] = enlist(bench, watches[watch_of], clock, app, controllers[controller])
    found["bare"]["departure_s"] = fig.departure_floor(bench, watch, found["bare"])
    return found


def update_status_in_turns(
    bench: Bench, found: dict[str, Any], apps: dict[str, dict[str, str]]
) -> None:
    """Fire update-status on this round's new units and on both controllers, one at a time
    (alternating before and after), so each hook's time is its own, not a crowd's."""
    units = [
        unit
        for mode in (BEFORE, "after")
        for unit in (found[mode]["unit"], f"{apps[mode]['slurmctld']}/0")
    ]
    for unit in units[0::2] + units[1::2]:
        bench.juju.update_status(unit)
        bench.wait_active()


def main(argv: list[str] | None = None) -> int:
    """Deploy, compare, print and write the result; the lab always goes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lab.enlist_compare")
    parser.add_argument("--before", type=Path, required=True, help="the other slurmd charm dir")
    parser.add_argument(
        "--before-controller", type=Path, help="the other slurmctld charm dir (its own cluster)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--ops-floor", action="store_true", help="also enlist the ops floor charm each round"
    )
    parser.add_argument("--out", type=Path, default=REPO / "build" / "enlist-compare.json")
    args = parser.parse_args(argv)
    state_dir = Path(tempfile.mkdtemp(prefix="bench-enlist-"))
    lab = Lab(state_dir)
    boots = BootLog()
    boots.install()
    bench = Bench(lab, LabJuju(lab, wait_timeout=SETTLE), boots)
    clock = HookClock(bench.juju)
    result: dict[str, Any] = {"before": str(args.before), "rounds": []}
    try:
        apps, watches = deploy_pair(bench, args.before, args.before_controller)
        controllers = {
            "after": CONTROLLER,
            BEFORE: f"{CONTROLLER_BEFORE}/0" if args.before_controller else CONTROLLER,
        }
        for controller in set(controllers.values()):
            log_registrations(bench, controller)
        if args.ops_floor:
            deploy_ops_floor(bench)
        for index in range(args.rounds):
            found = one_round(bench, watches, controllers, clock, index, ops_floor=args.ops_floor)
            if args.before_controller:
                update_status_in_turns(bench, found, apps)
            result["rounds"].append(found)
            print(
                f"round {index} (load {found['load']}): bare {found['bare']['total_s']} s, "
                f"before {found[BEFORE]['total_s']} s, after {found['after']['total_s']} s"
                + (f", ops floor {found[OPS_FLOOR]['total_s']} s" if args.ops_floor else ""),
                file=sys.stderr,
                flush=True,
            )
        for watch in {id(w): w for w in watches.values()}.values():
            watch.stop()
        result["medians"] = medians(result["rounds"])
        result["medians"]["hooks"] = hook_costs(clock, apps)
    finally:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        lab.down()
        shutil.rmtree(state_dir, ignore_errors=True)
    print(json.dumps(result.get("medians"), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
