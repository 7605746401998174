"""Wake the charm when sackd fetches a new slurm.conf, not at the next update-status.

slurmrestd reads the configuration sackd caches only when it starts, and which OpenAPI
plugins it can load depends on it (`openapi/slurmdbd` needs accounting through slurmdbd). A
reconfigure on the controllers (slurmdbd joining, new controllers) reaches sackd at once,
but slurmctld publishes nothing new to this unit, so no hook would run before update-status,
up to 5 minutes later. A systemd path unit (root) watches sackd's copy (`PathChanged=`: a
write closed or the file replaced) and starts a oneshot service that dispatches the charm's
`slurmrestd-conf-changed` event through `juju-exec` (`hpc_libs.charm.wake`), whose reconcile
renders the drop-in again and restarts slurmrestd if its fingerprint changed. While a
dispatch runs, further changes merge into it (systemd does not start a running oneshot twice).
"""

from pathlib import Path

from hpc_libs.charm.wake import PathWake

WAKE_NAME = "slurmrestd-charm-conf"
"""The path unit `<name>.path` and the service `<name>.service`."""


def conf_watch(watched: Path, root: Path = Path("/")) -> PathWake:
    """Return the bridge watching sackd's copy of slurm.conf (`watched`, under `root`)."""
    return PathWake(
        WAKE_NAME,
        "/" + str(watched.relative_to(root)),
        charm="slurmrestd",
        change="sackd fetched a new slurm.conf",
        root=root,
    )
