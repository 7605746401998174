"""The operator's actions on the controller: node states, the served configuration, keys.

`Actions` wires each action's event to its body here (the rolling rebuild's actions are
`rebuild.Rebuild`'s):

* `set-node-state`: `scontrol update nodename=<hostlist> state=<state> [reason=<text>]`,
  every parameter checked against Slurm's grammar first; the host list and the reason each
  travel as one argv element, so neither can add an argument. Node states are Slurm's
  (saved in its state directory): nothing the charms do later sets them back, except a
  departing unit draining its own node.
* `show-current-config`: the files slurmctld serves configless, as they are on disk. No key
  file and no slurmdbd.conf is ever read; a line naming a parameter that can hold a password
  is replaced as a whole (`Key=REDACTED`, see `redact`).
* `rotate-jwt-key`: a new revision of the JWT key secret; slurmctld restarts with it (its
  identity changed) and slurmdbd, which reads the secret, restarts on its `secret-changed`.
* `rotate-auth-key`: the first step of an auth key rotation (`rotation`); the daemons carry
  it on.
* `token`, `resume`, `list-backups`, `scaling-view`, and the leader's removal of key
  revisions no unit tracks (`secret-remove`).
"""

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import credentials
import ops
import rotation
import scaling_view
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.charm.upgrade import list_backups
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmd import get_or_create_auth_key_secret
from hpc_libs.machine import files
from hpc_libs.slurm import grammar
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)

NODE_STATES = ("drain", "down", "resume", "idle", "undrain")
"""States `set-node-state` sets; Slurm's own words for `scontrol update nodename=.. state=`."""
STATES_NEEDING_REASON = frozenset({"drain", "down"})
MAX_REASON = 1024
SERVED_FILES = {
    "slurm-conf": "slurm.conf",
    "cgroup-conf": "cgroup.conf",
    "gres-conf": "gres.conf",
    "acct-gather-conf": "acct_gather.conf",
}
"""Action result key -> file in /etc/slurm. Never a key file, never slurmdbd.conf."""
DEFAULT_TOKEN_LIFESPAN = 1800
REDACTED = "REDACTED"
_SECRET_PARAMETER = re.compile(r"(pass(word)?|secret|token|credential)$", re.IGNORECASE)
"""Parameters whose value may be a password (AccountingStoragePass, ProfileInfluxDBPass, ...)."""
_KEY = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_]*)[ \t]*=")
"""A key as Slurm's parser finds one: a name, optional blanks, then `=` (`Key = value`)."""


@dataclass(frozen=True)
class NodeStateRequest:
    """A checked `set-node-state` request."""

    nodes: str
    state: str
    reason: str | None


def node_state_request(nodes: object, state: object, reason: object) -> NodeStateRequest:
    """Check the `set-node-state` parameters against Slurm's grammar.

    Raises:
        ValueError: Which parameter is refused, and why.

    """
    if not isinstance(nodes, str):
        raise ValueError("nodes must be a Slurm host list, e.g. compute-[0-3]")
    try:
        grammar.HOSTLIST(nodes)
    except ValueError as e:
        raise ValueError(f"nodes {nodes!r} is not a Slurm host list: {e}") from None
    if nodes.startswith("-"):
        raise ValueError(f"nodes {nodes!r} is not a Slurm host list: starts with '-'")
    if not isinstance(state, str) or state.lower() not in NODE_STATES:
        raise ValueError(f"state {state!r} is not one of {', '.join(NODE_STATES)}")
    state = state.lower()
    if reason is None or reason == "":
        if state in STATES_NEEDING_REASON:
            raise ValueError(f"state {state} needs a reason")
        return NodeStateRequest(nodes, state, None)
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError(f"reason must be text of at most {MAX_REASON} characters")
    try:
        grammar.free_text(reason)
    except ValueError as e:
        raise ValueError(f"reason {reason!r} is refused: {e}") from None
    if state not in STATES_NEEDING_REASON:
        return NodeStateRequest(nodes, state, None)  # Slurm keeps no reason for these
    return NodeStateRequest(nodes, state, reason)


def redact(text: str) -> str:
    """Replace every line that names a parameter which may hold a password, as a whole.

    Slurm reads `Key=value`, `Key = value` and quoted values with blanks (`Key="a b"`), and
    several keys on one line: so the whole line goes, not just a token of it, and a commented
    line too. What remains is `<key>=REDACTED` for the first such key.
    """
    shown: list[str] = []
    for line in text.splitlines(keepends=True):
        secret = next(
            (m["key"] for m in _KEY.finditer(line) if _SECRET_PARAMETER.search(m["key"])), None
        )
        if secret is None:
            shown.append(line)
        else:
            ending = "\n" if line.endswith("\n") else ""
            shown.append(f"{secret}={REDACTED}{ending}")
    return "".join(shown)


def served_config(etc_dir: Path) -> dict[str, str]:
    """Return the configuration files slurmctld serves, by result key, the ones that exist.

    Raises:
        FileNotFoundError: There is no slurm.conf (the controller is not configured yet).

    """
    shown: dict[str, str] = {}
    for result_key, name in SERVED_FILES.items():
        data = files.read_bytes(etc_dir / name)
        if data is not None:
            shown[result_key] = redact(data.decode(errors="replace"))
    if "slurm-conf" not in shown:
        raise FileNotFoundError(f"no {etc_dir / 'slurm.conf'} yet")
    return shown


# The action bodies (the charm wires each action's event to one of these).


def token(event: ops.ActionEvent, scontrol: Scontrol) -> None:
    """Return a JWT for a user: the one place the charm hands out a credential, on purpose.

    The token goes to the action's result only, never to a log, a databag or a status.
    """
    params = event.params
    try:
        username, lifespan = credentials.token_request(
            params.get("username"), params.get("lifespan", DEFAULT_TOKEN_LIFESPAN)
        )
    except ValueError as e:
        event.fail(f"invalid token request: {e}")
        return
    try:
        issued = scontrol.token(username, lifespan)
    except SlurmOpsError as e:
        event.fail(f"cannot get a token for {username}: {e.stderr.strip() or e.message}")
        return
    logger.info("token issued for user %s, valid %d s", username, lifespan)
    event.set_results({"username": username, "lifespan": lifespan, "token": issued})


def resume(event: ops.ActionEvent, scontrol: Scontrol) -> None:
    """Resume a node (`nodename`, checked as a Slurm host list)."""
    nodename = str(event.params["nodename"])
    try:
        grammar.HOSTLIST(nodename)
    except ValueError as e:
        event.fail(f"invalid nodename: {e}")
        return
    try:
        scontrol.update_node(nodename, state="resume")
    except SlurmOpsError as e:
        event.fail(f"cannot resume {nodename}: {e.stderr or e.message}")
        return
    event.set_results({"nodename": nodename, "state": "resume"})


def set_node_state(event: ops.ActionEvent, scontrol: Scontrol) -> None:
    """Set nodes' state in Slurm (`node_state_request` checks every parameter)."""
    params = event.params
    try:
        request = node_state_request(
            params.get("nodes"), params.get("state"), params.get("reason")
        )
    except ValueError as e:
        event.fail(f"invalid set-node-state request: {e}")
        return
    try:
        scontrol.update_node(request.nodes, state=request.state, reason=request.reason)
    except SlurmOpsError as e:
        event.fail(f"cannot set {request.nodes} {request.state}: {e.stderr or e.message}")
        return
    logger.info("operator set nodes %s %s", request.nodes, request.state)
    event.set_results({"nodes": request.nodes, "state": request.state})


def show_current_config(event: ops.ActionEvent, etc_dir: Path) -> None:
    """Return the configuration files served to the nodes (no key, no password)."""
    try:
        event.set_results(served_config(etc_dir))
    except FileNotFoundError as e:
        event.fail(f"slurmctld is not configured yet: {e}")


def remove_unused_revision(event: ops.SecretRemoveEvent) -> None:
    """Remove a revision of the keys' secrets that no unit tracks any more (leader only).

    Each rotation leaves the former keys in older revisions; Juju says, with this event on
    the leader, once no consumer tracks one of them. The charm reads only the latest.
    """
    try:
        event.remove_revision()
    except ops.ModelError as e:
        logger.warning("cannot remove revision %d of a key secret: %s", event.revision, e)
        return
    what = event.secret.label or event.secret.id
    logger.info("removed revision %d of secret %s: no unit tracks it", event.revision, what)


def rotate_jwt_key(
    event: ops.ActionEvent, charm: SlurmCharm[Any], manager: SlurmctldManager
) -> None:
    """Publish a new JWT key: tokens issued before stop working (leader only)."""
    if not charm.unit.is_leader():
        event.fail("run rotate-jwt-key on the leader (slurmctld/leader)")
        return
    secret = credentials.get_or_create_jwt_key_secret(charm, manager.jwt_key.generate)
    secret.set_content({credentials.JWT_KEY_FIELD: manager.jwt_key.generate()})
    if (failure := charm.converge()) is not None:
        event.fail(f"new JWT key published; slurmctld did not apply it yet: {failure}")
        return
    event.set_results({"rotated": True})


def rotate_auth_key(
    event: ops.ActionEvent,
    charm: SlurmCharm[Any],
    manager: SlurmctldManager,
    auth_rotation: rotation.AuthKeyRotation,
) -> None:
    """Start rotating the cluster's auth key (`rotation`); the daemons carry it on."""
    if not charm.unit.is_leader():
        event.fail("run rotate-auth-key on the leader (slurmctld/leader)")
        return
    try:
        secret = get_or_create_auth_key_secret(charm, manager.key.generate)
        new_kid = auth_rotation.begin(secret, manager.key.generate())
    except rotation.RotationError as e:
        event.fail(f"cannot rotate the auth key: {e}")
        return
    if (failure := charm.converge()) is not None:
        event.fail(f"rotation to {new_kid} started; slurmctld did not apply it yet: {failure}")
        return
    event.set_results(
        {"new-key-id": new_kid, "next": "each daemon loads it; `juju status` shows progress"}
    )


class Actions(ops.Object):
    """Wire the controller's actions (and `secret-remove`) to their bodies above."""

    def __init__(
        self,
        charm: SlurmCharm[Any],
        manager: SlurmctldManager,
        scontrol: Scontrol,
        auth_rotation: rotation.AuthKeyRotation,
    ) -> None:
        super().__init__(charm, "actions")
        self.charm, self.manager, self.scontrol = charm, manager, scontrol
        self.auth_rotation = auth_rotation
        on, observe = charm.on, charm.framework.observe
        observe(on.token_action, self._on_token)
        observe(on.resume_action, self._on_resume)
        observe(on.set_node_state_action, self._on_set_node_state)
        observe(on.show_current_config_action, self._on_show_current_config)
        observe(on.rotate_jwt_key_action, self._on_rotate_jwt_key)
        observe(on.rotate_auth_key_action, self._on_rotate_auth_key)
        observe(on.list_backups_action, self._on_list_backups)
        observe(on.scaling_view_action, self._on_scaling_view)
        observe(on.secret_remove, self._on_secret_remove)

    def _on_token(self, event: ops.ActionEvent) -> None:
        token(event, self.scontrol)

    def _on_resume(self, event: ops.ActionEvent) -> None:
        resume(event, self.scontrol)

    def _on_set_node_state(self, event: ops.ActionEvent) -> None:
        set_node_state(event, self.scontrol)

    def _on_show_current_config(self, event: ops.ActionEvent) -> None:
        show_current_config(event, self.manager.etc_dir)

    def _on_rotate_jwt_key(self, event: ops.ActionEvent) -> None:
        rotate_jwt_key(event, self.charm, self.manager)

    def _on_rotate_auth_key(self, event: ops.ActionEvent) -> None:
        rotate_auth_key(event, self.charm, self.manager, self.auth_rotation)

    def _on_list_backups(self, event: ops.ActionEvent) -> None:
        list_backups(event, self.manager.root)

    def _on_scaling_view(self, event: ops.ActionEvent) -> None:
        scaling_view.run(event)

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        if self.charm.unit.is_leader():  # Only the leader manages the application's secrets.
            remove_unused_revision(event)
