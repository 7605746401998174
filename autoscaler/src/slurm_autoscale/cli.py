"""`slurm-autoscale`: one pass (or a loop of passes) over the policy's slurmd applications.

A pass reads the model (`juju status`), runs slurmctld's read-only `scaling-view` action on
its leader (the policy's partitions' nodes, pending jobs and reservations), decides per
application (slurm_autoscale.decide) and acts with `juju add-unit` / `juju remove-unit`.
Nothing changes when the input is bad or Slurm cannot be read. Exit status: 0; 1 when Juju
or Slurm failed (or anything unexpected, logged); 2 for bad input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jubilant

from slurm_autoscale import policy as policy_file
from slurm_autoscale.decide import Decision, decide
from slurm_autoscale.policy import AppPolicy, PolicyError
from slurm_autoscale.slurm import ACTION_WAIT, SlurmUnreadable, Snapshot, read

logger = logging.getLogger("slurm-autoscale")

SLURMD_CHARM = "slurmd"
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class BadInput(ValueError):  # noqa: N818 - the message is the error
    """The policy does not match the model (unknown application, not a slurmd one...)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="slurm-autoscale", description=__doc__)
    parser.add_argument("--policy", type=Path, required=True, help="the policy file (TOML)")
    parser.add_argument("--model", help="the Juju model (default: the current one)")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--dry-run", action="store_true", help="log decisions, change nothing")
    parser.add_argument("--interval", type=float, default=60, help="seconds between passes")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path.home() / ".local/state/slurm-autoscale/state.json",
        help="when each application was last scaled (for the cooldown)",
    )
    parser.add_argument(
        "--controller-app", default="slurmctld", help="runs the scaling-view action"
    )
    parser.add_argument(
        "--juju", default="juju", metavar="PROGRAM", help="the juju client (default: juju on PATH)"
    )
    parser.add_argument(
        "--api-version",
        metavar="VERSION",
        help="the data_parser version to read (v0.0.42); default: the newest both know",
    )
    return parser.parse_args(argv)


def check_apps(policies: Mapping[str, AppPolicy], status: jubilant.Status) -> None:
    """Every application of the policy exists and is a slurmd application."""
    for app in policies:
        found = status.apps.get(app)
        if found is None:
            raise BadInput(f"policy names application {app!r}, which the model does not have")
        if found.charm_name != SLURMD_CHARM:
            raise BadInput(f"application {app!r} runs {found.charm_name!r}, not slurmd")


def read_slurm(
    juju: jubilant.Juju,
    status: jubilant.Status,
    controller_app: str,
    partitions: list[str],
    api_version: str | None = None,
) -> Snapshot:
    """Run the read-only action on the controller's leader; no token is involved."""
    controllers = status.apps.get(controller_app)
    leader = next(
        (n for n, u in (controllers.units if controllers else {}).items() if u.leader), None
    )
    if leader is None:
        raise SlurmUnreadable(f"no leader unit of {controller_app!r} to read Slurm")

    def run_action(unit: str, action: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            return juju.run(unit, action, dict(params), wait=ACTION_WAIT).results
        except jubilant.TaskError as e:
            raise SlurmUnreadable(f"{action} on {unit} failed: {e.task.message}") from e
        except jubilant.CLIError as e:
            raise SlurmUnreadable(f"{action} on {unit} failed: {_first_line(e)}") from e

    return read(run_action, leader, partitions, api_version)


def _first_line(error: jubilant.CLIError) -> str:
    return ((error.stderr or "").strip() or str(error)).splitlines()[0]


def read_state(path: Path) -> dict[str, float]:
    """Last action per application; an unreadable file is an empty one (logged)."""
    try:
        raw = json.loads(path.read_text())
        return {str(k): float(v) for k, v in raw.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as e:
        logger.warning("ignoring state file %s: %s", path, e)
        return {}


def write_state(path: Path, state: Mapping[str, float]) -> None:
    """Write the state file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(dict(state), sort_keys=True))
    partial.replace(path)


def one_pass(
    juju: jubilant.Juju, policies: Mapping[str, AppPolicy], args: argparse.Namespace
) -> list[Decision]:
    """Decide for every application, then act unless --dry-run. Raises before any action."""
    status = juju.status()
    check_apps(policies, status)
    slurm = read_slurm(juju, status, args.controller_app, sorted(policies), args.api_version)
    if slurm.omitted:
        logger.warning("%d pending jobs of other shapes were not read this pass", slurm.omitted)
    now = time.time()
    state = read_state(args.state_file)
    wall = dt.datetime.fromtimestamp(now, dt.UTC)
    decisions = [
        decide(
            app, rule, sorted(status.apps[app].units), slurm, now=wall, last_action=state.get(app)
        )
        for app, rule in policies.items()
    ]
    for decision in decisions:
        logger.info("%s%s", "(dry run) " if args.dry_run else "", decision.describe())
        if args.dry_run or not (decision.add or decision.remove):
            continue
        if decision.add:
            juju.add_unit(decision.app, num_units=decision.add)
        else:
            juju.remove_unit(*decision.remove)
        state[decision.app] = slurm.now  # The controller's clock, as decide() reads it.
        write_state(args.state_file, state)
    return decisions


def run(argv: Sequence[str] | None = None, juju: jubilant.Juju | None = None) -> int:
    """Run with `argv`; `juju` is the model to act on (default: jubilant on --model)."""
    args = parse_args(argv)
    try:
        policies = policy_file.load(args.policy)
    except PolicyError as e:
        logger.error("%s", e)
        return EXIT_BAD_INPUT
    model = juju if juju is not None else jubilant.Juju(model=args.model, cli_binary=args.juju)
    while True:
        code = _pass(model, policies, args)
        if args.once or code == EXIT_BAD_INPUT:
            return code
        time.sleep(args.interval)


def _pass(juju: jubilant.Juju, policies: Mapping[str, AppPolicy], args: argparse.Namespace) -> int:
    try:
        one_pass(juju, policies, args)
    except BadInput as e:
        logger.error("%s; nothing changed", e)
        return EXIT_BAD_INPUT
    except SlurmUnreadable as e:
        logger.error("cannot read Slurm: %s; nothing changed", e)
        return EXIT_FAILED
    except jubilant.CLIError as e:
        logger.error("juju failed: %s", e.stderr or e)
        return EXIT_FAILED
    except OSError as e:  # No juju program, or the state file cannot be written.
        logger.error("%s", e)
        return EXIT_FAILED
    except Exception:
        logger.exception("unexpected failure; the next pass tries again")
        return EXIT_FAILED
    return 0


def main() -> None:
    """Run the console script."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run())
