"""Figure 10: rolling rebuild. How long a node is out during `rebuild-nodes upgrade=true`
(the RebootProgram's `apt-get update` and `upgrade`, the reboot, slurmd's re-registration)
beside a bare `scontrol reboot` of the same machine (the same RebootProgram, reboot only).

Both are read from slurmctld, sampled every `INTERVAL` s on the controller's machine: a node
is out from the first sample with a reboot flag, DOWN or NOT_RESPONDING (`NOT_BACK`) until the
first sample where it is idle again with a new boot time. Each is also timed from its command
(`scontrol reboot`; the action) to the node back: with idle nodes that is the fairer pair.
The rollout runs with `max-unavailable=1` over every node of `compute`; its total is from
the action to the last node back. On the lab nothing is left to upgrade (the machines reach
no archive; `apt-get update` gives up on the unreachable mirror), so the upgrade's part is
apt's own overhead.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .cluster import COMPUTE, CONTROLLER, Bench, summary

INTERVAL = 0.5
LIMIT = 600.0
NOT_BACK = frozenset(
    {"DOWN", "DRAIN", "NOT_RESPONDING", "REBOOT_ISSUED", "REBOOT_REQUESTED", "POWERING_UP"}
)
"""Flags of a node still out (dynamic nodes are `IDLE` with `DYNAMIC_NORM` when back)."""


@dataclass
class NodeTimes:
    """When one node went out and came back (monotonic seconds), from slurmctld's view."""

    boot_before: float
    issued: float | None = None
    back: float | None = None

    @property
    def out_s(self) -> float | None:
        """Seconds from the reboot issued to the node idle on its new boot."""
        if self.issued is None or self.back is None:
            return None
        return round(self.back - self.issued, 1)


def _nodes(bench: Bench) -> dict[str, dict[str, Any]]:
    text = bench.sh(CONTROLLER, "scontrol show nodes --json")
    return {n["name"]: n for n in json.loads(text).get("nodes", []) if COMPUTE in n["partitions"]}


def _boot(record: dict[str, Any]) -> float:
    return float((record.get("boot_time") or {}).get("number") or 0)


def _follow(bench: Bench, times: dict[str, NodeTimes]) -> None:
    """Sample slurmctld until every node in `times` is back on a new boot."""
    deadline = time.monotonic() + LIMIT
    while any(t.back is None for t in times.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not back within {LIMIT:.0f} s: {times}")
        now, records = time.monotonic(), _nodes(bench)
        for name, seen in times.items():
            states = set(records[name]["state"])
            if seen.issued is None and states & NOT_BACK:
                seen.issued = now
            rebooted = _boot(records[name]) > seen.boot_before
            if seen.back is None and rebooted and "IDLE" in states and not states & NOT_BACK:
                seen.back = now
        bench.tick()
        time.sleep(INTERVAL)


def rebuild(bench: Bench) -> dict[str, Any]:
    """A bare `scontrol reboot` of the first node, then a rollout of every node, upgrading."""
    records = _nodes(bench)
    first = sorted(records)[0]
    bare = {first: NodeTimes(_boot(records[first]))}
    bare_started = time.monotonic()
    bench.sh(CONTROLLER, f"scontrol reboot {first}")
    _follow(bench, bare)
    bare_total = time.monotonic() - bare_started

    records = _nodes(bench)
    rollout = {name: NodeTimes(_boot(record)) for name, record in records.items()}
    started = time.monotonic()
    params = {"partition": COMPUTE, "upgrade": True, "max-unavailable": 1}
    bench.juju.run(CONTROLLER, "rebuild-nodes", params)
    _follow(bench, rollout)
    total = time.monotonic() - started
    outs = [t.out_s for t in rollout.values() if t.out_s is not None]
    return {
        "nodes": len(rollout),
        "node": first,
        "bare_reboot_s": bare[first].out_s,
        "bare_total_s": round(bare_total, 1),
        "rollout_node_s": rollout[first].out_s,
        "rollout_per_node_s": summary(outs),
        "rollout_by_node_s": {name: t.out_s for name, t in sorted(rollout.items())},
        "rollout_total_s": round(total, 1),
        "rollout_total_per_node_s": round(total / len(rollout), 1),
    }
