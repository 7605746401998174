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
no `_`. A job is accepted when the placeholders' count and shape hold it, so give the
autoscaler's `max`, and the machines' CPUs and memory.

The placeholders take room in `MaxNodeCount`, and so does each unit's dynamic node: a unit
enlists only while the node table has room (`max-node-count`). A count is an application's
most units, so the option is refused (`check_room`) unless the placeholders of every line,
integrated or not, and as many units fit: twice the total count at most `max-node-count`.
Shapes follow the types of Slurm's node fields (read_config.c): `CPUs` a uint16, `TmpDisk`
(MB) a uint32, `RealMemory` (MB) a uint64, each from 1 to below Slurm's NO_VAL and INFINITE.
"""

import re
from collections.abc import Mapping

from hpc_libs.errors import ConfigError
from slurmutils import Node

_APP = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
SHAPE_MAXIMA = {"cpus": 2**16 - 3, "realmemory": 2**64 - 3, "tmpdisk": 2**32 - 3}
"""The largest value of each shape key: its Slurm type's largest below NO_VAL and INFINITE."""
SHAPE_KEYS = tuple(SHAPE_MAXIMA)
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
            entry[key.lower()] = _number(f"{app} {key}", value, SHAPE_MAXIMA[key.lower()])
        parsed[app] = entry
    return parsed


def _number(key: str, value: str, maximum: int) -> int:
    if not (value.isascii() and value.isdecimal()) or not 1 <= int(value) <= maximum:
        raise ConfigError(f"{key}: {value!r} is not a number from 1 to {maximum}", key=key)
    return int(value)


def check_room(future: Mapping[str, Mapping[str, int]], max_node_count: int) -> None:
    """Refuse placeholders that leave the node table no room for the applications' units.

    Each line's count is its application's most units, and each unit's node takes a place in
    `MaxNodeCount` beside the placeholders: every line's placeholders (integrated or not) and
    as many units must fit.

    Raises:
        ValueError: Twice the total count is above `max_node_count`, naming both options.

    """
    total = sum(entry["count"] for entry in future.values())
    if 2 * total > max_node_count:
        raise ValueError(
            f"{total} placeholders and as many units need max-node-count {2 * total} or more "
            f"(it is {max_node_count}): lower the counts or raise max-node-count"
        )


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
