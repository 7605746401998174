"""Placeholder FUTURE nodes, so a partition with few or no units still takes jobs.

Slurm 24.11 refuses a job at submission ("Requested node configuration is not available")
when no node of the partition, counted or shaped as the job asks, exists: a partition whose
slurmd application has 0 units refuses every job, and one with 1 unit refuses `-N2`. FUTURE
nodes count as such nodes but never run anything, so with them the job is accepted and pends
(reason `ReqNodeNotAvail` or `Resources`) until units join; then the autoscaler
(`slurm-autoscale`) can see it and add units. Verified on the lab (Slurm 24.11.5).

`future-nodes` holds one line per slurmd application, `<application>=<count>` followed by
optional `cpus=`, `realmemory=` (MB) and `tmpdisk=` (MB) that describe one of its machines,
for example `compute=4 cpus=8 realmemory=32000`. The charm renders
`NodeName=<application>_future[0-<count-1>] State=FUTURE Features=<application> ...`; the
feature puts them in the application's node set, so in its partition. The `_` keeps the names
apart from the units' nodes (`<application>-<unit number>`): Juju application names have
no `_`. The placeholders take room in `MaxNodeCount`. A job is accepted when the placeholders'
count and shape hold it, so give the autoscaler's `max`, and the machines' CPUs and memory.
"""

import re
from collections.abc import Mapping

from hpc_libs.errors import ConfigError
from slurmutils import Node

_APP = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
SHAPE_KEYS = ("cpus", "realmemory", "tmpdisk")
MAX_PLACEHOLDERS = 4096


def parse(text: str) -> dict[str, dict[str, int]]:
    """Parse the option: application → {"count": n, shape keys...}; ConfigError names the key."""
    parsed: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        first, *rest = line.split()
        app, _, count = first.partition("=")
        if not _APP.match(app):
            raise ConfigError(f"{app!r} is not a slurmd application name", key=app)
        if app in parsed:
            raise ConfigError(f"{app!r} is given twice", key=app)
        entry = {"count": _number(app, count, MAX_PLACEHOLDERS)}
        for pair in rest:
            key, _, value = pair.partition("=")
            if key.lower() not in SHAPE_KEYS or key.lower() in entry:
                raise ConfigError(f"{app}: {key!r} is not one of {', '.join(SHAPE_KEYS)}", key=key)
            entry[key.lower()] = _number(f"{app} {key}", value, 2**31 - 1)
        parsed[app] = entry
    return parsed


def _number(key: str, value: str, maximum: int) -> int:
    if not value.isdigit() or not 1 <= int(value) <= maximum:
        raise ConfigError(f"{key}: {value!r} is not a number from 1 to {maximum}", key=key)
    return int(value)


def placeholders(
    future: Mapping[str, Mapping[str, int]], partitions: Mapping[str, object]
) -> dict[str, Node]:
    """Return the FUTURE nodes to render for the served `partitions` (others are left out).

    `future` is the parsed option (`parse`'s result, as the config holds it).
    """
    nodes: dict[str, Node] = {}
    for app, entry in future.items():
        if app not in partitions:
            continue
        shape = {key: value for key, value in entry.items() if key != "count"}
        last = entry["count"] - 1
        name = f"{app}_future{last}" if last == 0 else f"{app}_future[0-{last}]"
        nodes[name] = Node.from_dict(
            {"nodename": name, "state": "future", "features": [app], **shape}
        )
    return nodes
