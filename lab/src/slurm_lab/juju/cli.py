"""`slurm-lab` subcommands for the lab's Juju model (registered by slurm_lab.cli)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jubilant

from slurm_lab.juju.backend import LabJuju

Handler = Callable[[argparse.Namespace], int]
Setup = Callable[[argparse.ArgumentParser], None]
AddCommand = Callable[[str, str, Setup, Handler], None]


def _backend(args: argparse.Namespace) -> LabJuju:
    from slurm_lab.machines import Lab  # noqa: PLC0415

    return LabJuju(Lab(args.state_dir))


def format_status(status: jubilant.Status) -> str:
    """Render a `juju status`-like table: apps, then units with machine, address, message."""
    lines = ["App\tStatus\tScale\tMessage"]
    for name, app in sorted(status.apps.items()):
        lines.append(f"{name}\t{app.app_status.current}\t{app.scale}\t{app.app_status.message}")
    lines += ["", "Unit\tWorkload\tAgent\tMachine\tAddress\tMessage"]
    for app_name in sorted(status.apps):
        for unit_name, unit in sorted(status.get_units(app_name).items()):
            leader = "*" if unit.leader else ""
            lines.append(
                f"{unit_name}{leader}\t{unit.workload_status.current}\t"
                f"{unit.juju_status.current}\t{unit.machine}\t{unit.address}\t"
                f"{unit.workload_status.message}"
            )
    return "\n".join(lines)


def _setup_bundle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="bundle YAML (charms are local charm dirs)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for active")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for all active")


def _deploy_bundle(args: argparse.Namespace) -> int:
    juju = _backend(args)
    started = time.monotonic()
    juju.deploy(args.bundle.resolve())
    if not args.no_wait:
        try:
            juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=args.timeout)
        except (jubilant.WaitError, TimeoutError):
            print(format_status(juju.status()))
            print(juju.debug_log(limit=200), file=sys.stderr)
            return 1
    print(format_status(juju.status()))
    print(f"\ndeployed in {time.monotonic() - started:.0f}s")
    return 0


def _setup_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("tabular", "json"), default="tabular")


def _status(args: argparse.Namespace) -> int:
    juju = _backend(args)
    if args.format == "json":
        print(json.dumps(juju.status_dict(), indent=2))
    else:
        print(format_status(juju.status()))
    return 0


def _setup_log(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("unit", nargs="?", help="one unit's log and machine journal")
    parser.add_argument("--lines", "-n", type=int, default=0, help="last N lines (0: all)")


def _log(args: argparse.Namespace) -> int:
    juju = _backend(args)
    if args.unit:
        print(juju.unit_log(args.unit, journal_lines=args.lines or 300))
    else:
        print(juju.debug_log(limit=args.lines), end="")
    return 0


def _setup_exec(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("unit", help="unit name, e.g. sackd/0 or slurmctld/leader")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and arguments")


def _exec(args: argparse.Namespace) -> int:
    command = [c for c in args.command if c != "--"] or ["true"]
    try:
        task = _backend(args).exec(*command, unit=args.unit)
    except jubilant.TaskError as e:
        task = e.task
    print(task.stdout, end="")
    print(task.stderr, end="", file=sys.stderr)
    return task.return_code


def _setup_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("unit")
    parser.add_argument("action")
    parser.add_argument("params", nargs="*", help="key=value")


def _run(args: argparse.Namespace) -> int:
    params = dict(p.split("=", 1) for p in args.params)
    try:
        task = _backend(args).run(args.unit, args.action, params or None)
    except jubilant.TaskError as e:
        print(e.task, file=sys.stderr)
        return 1
    print(json.dumps(task.results, indent=2))
    return 0


def _no_args(parser: argparse.ArgumentParser) -> None:
    del parser


def _destroy(args: argparse.Namespace) -> int:
    _backend(args).destroy_lab_model()
    return 0


def register(add_command: AddCommand) -> None:
    """Add the backend's subcommands to `slurm-lab`."""
    add_command(
        "deploy-bundle",
        "deploy a bundle on the lab, wait for active",
        _setup_bundle,
        _deploy_bundle,
    )
    add_command("juju-status", "status of the lab's Juju model", _setup_status, _status)
    add_command(
        "juju-log", "charm logs (debug log, or one unit's with its journal)", _setup_log, _log
    )
    add_command("juju-exec", "run a command on a unit: juju-exec UNIT -- CMD", _setup_exec, _exec)
    add_command("juju-run", "run an action: juju-run UNIT ACTION key=value...", _setup_run, _run)
    add_command("juju-destroy", "destroy the lab model's machines (no hooks)", _no_args, _destroy)
