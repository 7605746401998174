"""What slurmctld tells the daemons it serves: the auth key, the controllers, the options.

slurmd applications (one partition each), login nodes, slurmdbd and the REST API each integrate
on their own endpoint; the leader publishes the same controller data to all of them.
"""

import logging

import ops
from hpc_libs.interfaces.controller import PortRangeEntry
from hpc_libs.interfaces.sackd import SackdRequirer
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, PartitionEntry
from hpc_libs.interfaces.slurmd import ControllerEntry, SlurmdRequirer
from hpc_libs.interfaces.slurmdbd import SlurmdbdRequirer
from hpc_libs.interfaces.slurmrestd import SlurmrestdRequirer
from hpc_libs.slurm.ports import SLURMCTLD_PORT

logger = logging.getLogger(__name__)


class Daemons:
    """The daemon applications integrated with slurmctld, on their four endpoints."""

    def __init__(
        self,
        slurmd: SlurmdRequirer,
        login_nodes: SackdRequirer,
        slurmdbd: SlurmdbdRequirer,
        rest_api: SlurmrestdRequirer,
    ) -> None:
        self.slurmd = slurmd
        self.login_nodes = login_nodes
        self.slurmdbd = slurmdbd
        self.rest_api = rest_api

    def publish(
        self,
        auth_key: ops.Secret,
        controllers: list[ControllerHost],
        partitions: dict[str, PartitionEntry],
        config_digest: str,
        srun_ports: tuple[int, int] | None,
    ) -> None:
        """Share the auth key, the controllers and the applied config's digest with every daemon.

        Login nodes, slurmdbd and the REST API get them at once; a slurmd application once
        its partition is in slurm.conf. A new `config_digest` (published only once slurmctld
        accepted the configuration) gives each of them a relation-changed, so a daemon that
        failed to start with the former configuration retries now. Where srun runs (login and
        compute nodes) the units also get `SrunPortRange`, to open it.
        """
        try:
            entries = [
                ControllerEntry(
                    hostname=c.hostname, address=c.address, port=SLURMCTLD_PORT, version=c.version
                )
                for c in controllers
            ]
        except ValueError as e:
            logger.error("not publishing controllers that break Slurm's grammar: %s", e)
            return
        srun = PortRangeEntry(first=srun_ports[0], last=srun_ports[1]) if srun_ports else None
        for relation in self.slurmd.relations:
            if relation.app is not None and relation.app.name in partitions:
                self.slurmd.publish_controller_data(
                    relation, auth_key, entries, config_digest, srun
                )
        for relation in self.login_nodes.relations:
            self.login_nodes.publish_controller_data(
                relation, auth_key, entries, config_digest, srun
            )
        for relation in self.slurmdbd.relations:
            self.slurmdbd.publish_controller_data(relation, auth_key, entries, config_digest)
        for relation in self.rest_api.relations:
            self.rest_api.publish_controller_data(relation, auth_key, entries, config_digest)
