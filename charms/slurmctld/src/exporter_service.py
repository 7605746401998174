"""The Slurm exporter's service on this controller unit (`slurm_exporter.exporter`).

Every slurmctld unit runs it, whatever its role: each exports its own role and only the one
in control exports the cluster (see the exporter's module doc), so HA never duplicates a
series. The program is the charm's own copy of `slurm_exporter` (a workspace package only
this charm ships), run with the charm's Python and the charm's dependency directories
(prometheus-client comes from PyPI into the charm's venv),
so an upgraded charm restarts the exporter with its new code. It listens on loopback only:
the COS collector subordinate on the same machine scrapes it (`cos_agent`).

Any local user can scrape loopback, so the exporter runs with no more than a local user has:
a transient unprivileged user of its own (`DynamicUser=`), no capabilities, the file system
read-only, no access to the Slurm key. Its commands authenticate as that user through
slurmctld's local socket (`/run/slurmctld/sack.socket`, auth/slurm), so Slurm shows it what
it shows any user, and it is told the operator's `PrivateData` so that it neither reads nor
serves what that hides (see `slurm_exporter.exporter`).
"""

import dataclasses
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import ops
from facts import Facts
from hpc_libs.charm import wake
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd

logger = logging.getLogger(__name__)

SERVICE_UNIT = "slurmctld-charm-exporter.service"
UNIT_DIR = "/etc/systemd/system"
PORT = 9341
ADDRESS = "127.0.0.1"
HARDENING = (
    "DynamicUser=yes",
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
)
"""The service's sandbox: an unprivileged user of its own, nothing to write, no capability."""


def python_path(entries: Sequence[str] = tuple(sys.path)) -> list[str]:
    """Return the charm's own import directories (its source and dependencies), not Python's."""
    return [
        entry
        for entry in dict.fromkeys(entries)
        if entry.startswith("/") and not entry.startswith(sys.base_prefix) and Path(entry).is_dir()
    ]


def service_unit_text(
    interval: int,
    per_user: bool,
    private: Sequence[str] = (),
    python: str = sys.executable,
    path: Sequence[str] = (),
) -> str:
    """Return the exporter's systemd unit: always running, restarted if it stops.

    `private` is slurm.conf's `PrivateData` (its words).

    Raises:
        ValueError: The interpreter, an import directory or a PrivateData word cannot be
            written into the unit.

    """
    argv = [python, "-m", "slurm_exporter", "--address", ADDRESS, "--port", str(PORT)]
    argv += ["--interval", str(interval), *(["--per-user"] if per_user else [])]
    if private:
        argv += ["--private-data", ",".join(private)]
    directories = list(path) or python_path()
    wake.exec_line(directories)  # Checks each directory is a plain word.
    return systemd.service_text(
        "slurmctld",
        [
            "Description=Prometheus exporter of Slurm (the slurmctld charm's)",
            "After=network-online.target",
        ],
        [
            f"Environment=PYTHONPATH={':'.join(directories)}",
            f"ExecStart={wake.exec_line(argv)}",
            "Restart=always",
            "RestartSec=5",
            *HARDENING,
        ],
    )


@dataclasses.dataclass(eq=False)
class ExporterService:
    """Install and keep running the exporter's service; paths below `root` for tests."""

    root: Path = Path("/")
    service: systemd.Service = dataclasses.field(
        default_factory=lambda: systemd.Service(SERVICE_UNIT)
    )

    def reconcile(self, facts: Facts) -> None:
        """Keep the exporter running on this unit, whatever its role; a failure is logged."""
        config = facts.config
        try:
            private = config.slurm_conf_parameters.get("privatedata", [])
            self.install(config.metrics_interval, config.metrics_per_user, private)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot run the Slurm exporter (the next event retries): %s", e)

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Block while the exporter's service does not run, with its journal's reason."""
        if not self.service.is_active():
            reason = systemd.journal_reason(SERVICE_UNIT) or "see its journal"
            yield ops.BlockedStatus(f"the Slurm exporter is not running: {reason}")

    def install(self, interval: int, per_user: bool, private: Sequence[str] = ()) -> bool:
        """Write the service, (re)start it when it changed or stopped; return if it changed.

        `private` is slurm.conf's `PrivateData` (its words).

        Raises:
            ValueError: The charm's Python or import path cannot be written into the unit.
            SlurmOpsError: A file or `systemctl` failed.

        """
        unit = service_unit_text(interval, per_user, private)
        path = self.root / UNIT_DIR.lstrip("/") / SERVICE_UNIT
        existed = path.exists()
        if files.write_if_changed(path, unit, mode=0o644):
            systemd.daemon_reload()
            self.service.enable()
            if existed:
                self.service.restart()  # New options or a new charm: the new program.
            else:
                self.service.start()
            logger.info("Slurm exporter on %s:%d, collecting every %d s", ADDRESS, PORT, interval)
            return True
        if not self.service.is_active():
            self.service.enable()
            self.service.start()
        return False
