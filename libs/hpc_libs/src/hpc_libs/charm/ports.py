"""A unit's opened ports, port ranges included, set through Juju's hook tools.

ops' `Unit.set_ports` speaks single ports only: `opened-ports` lists a range such as srun's
`60001-63000/tcp`, ops reads it as port 60001 (with a warning), and `set_ports` would then
try to close that port. A unit that opens a range therefore sets all its ports here, with
`open-port`, `close-port` and `opened-ports` (Juju's notation: `6818/tcp`, `60001-63000/tcp`),
and never with ops' port API. The commands run through `hpc_libs.machine.host`, like every
other command: with a timeout, and a failure carries the tool's stderr.
"""

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host

logger = logging.getLogger(__name__)

HOOK_TOOL_TIMEOUT = 30.0
_SPEC = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?/(tcp|udp)")


@dataclass(frozen=True, order=True)
class PortRange:
    """TCP or UDP ports `first` to `last` (one port when they are equal)."""

    first: int
    last: int
    protocol: str = "tcp"

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= 65535 or self.protocol not in ("tcp", "udp"):
            raise ValueError(f"not a port range: {self.first}-{self.last}/{self.protocol}")

    @classmethod
    def single(cls, port: int) -> "PortRange":
        """One TCP port."""
        return cls(port, port)

    def overlaps(self, other: "PortRange") -> bool:
        """Whether both share a port of one protocol (Juju refuses to open both)."""
        same = self.protocol == other.protocol
        return same and self.first <= other.last and other.first <= self.last

    def __str__(self) -> str:
        span = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{span}/{self.protocol}"


def opened_ports() -> set[PortRange]:
    """Return the TCP and UDP ports and ranges this unit has opened (icmp is left out).

    Raises:
        SlurmOpsError: `opened-ports` failed or printed something else than Juju's list.

    """
    argv = ["opened-ports", "--format=json"]
    out = host.run(argv, timeout=HOOK_TOOL_TIMEOUT).stdout
    try:
        listed: object = json.loads(out or "[]")
    except ValueError:
        listed = None
    if not isinstance(listed, list):
        raise SlurmOpsError("opened-ports printed no JSON list", command=argv, stderr=out)
    opened: set[PortRange] = set()
    for entry in cast("list[object]", listed):
        match = _SPEC.fullmatch(str(entry).lower())
        if match is None:
            logger.debug("leaving opened port %s alone", entry)
            continue
        first, last, protocol = match.groups()
        opened.add(PortRange(int(first), int(last or first), protocol))
    return opened


def set_opened_ports(wanted: Iterable[PortRange]) -> bool:
    """Open `wanted` and close every other TCP or UDP port of this unit; return if any changed.

    An entry overlapping an earlier one is left out and logged (Juju would refuse it): list
    the unit's own ports before ranges that come from elsewhere. Closes first, so a range
    that moves (60001-63000 to 62000-64000) never conflicts with its former self.

    Raises:
        SlurmOpsError: A hook tool failed (Juju refuses overlapping ranges, for one); its
            stderr says why. Nothing is undone: the next call converges again.

    """
    target: set[PortRange] = set()
    for ports in wanted:
        if clash := next((kept for kept in target if kept.overlaps(ports)), None):
            logger.warning("not opening %s: it overlaps %s", ports, clash)
        else:
            target.add(ports)
    current = opened_ports()
    for unwanted in sorted(current - target):
        _hook_tool("close-port", unwanted)
    for missing in sorted(target - current):
        _hook_tool("open-port", missing)
    return current != target


def _hook_tool(tool: str, ports: PortRange) -> None:
    verb = "open" if tool == "open-port" else "close"
    try:
        host.run([tool, str(ports)], timeout=HOOK_TOOL_TIMEOUT)
    except SlurmOpsError as e:
        raise SlurmOpsError.restated(f"cannot {verb} port {ports}", e) from e
