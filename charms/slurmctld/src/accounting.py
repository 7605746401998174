"""Accounting as the controller sees it: the slurmdbd daemons, their status, the JWT key grant."""

import dataclasses
from collections.abc import Iterator

import ops
from facts import Facts
from hpc_libs.interfaces.slurmdbd import DbdEntry, SlurmdbdRequirer


@dataclasses.dataclass(frozen=True)
class Accounting:
    """The slurmdbd integration's facts, for slurm.conf and for the status."""

    slurmdbd: SlurmdbdRequirer

    def dbds(self) -> list[DbdEntry]:
        """Return the slurmdbd daemons to account to, primary first; none without usable data."""
        relation = self.slurmdbd.relation
        if relation is None:
            return []
        data = self.slurmdbd.slurmdbd_data(relation)
        return data.reachable() if data is not None else []

    def reconcile(self, facts: Facts) -> None:
        """Grant the JWT key to slurmdbd, which verifies tokens too (the leader, with its keys)."""
        if facts.keys is not None:
            self.share_jwt_key(facts.keys.jwt_secret)

    def problems(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Block on slurmdbd data the controller cannot use."""
        for relation in self.slurmdbd.relations:
            if problem := self.slurmdbd.slurmdbd_data_problem(relation):
                yield ops.BlockedStatus(problem)

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Where accounting goes, or that slurmdbd has not said yet (the leader, with slurmdbd)."""
        if not facts.leader or self.slurmdbd.relation is None:
            return
        dbds = facts.dbds
        if not dbds:
            yield ops.WaitingStatus("waiting for slurmdbd to publish its address")
            return
        where = f"accounting on slurmdbd {dbds[0].host}:{dbds[0].port_or_default}"
        if len(dbds) > 1:
            where += f", backup {dbds[1].host}"
        yield ops.ActiveStatus(where)

    def share_jwt_key(self, jwt_secret: ops.Secret) -> None:
        """Grant the JWT key to slurmdbd, which verifies tokens too; to no other integration."""
        for relation in self.slurmdbd.relations:
            self.slurmdbd.share_jwt_key(relation, jwt_secret)
