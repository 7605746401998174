#!/usr/bin/env python3
"""The least an ops charm does to enlist a Slurm dynamic node: a benchmark floor.

A new unit sees its `anchor` relation first in relation-created, its second hook after
install on Juju's order (slurmd's charm starts slurmd there too). This charm then copies the
key the benchmark left on the lab's shared mount and starts `slurmd -Z` with the options the
bare floor uses (`benchmarks.lab.figures.bare_enlistment`). It checks nothing and reports
only active: what is left is dispatch, ops.main and Juju's hook order.
"""

import os
import shutil
import subprocess
from pathlib import Path

import ops

KEY_SOURCE = "/lab/shared/opsfloor/slurm.key"
KEY = "/etc/slurm/slurm.key"


class OpsFloorCharm(ops.CharmBase):
    """Start slurmd -Z once the anchor relation is seen; nothing else."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        framework.observe(self.on.anchor_relation_created, self._enlist)
        framework.observe(self.on.collect_unit_status, self._active)

    def _enlist(self, _: ops.RelationCreatedEvent) -> None:
        fd = os.open(KEY, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(Path(KEY_SOURCE).read_bytes())
        shutil.chown(KEY, "slurm", "slurm")
        node = self.unit.name.replace("/", "-")
        server, conf = str(self.config["conf-server"]), str(self.config["conf"])
        subprocess.run(
            ["slurmd", "-Z", "-N", node, "--conf-server", server, "--conf", conf], check=True
        )

    def _active(self, event: ops.CollectStatusEvent) -> None:
        event.add_status(ops.ActiveStatus())


if __name__ == "__main__":
    ops.main(OpsFloorCharm)
