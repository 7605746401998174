"""Old name of `slurm_lab.juju.standins.mysql`, kept while `backend.py` imports it here.

backend.py is being split (issue 36); once it imports `slurm_lab.juju.standins`, this goes.
"""

from slurm_lab.juju.standins.mysql import MysqlStandIn

__all__ = ["MysqlStandIn"]
