"""The lab's model of Juju's port hook tools (slurm_lab.juju.hooktools), without machines.

test_backend.py runs them for real in a lab machine through a charm's action.
"""

from __future__ import annotations

import json

import pytest
from slurm_lab.juju.hooktools import PortRange, parse, run_tool


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("6818", PortRange("tcp", 6818, 6818)),
        ("6818/tcp", PortRange("tcp", 6818, 6818)),
        ("53/UDP", PortRange("udp", 53, 53)),
        ("60001-63000/tcp", PortRange("tcp", 60001, 63000)),
        ("1-65535", PortRange("tcp", 1, 65535)),
        ("icmp", PortRange("icmp")),
    ],
)
def test_juju_notation_parses_and_prints_back(spec: str, parsed: PortRange):
    assert parse(spec) == parsed
    assert parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    "spec",
    ["", "0", "65536", "63000-60001", "6818/sctp", "6818/tcp/udp", "a-b", "6818 /tcp", "-1"],
)
def test_what_juju_refuses_is_refused(spec: str):
    code, _, err, after = run_tool("open-port", [spec], ["6817/tcp"])

    assert (code, after) == (1, ["6817/tcp"])
    assert err.startswith("ERROR ")


def test_open_and_close_are_idempotent_and_opened_ports_lists_json_or_lines():
    _, _, _, after = run_tool("open-port", ["60001-63000/tcp"], ["6818/tcp"])
    _, _, _, again = run_tool("open-port", ["--endpoints", "slurmctld", "60001-63000/tcp"], after)
    _, as_json, _, _ = run_tool("opened-ports", ["--format=json"], again)
    _, as_lines, _, _ = run_tool("opened-ports", [], again)

    assert again == after == ["6818/tcp", "60001-63000/tcp"]
    assert json.loads(as_json) == after
    assert as_lines == "6818/tcp\n60001-63000/tcp\n"
    assert run_tool("close-port", ["7000/tcp"], after)[0::3] == (0, after)  # not open: nothing
    assert run_tool("close-port", ["60001-63000/tcp"], after)[3] == ["6818/tcp"]


@pytest.mark.parametrize(
    ("tool", "spec"),
    [
        ("open-port", "6000-7000/tcp"),  # overlaps 6818/tcp
        ("open-port", "62000-64000"),  # overlaps the range
        ("close-port", "61000/tcp"),  # part of the range
    ],
)
def test_overlapping_a_different_range_is_refused(tool: str, spec: str):
    opened = ["6818/tcp", "60001-63000/tcp"]

    code, _, err, after = run_tool(tool, [spec], opened)

    assert (code, after) == (1, opened)
    assert "conflicts with" in err


def test_protocols_do_not_conflict():
    _, _, _, after = run_tool("open-port", ["6818/udp"], ["6818/tcp"])

    assert after == ["6818/tcp", "6818/udp"]
