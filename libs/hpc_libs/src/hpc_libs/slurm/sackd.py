"""The login-node authentication daemon (sackd): fetches config from the controllers."""

import hashlib
from collections.abc import Sequence

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm.base import SlurmManager, conf_server_option

STOP_OVERRIDE_NAME = "10-hpc-libs-stop"
STOP_OVERRIDE = """\
# Written by the Slurm charms. sackd runs no process that must outlive it: a stop ends every
# process of the unit (the packaged KillMode=process left a reconfigure's new sackd running
# when systemd still held the old one, see hpc_libs.slurm.slurmd), within a bound.
[Service]
KillMode=control-group
TimeoutStopSec=10
"""


class SackdManager(SlurmManager):
    """sackd: packages, service, slurm.key and `SACKD_OPTIONS`."""

    daemon = "sackd"
    packages = ("sackd", "slurm-client")

    def set_conf_servers(self, controllers: Sequence[str]) -> bool:
        """Point sackd at `controllers` (primary first); return whether the options changed.

        It also installs the drop-in that makes a stop end all of sackd (`STOP_OVERRIDE`).

        Raises:
            ValueError: `controllers` is empty.

        """
        if not controllers:
            raise ValueError("sackd needs at least one controller")
        if systemd.write_override(self.daemon, STOP_OVERRIDE_NAME, STOP_OVERRIDE, root=self.root):
            systemd.reload_for(self.daemon)  # applies at the next stop: no restart
        return self.options.write(
            {self.options_variable: f"--conf-server {conf_server_option(controllers)}"}
        )

    def fingerprint(self) -> str:
        """Return a digest of what sackd reads at start: slurm.key and its options file.

        A charm records it after a successful restart (what was applied) and restarts sackd
        whenever the files' digest differs from it, so a restart that failed is retried even
        though the files did not change since. The digest reveals nothing about the key.
        """
        digest = hashlib.sha256()
        for path in (self.key.path, self.options.path):
            data = files.read_bytes(path)
            digest.update(b"-" if data is None else b"+" + hashlib.sha256(data).digest())
        return digest.hexdigest()

    def remove_key(self) -> bool:
        """Delete slurm.key and slurm.jwks; return whether one existed (missing is no error).

        Raises:
            SlurmOpsError: A file exists but cannot be deleted.

        """
        removed_key_set = self.key.remove_key_set()
        try:
            self.key.path.unlink()
        except FileNotFoundError:
            return removed_key_set
        except OSError as e:
            raise SlurmOpsError(f"cannot delete {self.key.path}: {e}") from e
        return True
