"""The `slurm-lab` command: bring lab machines up and down, look at them, run commands in them.

Subcommands register themselves in `COMMANDS` through `add_command`, so other parts of the lab
(the Juju backend) can add theirs without touching the machine commands.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurm_lab import rootfs, vm
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab, Machine

Handler = Callable[[argparse.Namespace], int]
Setup = Callable[[argparse.ArgumentParser], None]
COMMANDS: dict[str, tuple[str, Setup, Handler]] = {}


def add_command(name: str, help: str, setup: Setup, handler: Handler) -> None:
    """Register a subcommand: setup adds its arguments; handler runs it, returns the exit code."""
    COMMANDS[name] = (help, setup, handler)


def _lab(args: argparse.Namespace) -> Lab:
    return Lab(args.state_dir, suite=getattr(args, "suite", None))


def _setup_up(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", help="machine names (default: lab-0 .. lab-N-1)")
    parser.add_argument("--machines", "-n", type=int, default=2, help="how many (without names)")
    parser.add_argument(
        "--suite",
        choices=rootfs.SUITES,
        default=None,
        help="Debian suite of the machines: trixie (Slurm 24.11) or forky (newer Slurm); "
        "default: the lab's current suite, else $SLURM_LAB_SUITE, else trixie",
    )


def _up(args: argparse.Namespace) -> int:
    lab = _lab(args)
    names: list[str] = args.names or [f"lab-{i}" for i in range(args.machines)]
    existing = {m.name for m in lab.machines()}
    started = time.monotonic()
    lab.ensure_base()
    print(f"{lab.suite} base ready in {time.monotonic() - started:.1f}s")
    wanted = [name for name in names if name not in existing]
    with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        for machine in pool.map(_timed_create(lab), wanted):
            print(f"{machine.name}\t{machine.address}\tup")
    return 0


def _timed_create(lab: Lab) -> Callable[[str], Machine]:
    def create(name: str) -> Machine:
        started = time.monotonic()
        machine = lab.create(name)
        print(f"{name} booted in {time.monotonic() - started:.1f}s")
        return machine

    return create


def _down(args: argparse.Namespace) -> int:
    _lab(args).down()
    print("lab is down")
    return 0


def _status(args: argparse.Namespace) -> int:
    lab = _lab(args)
    for machine in lab.machines():
        try:
            state = machine.exec(["systemctl", "is-system-running"], timeout=10).stdout.strip()
        except LabError as e:
            state = f"unreachable ({e})"
        print(f"{machine.name}\t{machine.address}\t{state}")
    return 0


def _setup_exec(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("machine")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _exec(args: argparse.Namespace) -> int:
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise LabError("exec: give a command after --")
    result = _lab(args).get(args.machine).exec(command, timeout=None)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


def _setup_machine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("machine")


def _shell(args: argparse.Namespace) -> int:
    machine = _lab(args).get(args.machine)
    argv = machine.nsenter_argv(["bash", "-l"], {"TERM": os.environ.get("TERM", "xterm")})
    os.execvp(argv[0], argv)


def _no_args(parser: argparse.ArgumentParser) -> None:
    del parser


def _requirements(args: argparse.Namespace) -> int:
    del args
    print(" ".join([*rootfs.host_requirements(), *vm.host_requirements()]))
    return 0


def _mirror(args: argparse.Namespace) -> int:
    print(_lab(args).serve_mirror())
    return 0


add_command("up", "create and boot lab machines", _setup_up, _up)
add_command("down", "remove every lab machine and the lab network", _no_args, _down)
add_command("status", "list lab machines and their systemd state", _no_args, _status)
add_command("exec", "run a command in a machine: exec MACHINE -- CMD...", _setup_exec, _exec)
add_command("shell", "an interactive shell in a machine", _setup_machine, _shell)
add_command(
    "mirror",
    "serve forky's Slurm (the newer major) on the lab network; print its apt source line",
    _no_args,
    _mirror,
)
add_command("host-requirements", "Debian packages the host needs", _no_args, _requirements)


def _register_backend_commands() -> None:
    """Let the Juju backend add its subcommands: `slurm_lab.juju.cli.register(add_command)`."""
    try:
        module = importlib.import_module("slurm_lab.juju.cli")
    except ModuleNotFoundError as e:
        if e.name in ("slurm_lab.juju", "slurm_lab.juju.cli"):
            return
        raise
    module.register(add_command)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered subcommand."""
    _register_backend_commands()
    parser = argparse.ArgumentParser(prog="slurm-lab", description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=None, help="default /var/lib/slurm-lab")
    parser.add_argument("--verbose", "-v", action="store_true")
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    for name, (help, setup, handler) in COMMANDS.items():
        sub = subcommands.add_parser(name, help=help)
        setup(sub)
        sub.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `slurm-lab`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    try:
        return args.handler(args)
    except LabError as e:
        print(f"slurm-lab: {e}", file=sys.stderr)
        return 1
