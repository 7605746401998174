"""A unit's Slurm dynamic node: its configuration and enlistment.

A dynamic node's record in slurmctld is made when the node first registers and is NOT
changed by later restarts with a different `--conf` (Slurm 24.11). So a configuration
change reaches the node one of two ways:

- live fields (`Weight`, `Features`) go through `scontrol update nodename=...`;
- hardware fields (CPUs, RealMemory, Gres, ...) need a new registration: drain the node,
  wait until no job runs on it, `scontrol delete` it and restart slurmd, which registers
  again with the new `--conf`.

Waiting for jobs can take hours while the unit stays in the cluster, so re-registration
never waits in a hook: a transient systemd unit (`systemd-run --collect`) runs the
wait-delete-restart sequence and disappears when done. Leaving the cluster is different
(see the `departure` module): the machine goes away with the unit, so that wait happens
in the departing unit's own hook.

A node comes back from re-registration IDLE. An operator's DRAIN or DOWN (and its reason)
is read before the charm drains the node (`operator_state`) and put back by the transient
unit once the node has registered again: nothing the charm does undoes an operator's state.
The one state not put back is the one a registration ends in Slurm too: DOWN "Not
responding", which slurmctld itself set (ReturnToService=1, which slurmctld's charm sets:
Slurm's own default, 0, would keep the node DOWN).
"""

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_libs.errors import ConfigError, SlurmOpsError
from hpc_libs.slurm import grammar, parameters, slurmd
from hpc_libs.slurm.base import SLURM_USER
from hpc_libs.slurm.naming import REREGISTER_REASON, RETIRE_REASON
from hpc_libs.slurm.scontrol import Node as ScontrolNode
from hpc_libs.slurm.scontrol import Scontrol
from slurmutils import ModelError, Node

logger = logging.getLogger(__name__)

# Node fields `scontrol update` changes on a registered dynamic node (verified on 24.11).
LIVE_FIELDS = frozenset({"weight", "features"})
# How long (seconds) the hook waits for a freshly started slurmd to register before leaving
# the initial state to a later event. Registration takes about 2 s.
REGISTRATION_ATTEMPTS = 30
REGISTRATION_LOOK_S = 0.25
"""Seconds between a new node's looks for its registration (the charm's update of it then runs
slurmctld's scheduler for the jobs waiting: the sooner seen, the sooner they start)."""
PROGRAMS_DIR = Path(__file__).parent / "programs"
"""The shell programs the charm ships (`just lint` runs shellcheck over them)."""
CHARM_REASONS = frozenset({REREGISTER_REASON, RETIRE_REASON})
"""Reasons the charms themselves drain a node with: such a state is never restored."""
UNRESPONSIVE_REASON = "Not responding"
"""slurmctld's reason for a node it set DOWN; its next registration ends it (ReturnToService=1)."""
REBOOTED_REASON = "Node unexpectedly rebooted"
"""slurmctld's reason for a node whose slurmd registered from a boot it did not ask for: with
ReturnToService below 2 no registration ends it (`return_after_reboot`)."""
UPTIME = Path("/proc/uptime")
BOOT_TIME_SLACK_S = 5
"""How far slurmctld's boot time of the node may be from this machine's own (both are now less
an uptime, each taken at its own moment) and still be this boot."""


@dataclass(frozen=True)
class OperatorState:
    """A DRAIN or DOWN state an operator gave the node, with its reason (untrusted text)."""

    state: str
    """`drain` or `down`, as `scontrol update state=` takes it."""
    reason: str


def desired_conf(
    hardware: dict[str, int | str], app: str, parameters: dict[str, Any]
) -> dict[str, Any]:
    """Combine detected hardware, the partition feature and the admin's parsed parameters.

    Returns slurmutils node fields (lower-case keys). Admin parameters override detected
    values; admin features are added to the application's feature, which places the node
    in its application's node set.

    Raises:
        ConfigError: The parameters or the detected hardware make no valid node.

    """
    try:
        grammar.check_fields(Node, parameters)
        return slurmd.merge_node(hardware, app, Node.from_dict(parameters)).dict()
    except grammar.GrammarError as e:
        raise ConfigError(f"node-config: {e}", key=e.key) from e
    except (ModelError, ValueError) as e:  # ConfigError is a ValueError too.
        raise ConfigError(f"node-config: {e}") from e


def check_conf(conf: dict[str, Any]) -> None:
    """Check a whole node configuration as slurmd will receive it in `--conf`.

    Every field passes Slurm's grammar, and the rendered line reads back as exactly these
    fields: no value can add a key or an argument.

    Raises:
        ConfigError: Naming the first offending key.

    """
    try:
        grammar.check_fields(Node, conf)
    except grammar.GrammarError as e:
        raise ConfigError(f"node-config: {e}", key=e.key) from e
    rendered = conf_string(conf)
    if parameters.parse(slurmd.NODE_LINE, rendered) != conf:
        raise ConfigError(f"node-config: {rendered!r} does not read back as given")


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


def wait_for_registration(
    scontrol: Scontrol, node: str, attempts: int = REGISTRATION_ATTEMPTS, interval: float = 1.0
) -> bool:
    """Wait briefly for a just-started slurmd to register; True once slurmctld knows it.

    `attempts` looks, `interval` seconds apart.
    """
    for attempt in range(attempts):
        try:
            if scontrol.show_node(node) is not None:
                return True
        except SlurmOpsError as e:
            logger.debug("node %s not visible yet: %s", node, e)
        if attempt < attempts - 1:
            time.sleep(interval)
    return False


def booted_at() -> float:
    """When this machine booted (UNIX time), as slurmd tells slurmctld: now less its uptime."""
    return time.time() - float(UPTIME.read_text().split()[0])


def return_after_reboot(
    scontrol: Scontrol, node: str, booted: float, attempts: int
) -> bool | None:
    """Resume the node if slurmctld set it DOWN for its machine's boot.

    Looks `attempts` times, a second apart: a slurmd that just started may not have registered
    yet. Only slurmctld's own DOWN (`REBOOTED_REASON`, set by SlurmUser) is ended: an
    operator's DOWN or DRAIN has a reason of its own, or was set by another user. Returns True
    once resumed; False once slurmctld holds a registration from the boot at `booted` without
    that DOWN; None while it holds none (not registered yet, or slurmctld unreachable).

    Raises:
        SlurmOpsError: slurmctld refused the resume.

    """
    for attempt in range(attempts):
        try:
            found = scontrol.show_node(node)
        except SlurmOpsError as e:
            logger.debug("node %s not readable yet: %s", node, e)
            found = None
        if found is not None and _down_for_its_boot(found):
            scontrol.update_node(node, state="resume")
            logger.info("node %s returned to service (slurmctld: %s)", node, REBOOTED_REASON)
            return True
        if found is not None and (found.boot_time or 0) >= booted - BOOT_TIME_SLACK_S:
            return False
        if attempt < attempts - 1:
            time.sleep(1)
    return None


def _down_for_its_boot(found: ScontrolNode) -> bool:
    """Whether slurmctld itself set the node DOWN because it registered from a new boot."""
    return found.has_state("down") and _slurmctlds_reason(found, REBOOTED_REASON)


def drain(scontrol: Scontrol, node: str, reason: str) -> None:
    """Stop new jobs landing on the node. Failing to reach slurmctld is logged, not fatal."""
    try:
        scontrol.update_node(node, state="drain", reason=reason)
    except SlurmOpsError as e:
        logger.warning("cannot drain node %s: %s", node, e)


def operator_state(scontrol: Scontrol, node: str) -> OperatorState | None:
    """Return the node's DRAIN or DOWN state to restore after re-registration, if any.

    None when the node is neither drained nor down, when slurmctld does not know it, or
    when the reason is one of the charms' own (`CHARM_REASONS`) or empty (Slurm refuses to
    set either state without one), or when slurmctld set the node DOWN itself for not
    responding (a registration ends that state in Slurm too). A down node that is also
    drained comes back down.

    Raises:
        SlurmOpsError: slurmctld cannot tell: re-registering now could lose the state.

    """
    found = scontrol.show_node(node)
    if found is None or not found.reason or found.reason in CHARM_REASONS:
        return None
    drained = any(found.has_state(flag) for flag in ("drain", "drained", "draining"))
    if found.has_state("down") and not _unresponsive(found):
        return OperatorState("down", found.reason)
    if drained:
        return OperatorState("drain", found.reason)
    return None


def _unresponsive(found: ScontrolNode) -> bool:
    """Whether slurmctld itself set the node DOWN for not answering: no operator did."""
    return _slurmctlds_reason(found, UNRESPONSIVE_REASON)


def _slurmctlds_reason(found: ScontrolNode, reason: str) -> bool:
    """Whether the node's reason is `reason`, set by slurmctld itself (SlurmUser), no operator."""
    return found.reason == reason and found.reason_set_by_user == SLURM_USER


def reregister_unit(node: str) -> str:
    """Name of the transient unit that makes the node register again."""
    return f"slurmd-reregister-{node}"


def reregister_command(node: str, restore: OperatorState | None = None) -> list[str]:
    """Wait until no job runs on the drained node, delete it, restart slurmd to register anew.

    The program is `programs/reregister.sh`, its text on the command line (a charm upgrade
    cannot change a run that waits) and every value an argument of its own. slurmd restarts
    only if the delete succeeded; otherwise the node stays drained with the reason saying
    why, for an administrator to look at. With `restore`, the node gets that state and
    reason back once it has registered again.
    """
    text = (PROGRAMS_DIR / "reregister.sh").read_text()
    kept = [] if restore is None else [restore.state, restore.reason]
    return ["/bin/sh", "-c", text, "reregister", node, *kept]
