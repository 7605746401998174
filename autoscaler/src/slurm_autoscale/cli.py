"""`slurm-autoscale`: one pass (or a loop of passes) over the policy's slurmd applications.

A pass reads the model (`juju status`), gets a short-lived token from slurmctld's `token`
action, reads Slurm's jobs, nodes and reservations through slurmrestd, decides per
application (slurm_autoscale.decide) and acts with `juju add-unit` / `juju remove-unit`.
Nothing changes when the input is bad or Slurm cannot be read.
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

import jubilant

from slurm_autoscale import policy as policy_file
from slurm_autoscale.decide import Decision, decide
from slurm_autoscale.policy import AppPolicy, PolicyError
from slurm_autoscale.slurm import (
    API_VERSIONS,
    DEFAULT_API_VERSION,
    RestClient,
    SlurmUnreadable,
    Transport,
    curl_on_unit,
    http_get,
)

logger = logging.getLogger("slurm-autoscale")

SLURMD_CHARM = "slurmd"
TOKEN_LIFESPAN = 300
EXIT_BAD_INPUT = 2
EXIT_SLURM_UNREADABLE = 1


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
    parser.add_argument("--controller-app", default="slurmctld", help="runs the token action")
    parser.add_argument("--rest-app", default="slurmrestd", help="the slurmrestd application")
    parser.add_argument("--rest-url", help="slurmrestd's URL (default: from juju status)")
    parser.add_argument(
        "--rest-via-unit",
        metavar="UNIT",
        help="reach slurmrestd with curl on this unit (juju exec), when this machine cannot",
    )
    parser.add_argument("--token-user", default="root", help="the token's user")
    parser.add_argument("--api-version", default=DEFAULT_API_VERSION, choices=API_VERSIONS)
    return parser.parse_args(argv)


def check_apps(policies: Mapping[str, AppPolicy], status: jubilant.Status) -> None:
    """Every application of the policy exists and is a slurmd application."""
    for app in policies:
        found = status.apps.get(app)
        if found is None:
            raise BadInput(f"policy names application {app!r}, which the model does not have")
        if found.charm_name != SLURMD_CHARM:
            raise BadInput(f"application {app!r} runs {found.charm_name!r}, not slurmd")


def rest_client(juju: jubilant.Juju, status: jubilant.Status, args: argparse.Namespace):
    """Build a slurmrestd client with a fresh token from the controller's leader."""
    controllers = status.apps.get(args.controller_app)
    leader = next(
        (n for n, u in (controllers.units if controllers else {}).items() if u.leader), None
    )
    if leader is None:
        raise SlurmUnreadable(f"no leader unit of {args.controller_app!r} to ask for a token")
    params = {"username": args.token_user, "lifespan": TOKEN_LIFESPAN}
    try:
        token = juju.run(leader, "token", params).results["token"]
    except (jubilant.TaskError, jubilant.CLIError, KeyError) as e:
        raise SlurmUnreadable(f"the token action on {leader} failed: {e}") from e
    base = args.rest_url or _rest_url(juju, status, args.rest_app)
    transport: Transport = http_get
    if args.rest_via_unit:
        unit = args.rest_via_unit
        transport = curl_on_unit(lambda command: juju.exec(command, unit=unit, wait=60).stdout)
    return RestClient(base, args.token_user, token, transport, args.api_version)


def _rest_url(juju: jubilant.Juju, status: jubilant.Status, app: str) -> str:
    """http://<address of the first slurmrestd unit>:<its port option>."""
    rest = status.apps.get(app)
    addresses = sorted(u.public_address for u in (rest.units if rest else {}).values())
    if not addresses or not addresses[0]:
        raise SlurmUnreadable(f"no unit of {app!r} with an address (set --rest-url)")
    return f"http://{addresses[0]}:{juju.config(app).get('port', 6820)}"


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
    client = rest_client(juju, status, args)
    now = time.time()
    slurm = client.snapshot(int(now))
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
        state[decision.app] = now
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
    model = juju if juju is not None else jubilant.Juju(model=args.model)
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
        return EXIT_SLURM_UNREADABLE
    except jubilant.CLIError as e:
        logger.error("juju failed: %s", e.stderr or e)
        return EXIT_SLURM_UNREADABLE
    return 0


def main() -> None:
    """Run the console script."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run())
