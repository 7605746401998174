"""A unit's Slurm dynamic node: its configuration, enlistment and departure.

A dynamic node's record in slurmctld is made when the node first registers and is NOT
changed by later restarts with a different `--conf` (Slurm 24.11). So a configuration
change reaches the node one of two ways:

- live fields (`Weight`, `Features`) go through `scontrol update nodename=...`;
- hardware fields (CPUs, RealMemory, Gres, ...) need a new registration: drain the node,
  wait until no job runs on it, `scontrol delete` it and restart slurmd, which registers
  again with the new `--conf`.

Waiting for jobs can take hours, so it never happens in a hook: a transient systemd unit
(`systemd-run --collect`) runs the wait-delete sequence and disappears when done. The same
mechanism retires the node when the unit leaves.
"""

import logging
import shlex
import time
from typing import Any

from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmd import NO_JOBS_MESSAGE
from hpc_libs.slurm import slurmd
from hpc_libs.slurm.scontrol import Scontrol
from slurmutils import Node

logger = logging.getLogger(__name__)

# Node fields `scontrol update` changes on a registered dynamic node (verified on 24.11).
LIVE_FIELDS = frozenset({"weight", "features"})
POLL_SECONDS = 5
# How long the hook waits for a freshly started slurmd to register before leaving the
# initial state to a later event. Registration takes about 2 s.
REGISTRATION_ATTEMPTS = 10
DELETE_ATTEMPTS = 12


def desired_conf(
    hardware: dict[str, int | str], app: str, parameters: dict[str, Any]
) -> dict[str, Any]:
    """Combine detected hardware, the partition feature and admin parameters.

    Returns slurmutils node fields (lower-case keys). Admin parameters override detected
    values; admin features are added to the application's feature, which places the node
    in its application's node set.
    """
    admin = conf_string(parameters) if parameters else ""
    return Node.from_str(slurmd.node_config(hardware, app, admin)).dict()


def conf_string(conf: dict[str, Any]) -> str:
    """Render a node configuration as `--conf` expects it (slurm.conf node syntax)."""
    return str(Node.from_dict(conf))


def hardware_differs(registered: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether the change needs a new registration (it touches a non-live field)."""

    def hardware(conf: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in conf.items() if k not in LIVE_FIELDS}

    return hardware(registered) != hardware(desired)


def update_live_fields(
    scontrol: Scontrol, node: str, registered: dict[str, Any], desired: dict[str, Any]
) -> None:
    """Apply changed live fields (weight, features) to the registered node."""
    changes: dict[str, str] = {}
    if registered.get("weight") != desired.get("weight"):
        changes["weight"] = str(desired.get("weight", 1))
    if registered.get("features") != desired.get("features"):
        features = ",".join(desired["features"])
        changes.update(availablefeatures=features, activefeatures=features)
    if changes:
        scontrol.update_node(node, **changes)
        logger.info("updated node %s live: %s", node, changes)


def wait_for_registration(scontrol: Scontrol, node: str) -> bool:
    """Wait briefly for a just-started slurmd to register; True once slurmctld knows it."""
    for attempt in range(REGISTRATION_ATTEMPTS):
        try:
            if scontrol.show_node(node) is not None:
                return True
        except SlurmOpsError as e:
            logger.debug("node %s not visible yet: %s", node, e)
        if attempt < REGISTRATION_ATTEMPTS - 1:
            time.sleep(1)
    return False


def drain(scontrol: Scontrol, node: str, reason: str) -> None:
    """Stop new jobs landing on the node. Failing to reach slurmctld is logged, not fatal."""
    try:
        scontrol.update_node(node, state="drain", reason=reason)
    except SlurmOpsError as e:
        logger.warning("cannot drain node %s: %s", node, e)


def retire_unit(node: str) -> str:
    """Name of the transient unit that takes the node out of the cluster."""
    return f"slurmd-retire-{node}"


def reregister_unit(node: str) -> str:
    """Name of the transient unit that makes the node register again."""
    return f"slurmd-reregister-{node}"


def retire_command(node: str) -> list[str]:
    """Wait until no job runs on the node, delete it from the cluster, stop slurmd.

    The node is deleted before slurmd stops: configless `scontrol` finds the cluster
    configuration through slurmd's runtime directory, which stopping slurmd removes. A
    deleted node whose slurmd keeps running does not register again (verified on 24.11).
    If the delete keeps failing (controller gone), slurmd is stopped anyway: the controller
    then sees the node down and an administrator can delete it; nothing blocks.
    """
    return _sh(
        _wait_for_no_jobs(node),
        _delete_with_retries(node) + " || true",
        "systemctl disable --now slurmd",
    )


def reregister_command(node: str) -> list[str]:
    """Wait until no job runs on the drained node, delete it, restart slurmd to register anew.

    slurmd restarts only if the delete succeeded; otherwise the node stays drained with the
    reason saying why, for an administrator to look at.
    """
    return _sh(
        _wait_for_no_jobs(node),
        _delete_with_retries(node) + " && systemctl restart slurmd",
    )


def _wait_for_no_jobs(node: str) -> str:
    """Poll every few seconds until `scontrol listjobs <node>` reports no job on this node.

    The node name is required: without it scontrol looks up the hostname, which is not the
    node's name, and reports no job while jobs run.

    Only if `scontrol listjobs` itself fails (a crashed slurmd takes the configless
    configuration with it) does the absence of any slurmstepd process count as "no job":
    otherwise such a node would be polled forever.
    """
    return (
        f"no_jobs() {{ out=$(scontrol listjobs {shlex.quote(node)} 2>&1); status=$?; "
        f'case "$out" in *{shlex.quote(NO_JOBS_MESSAGE)}*) return 0;; esac; '
        '[ "$status" -ne 0 ] && ! pgrep -x slurmstepd >/dev/null; }; '
        f"until no_jobs; do sleep {POLL_SECONDS}; done"
    )


def _delete_with_retries(node: str) -> str:
    delete = f"scontrol delete nodename={shlex.quote(node)}"
    return (
        f"( n=0; until {delete}; do n=$((n+1)); "
        f"[ $n -ge {DELETE_ATTEMPTS} ] && exit 1; sleep {POLL_SECONDS}; done )"
    )


def _sh(*steps: str) -> list[str]:
    return ["/bin/sh", "-c", "; ".join(steps)]
