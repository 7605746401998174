"""Old name of `slurm_lab.juju.standins.fsclient`, kept while `backend.py` imports it here.

backend.py is being split (issue 36); once it imports `slurm_lab.juju.standins`, this goes.
"""

from slurm_lab.juju.standins.fsclient import FilesystemClient

__all__ = ["FilesystemClient"]
