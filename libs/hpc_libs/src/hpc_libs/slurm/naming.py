"""What the charms and the autoscaler agree on about a slurmd unit's Slurm node.

Defined once, without ops, so the operator-side autoscaler (`slurm_autoscale`) can read it
without importing the charm framework:

* a unit's node name (`node_name`);
* the drain reasons the charms set, so either side (and the autoscaler) can tell a node the
  charms drained from one an operator drained;
* the job states that keep a node busy (`BUSY_JOB_STATES`);
* what a node name read back from Slurm's output may look like (`NODE_NAME`).
"""

import re

RETIRE_REASON = "juju: unit leaving the cluster"
"""Drain reason of the node of a slurmd unit that leaves (set by either charm)."""
REREGISTER_REASON = "juju: applying new node configuration"
"""Drain reason of a node waiting for its jobs to end before it registers again."""
BUSY_JOB_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")
"""Job states that keep a node or partition busy (pending jobs do not)."""
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A node name as the charms accept it from Slurm's output: no separator, space or newline."""


def node_name(unit_name: str) -> str:
    """Name a slurmd unit's Slurm node `<application>-<unit number>`: stable and unique."""
    app, number = unit_name.rsplit("/", 1)
    return f"{app}-{number}"
