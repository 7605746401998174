"""Slurm's own OpenMetrics endpoint (`MetricsType=metrics/openmetrics`, Slurm 25.11 and newer).

slurmctld then serves `/metrics/{jobs,nodes,partitions,scheduler,jobs-users-accts}` over HTTP
on SlurmctldPort. The charm enables it where it works and offers it to COS beside the
charm's exporter (`exporter_service`), which stays the source of the alerts and dashboards:
the native series lack the controller role, node and pending reasons, RPC statistics and
slurmdbd's queue, and carry memory in MB and times in microseconds.

* Any `PrivateData` makes slurmctld answer 401 to every path (it has no way to authenticate
  a scraper), so with PrivateData among the operator's parameters the endpoint stays off and
  no job is offered: the exporter, which runs as root, covers the cluster.
* Only the primary answers: a backup slurmctld redirects every path (303) to the primary's
  address. The jobs do not follow redirects, so a backup's scrape fails and delivers nothing,
  and HA never duplicates a native series (a collector on the backup would otherwise store the
  primary's series under the backup's unit).
* Native names overlap the exporter's (`slurm_partition_jobs`, for one) with other
  labels and meanings, so every native series is stored as `slurm_native_<name without
  slurm_>`.
* `/metrics/jobs-users-accts` holds some 30 series per user and per account with jobs; it is
  offered only with `metrics-per-user`, like the exporter's per-user series.
"""

from typing import Any

from config import SlurmctldConfig
from hpc_libs.interfaces.cos_agent import scrape_job
from hpc_libs.slurm import version
from hpc_libs.slurm.ports import SLURMCTLD_PORT

FIRST_RELEASE = (25, 11)
"""The first Slurm release with `metrics/openmetrics`."""
PATHS = ("jobs", "nodes", "partitions", "scheduler")
PER_USER_PATH = "jobs-users-accts"
NATIVE_PREFIX = "slurm_native_"
"""Where native series are stored: `slurm_jobs_pending` becomes `slurm_native_jobs_pending`."""


def enabled(package_version: str, config: SlurmctldConfig) -> bool:
    """Whether slurmctld serves its metrics: asked for, Slurm 25.11 or newer, no PrivateData.

    The operator asks (`native-metrics`) once every daemon runs 25.11 or newer: the charm does
    not know the release of every login node and REST unit, and an older one refuses the
    slurm.conf that names MetricsType (a major upgrade's nodes keep the old release until
    their rollout).

    `package_version` is the installed slurmctld package's ("" or unreadable: not enabled);
    the operator's parsed parameters (slurmutils' lower-case keys) say whether PrivateData is.
    """
    if not config.native_metrics:
        return False
    try:
        release = version.parse(package_version)
    except ValueError:
        return False
    if (release.major, release.minor) < FIRST_RELEASE:
        return False
    return not config.slurm_conf_parameters.get("privatedata")


def conf_settings(on: bool) -> dict[str, Any]:
    """slurm.conf's key for the endpoint: MetricsType when `on`, nothing otherwise."""
    return {"metricstype": "metrics/openmetrics"} if on else {}


def scrape_jobs(package_version: str, config: SlurmctldConfig) -> list[dict[str, Any]]:
    """Return the collector's jobs for the endpoint on this machine (none where it is off)."""
    if not enabled(package_version, config):
        return []
    paths = [*PATHS, *([PER_USER_PATH] if config.metrics_per_user else [])]
    return [
        scrape_job(
            f"{NATIVE_PREFIX}{path.replace('-', '_')}",
            SLURMCTLD_PORT,
            f"/metrics/{path}",
            rename=("slurm_", NATIVE_PREFIX),
            follow_redirects=False,
        )
        for path in paths
    ]
