"""Juju's port hook tools (`open-port`, `close-port`, `opened-ports`) for the lab's charms.

Juju puts these commands on a hook's PATH; ops' `Unit.set_ports` speaks single ports only,
so a charm that opens a range (slurmd's and sackd's srun port range) runs the tools itself.
The lab's hook-tool program (`jujuc.py`, shipped with this file) answers the three commands
with `run_tool` on the unit's opened ports in the hook context (Juju's notation); the engine
commits them when the hook exits 0, as Juju commits a hook context. The unit tests' fake
machine answers the same commands with `run_tool`, so both model Juju one way.

What is modelled from Juju (3.x, hook command reference):

* the arguments `<port>[/<protocol>]`, `<from>-<to>[/<protocol>]` and `icmp`; the protocol is
  tcp (the default), udp or icmp; ports are 1-65535 and a range does not end before it starts;
* opening what is already open and closing what is not open do nothing;
* a range that overlaps a different open range of the same protocol is refused, so is closing
  part of an open range;
* `opened-ports` lists `6818/tcp`, `60001-63000/tcp`, `icmp`; `--format=json` as a JSON list.

Differences, on purpose: `--endpoints` is accepted and ignored (the lab has no per-endpoint
firewall); the error wording is the lab's. As in Juju 3.6, a later `opened-ports` in the same
hook lists the hook's pending changes. Nothing is opened on the machine: as on Juju, opened
ports become firewall rules only in clouds that make them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

TOOLS = ("open-port", "close-port", "opened-ports")
_SPEC = re.compile(r"(?:(\d{1,5})(?:-(\d{1,5}))?)(?:/([a-z]+))?")


@dataclass(frozen=True, order=True)
class PortRange:
    """One opened port or range, as Juju keeps it; icmp has no port (0-0)."""

    protocol: str
    first: int = 0
    last: int = 0

    def __str__(self) -> str:
        if self.protocol == "icmp":
            return "icmp"
        span = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{span}/{self.protocol}"

    def overlaps(self, other: PortRange) -> bool:
        """Whether both are of one protocol and share a port (icmp always overlaps icmp)."""
        if self.protocol != other.protocol:
            return False
        return self.first <= other.last and other.first <= self.last


def parse(spec: str) -> PortRange:
    """Parse a tool argument or an `opened-ports` entry.

    Raises:
        ValueError: It is not a port, a range or `icmp` as Juju reads them.

    """
    if spec.lower() == "icmp":
        return PortRange("icmp")
    match = _SPEC.fullmatch(spec.lower())
    if match is None:
        raise ValueError(f'invalid port or range "{spec}"')
    first, last, protocol = match.groups()
    protocol = protocol or "tcp"
    if protocol not in ("tcp", "udp"):
        raise ValueError(f'invalid protocol "{protocol}" in "{spec}": tcp, udp or icmp')
    low, high = int(first), int(last or first)
    if not (1 <= low <= 65535 and 1 <= high <= 65535):
        raise ValueError(f'port out of range in "{spec}": 1-65535')
    if high < low:
        raise ValueError(f'invalid port range "{spec}": it ends before it starts')
    return PortRange(protocol, low, high)


def open_range(opened: list[PortRange], wanted: PortRange) -> list[PortRange]:
    """Return `opened` with `wanted` open.

    Raises:
        ValueError: `wanted` overlaps a different opened range.

    """
    if wanted in opened:
        return opened
    for existing in opened:
        if existing.overlaps(wanted):
            raise ValueError(f"cannot open {wanted}: port range conflicts with {existing}")
    return sorted([*opened, wanted])


def close_range(opened: list[PortRange], unwanted: PortRange) -> list[PortRange]:
    """Return `opened` without `unwanted`.

    Raises:
        ValueError: `unwanted` is part of a different opened range.

    """
    if unwanted in opened:
        return [p for p in opened if p != unwanted]
    for existing in opened:
        if existing.overlaps(unwanted):
            raise ValueError(f"cannot close {unwanted}: port range conflicts with {existing}")
    return opened


def _without_options(args: list[str]) -> tuple[list[str], bool]:
    """Drop `--endpoints X` and `--format F`; return the rest and whether JSON was asked."""
    rest: list[str] = []
    as_json = False
    words = iter(args)
    for word in words:
        if word in ("--endpoints", "--format"):
            value = next(words, "")
            as_json = as_json or (word == "--format" and value == "json")
        elif word.startswith("--format="):
            as_json = as_json or word == "--format=json"
        elif word.startswith("--endpoints="):
            continue
        else:
            rest.append(word)
    return rest, as_json


def run_tool(tool: str, args: list[str], opened: list[str]) -> tuple[int, str, str, list[str]]:
    """Run one port tool on the unit's opened ports (Juju's notation).

    Returns the exit status, stdout, stderr and the opened ports afterwards.
    """
    try:
        ports = [parse(p) for p in opened]
        rest, as_json = _without_options(args)
        if tool == "opened-ports":
            names = [str(p) for p in ports]
            out = json.dumps(names) if as_json else "".join(f"{n}\n" for n in names)
            return 0, out, "", opened
        if tool not in TOOLS or len(rest) != 1:
            raise ValueError(
                f"usage: {tool} <port>[/<protocol>] | <from>-<to>[/<protocol>] | icmp"
            )
        change = open_range if tool == "open-port" else close_range
        ports = change(ports, parse(rest[0]))
    except ValueError as e:
        return 1, "", f"ERROR {e}\n", opened
    return 0, "", "", [str(p) for p in ports]
