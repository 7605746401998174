"""The Slurm controller daemon: slurm.conf and its companion files, keys, state directory."""

from pathlib import Path

from slurmutils import (
    AcctGatherConfig,
    AcctGatherConfigEditor,
    CGroupConfig,
    CGroupConfigEditor,
    GresConfig,
    GresConfigEditor,
    SlurmConfig,
    SlurmConfigEditor,
)

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files
from hpc_libs.slurm.base import ConfigFile, KeyFile, SlurmManager


class SlurmctldManager(SlurmManager):
    """slurmctld: packages, service, slurm.key, jwt_hs256.key and the controller's files.

    Attributes:
        config: /etc/slurm/slurm.conf (0644, slurm).
        cgroup_config: /etc/slurm/cgroup.conf.
        gres_config: /etc/slurm/gres.conf.
        acct_gather_config: /etc/slurm/acct_gather.conf (0600: may hold credentials).
        jwt_key: /etc/slurm/jwt_hs256.key for `AuthAltTypes=auth/jwt`.
        state_save_location: /var/lib/slurm/slurmctld, the default `StateSaveLocation`.

    """

    daemon = "slurmctld"
    packages = ("slurmctld", "slurm-client")

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.config = ConfigFile(
            self.etc_dir / "slurm.conf", SlurmConfigEditor(), SlurmConfig, yes_no_booleans=True
        )
        self.cgroup_config = ConfigFile(
            self.etc_dir / "cgroup.conf", CGroupConfigEditor(), CGroupConfig
        )
        self.gres_config = ConfigFile(self.etc_dir / "gres.conf", GresConfigEditor(), GresConfig)
        self.acct_gather_config = ConfigFile(
            self.etc_dir / "acct_gather.conf",
            AcctGatherConfigEditor(),
            AcctGatherConfig,
            mode=0o600,
        )
        self.jwt_key = KeyFile(self.etc_dir / "jwt_hs256.key", size=32, owner=self.user)
        self.state_save_location = root / "var/lib/slurm/slurmctld"

    def include_config(self, name: str) -> ConfigFile[SlurmConfig]:
        """Return a slurm.conf-format file `/etc/slurm/<name>` for use with `Include`.

        Raises:
            ValueError: `name` is not a plain file name.

        """
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"not a plain file name: {name!r}")
        return ConfigFile(
            self.etc_dir / name, SlurmConfigEditor(), SlurmConfig, yes_no_booleans=True
        )

    def create_state_save_location(self, path: Path | None = None) -> Path:
        """Create the state directory (default `state_save_location`) owned by slurm, 0750."""
        target = path or self.state_save_location
        try:
            target.mkdir(mode=0o750, parents=True, exist_ok=True)
            target.chmod(0o750)
        except OSError as e:
            raise SlurmOpsError(f"cannot create {target}: {e}") from e
        files.set_owner(target, self.user, self.group)
        return target

    def set_start_options(self, options: str = "") -> bool:
        """Write `SLURMCTLD_OPTIONS`; return whether /etc/default/slurmctld changed."""
        return self.options.write({self.options_variable: options})
