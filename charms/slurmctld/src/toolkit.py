"""The operator's actions on the controller: node states, the served configuration, keys.

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
"""

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from hpc_libs.machine import files
from hpc_libs.slurm import grammar

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
