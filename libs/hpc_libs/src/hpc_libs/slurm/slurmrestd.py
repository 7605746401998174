"""The REST API daemon."""

from pathlib import Path

from hpc_libs.slurm.base import KeyFile, SlurmManager


class SlurmrestdManager(SlurmManager):
    """slurmrestd: packages, service, slurm.key, jwt_hs256.key and `SLURMRESTD_OPTIONS`."""

    daemon = "slurmrestd"
    packages = ("slurmrestd",)

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.jwt_key = KeyFile(self.etc_dir / "jwt_hs256.key", size=32, owner=self.user)

    def set_start_options(self, options: str = "") -> bool:
        """Write `SLURMRESTD_OPTIONS`; return whether /etc/default/slurmrestd changed."""
        return self.options.write({self.options_variable: options})
