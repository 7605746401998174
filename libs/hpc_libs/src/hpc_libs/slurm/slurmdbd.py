"""The accounting database daemon: slurmdbd.conf holds the database password, so 0600 slurm."""

from pathlib import Path

from slurmutils import SlurmdbdConfig, SlurmdbdConfigEditor

from hpc_libs.slurm.base import ConfigFile, KeyFile, SlurmManager


class SlurmdbdManager(SlurmManager):
    """slurmdbd: packages, service, slurm.key, jwt_hs256.key and slurmdbd.conf (0600)."""

    daemon = "slurmdbd"
    packages = ("slurmdbd",)

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.config = ConfigFile(
            self.etc_dir / "slurmdbd.conf", SlurmdbdConfigEditor(), SlurmdbdConfig, mode=0o600
        )
        self.jwt_key = KeyFile(self.etc_dir / "jwt_hs256.key", size=32, owner=self.user)

    def set_start_options(self, options: str = "") -> bool:
        """Write `SLURMDBD_OPTIONS`; return whether /etc/default/slurmdbd changed."""
        return self.options.write({self.options_variable: options})
