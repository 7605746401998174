"""The login-node authentication daemon (sackd): fetches config from the controllers."""

from collections.abc import Sequence

from hpc_libs.slurm.base import SlurmManager, conf_server_option


class SackdManager(SlurmManager):
    """sackd: packages, service, slurm.key and `SACKD_OPTIONS`."""

    daemon = "sackd"
    packages = ("sackd", "slurm-client")

    def set_conf_servers(self, controllers: Sequence[str]) -> bool:
        """Point sackd at `controllers` (primary first); return whether the options changed.

        Raises:
            ValueError: `controllers` is empty.

        """
        if not controllers:
            raise ValueError("sackd needs at least one controller")
        return self.options.write(
            {self.options_variable: f"--conf-server {conf_server_option(controllers)}"}
        )
