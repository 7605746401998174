"""What the controller's Slurm configuration should be, derived from charm state.

Everything slurm.conf holds is rendered from scratch on every reconcile: the charm's options,
the ordered controllers (the leader alone without network state), the partitions that slurmd
applications publish, the slurmdbd daemons (accounting) and the JWT key file
(`AuthAltTypes=auth/jwt`). Comparing the rendering with the file on disk is what decides
whether anything is written and whether `scontrol reconfigure` runs, so a compute unit
joining (which changes none of these inputs) never touches slurm.conf.
"""

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import ha
import overrides
import primary_watch
import rebuild
from config import SlurmctldConfig
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.interfaces.slurmd import BUSY_JOB_STATES
from hpc_libs.interfaces.slurmdbd import DbdEntry
from hpc_libs.machine import host
from slurmutils import CGroupConfig, GresConfig, NodeSet, Partition, SlurmConfig

logger = logging.getLogger(__name__)

STATE_SAVE_LOCATION = "/var/lib/slurm/slurmctld"  # SlurmctldManager creates it.
LOG_DIR = "var/log/slurm"  # Relative to the manager's root; the charm creates it.
SLURMCTLD_LOG_FILE = f"/{LOG_DIR}/slurmctld.log"

# Slurm gives these partition/node-set names a meaning of their own (`PartitionName=DEFAULT`
# sets defaults for every partition, `Nodes=ALL` selects every node), and the charm's hidden
# rebuild partition has its own name, so a slurmd application with such a name cannot become
# a partition.
RESERVED_NAMES = frozenset({"default", "all", rebuild.PARTITION})

# Plugin choices per `process-isolation` option value.
ISOLATION_PLUGINS: dict[str, dict[str, Any]] = {
    "cgroup": {
        "proctracktype": "proctrack/cgroup",
        "taskplugin": ["task/cgroup", "task/affinity"],
        "jobacctgathertype": "jobacct_gather/cgroup",
    },
    # TaskPlugin unset is Slurm's `task/none` (slurmutils does not accept writing that).
    "none": {
        "proctracktype": "proctrack/linuxproc",
        "jobacctgathertype": "jobacct_gather/none",
    },
}
CGROUP_PLUGIN = {"cgroup": "autodetect", "none": "disabled"}
JWT_KEY_FILE = "/etc/slurm/jwt_hs256.key"  # SlurmctldManager.jwt_key writes it.
# Tokens (`scontrol token`, slurmrestd's rest_auth/jwt) are accepted besides auth/slurm.
JWT_AUTH: dict[str, Any] = {
    "authalttypes": ["auth/jwt"],
    "authaltparameters": {"jwt_key": JWT_KEY_FILE},
}
SQUEUE_TIMEOUT = 60


@dataclasses.dataclass(frozen=True)
class Controller:
    """One slurmctld unit as other hosts reach it."""

    hostname: str
    address: str

    @property
    def slurmctld_host(self) -> str:
        """The `SlurmctldHost` value: hostname plus address, so names need not resolve."""
        return f"{self.hostname}({self.address})"


def partition_record(
    app: str,
    partition: dict[str, Any] | None,
    nodeset: dict[str, Any] | None,
    relation_id: int | None = None,
) -> PartitionEntry:
    """Build the record for a slurmd application from the data it published.

    The data was validated when read from the databag. The names are forced to the
    application name whatever the data says, so one application can never overwrite another
    application's partition. Raises ValueError when the data is unusable.
    """
    if app.lower() in RESERVED_NAMES:
        raise ValueError(f"application name '{app}' is reserved by Slurm")
    if partition is None or nodeset is None:
        raise ValueError("partition or nodeset missing")
    settings = Partition.from_dict(dict(partition)).dict()
    settings.update(partitionname=app, nodes=[app])
    return PartitionEntry(
        name=app,
        partition=settings,
        nodeset={"nodeset": app, "feature": app},
        relation_id=relation_id,
    )


def default_partition(partitions: dict[str, PartitionEntry], wanted: str = "") -> str | None:
    """Pick the partition the charm marks `Default=YES`, or None to leave `Default` alone.

    Jobs submitted without `-p` need a default partition. The `default-partition` option
    (`wanted`) outranks everything while it names a serving partition
    (`overrides.explicit_default`). Otherwise: when a serving (not retiring)
    partition asks for `Default=YES` itself, it is the default and the charm adds none.
    Otherwise the oldest slurmd application's partition (lowest relation id, so the choice
    is stable while applications come and go) is the default, unless it set `Default=NO`.
    """
    if (explicit := overrides.explicit_default(wanted, partitions)) is not None:
        return explicit
    serving = {name: r for name, r in partitions.items() if not r.retiring}
    if any((r.partition or {}).get("default") is True for r in serving.values()):
        return None
    candidates = [
        (r.relation_id, name) for name, r in serving.items() if r.relation_id is not None
    ]
    if not candidates:
        return None
    oldest = min(candidates)[1]
    return None if "default" in (serving[oldest].partition or {}) else oldest


def accounting_settings(dbds: Sequence[DbdEntry]) -> dict[str, Any]:
    """slurm.conf's accounting keys for the slurmdbd daemons, primary first; none without any.

    The entries were validated when read from the databag (host and port per Slurm's grammar).
    """
    if not dbds:
        return {}
    primary = dbds[0]
    settings: dict[str, Any] = {
        "accountingstoragetype": "accounting_storage/slurmdbd",
        "accountingstoragehost": primary.host,
        "accountingstorageport": primary.port_or_default,
    }
    if len(dbds) > 1:
        settings["accountingstoragebackuphost"] = dbds[1].host
    return settings


def failover_settings(config: SlurmctldConfig) -> dict[str, Any]:
    """Where the state lives, the failover timers and, with network state, the primary programs.

    With network state every controller unit runs slurmctld, so each needs to hear when it
    becomes primary or stops being it (`primary_watch`).
    """
    settings: dict[str, Any] = {
        "statesavelocation": STATE_SAVE_LOCATION,
        "slurmctldtimeout": config.slurmctld_timeout,
        "messagetimeout": config.message_timeout,
    }
    if config.use_network_state:
        settings.update(
            statesavelocation=ha.NETWORK_STATE_SAVE_LOCATION,
            slurmctldprimaryonprog=primary_watch.PROGRAM,
            slurmctldprimaryoffprog=primary_watch.PROGRAM,
        )
    return settings


def render_slurm_conf(
    config: SlurmctldConfig,
    controllers: list[Controller],
    partitions: dict[str, PartitionEntry],
    dbds: Sequence[DbdEntry],
) -> SlurmConfig:
    """Render the complete slurm.conf for the cluster; `dbds` are the slurmdbd daemons."""
    conf = SlurmConfig.from_dict(
        {
            "clustername": config.cluster_name,
            "slurmctldhost": [c.slurmctld_host for c in controllers],
            "slurmuser": "slurm",
            "authtype": "auth/slurm",
            "credtype": "cred/slurm",
            "slurmctldparameters": {"enable_configless": True},
            "maxnodecount": config.max_node_count,
            "slurmctldlogfile": SLURMCTLD_LOG_FILE,
            "selecttype": "select/cons_tres",
            # slurmd units announce the GPUs they detect as `Gres=gpu:<model>:<n>` in --conf;
            # slurmctld accepts a node's GRES only of the types listed here.
            "grestypes": ["gpu"],
            **ISOLATION_PLUGINS[config.process_isolation],
            **JWT_AUTH,
            **accounting_settings(dbds),
            **failover_settings(config),
            **rebuild.conf_settings(config.reboot_timeout),
        }
    )
    conf = overrides.with_slurm_conf_parameters(conf, config.slurm_conf_parameters)
    default = default_partition(partitions, config.default_partition)
    for name, record in sorted(partitions.items()):
        settings = dict(record.partition or {})
        if name == default:
            settings["default"] = True
        elif default == config.default_partition:
            settings.pop("default", None)  # The operator's choice outranks the application's.
        if record.retiring:
            settings.pop("default", None)
            # Keep a retiring partition drained even if a later reconfigure re-reads the file.
            settings["state"] = "drain"
        conf.nodesets[name] = NodeSet.from_dict(dict(record.nodeset or {}))
        conf.partitions[name] = Partition.from_dict(settings)
    if (hidden := rebuild.partition_settings(partitions)) is not None:
        conf.partitions[rebuild.PARTITION] = Partition.from_dict(hidden)
    return conf


def render_cgroup_conf(config: SlurmctldConfig) -> CGroupConfig:
    """Render cgroup.conf, served to compute nodes by configless slurmctld."""
    cgroup = CGroupConfig.from_dict({"cgroupplugin": CGROUP_PLUGIN[config.process_isolation]})
    return overrides.with_cgroup_parameters(cgroup, config.cgroup_parameters)


def render_gres_conf() -> GresConfig:
    """Render gres.conf, served configless: every slurmd finds its NVIDIA GPUs itself.

    Slurm 24.11's gpu/nvidia plugin reads the driver's /proc and /sys files and needs no
    NVIDIA library; on a machine without the driver it finds nothing, so CPU nodes are
    unaffected. A node's `Gres=` count comes from `slurmd -C` (the slurmd charm).
    """
    return GresConfig.from_dict({"autodetect": "nvidia"})


def partition_has_jobs(name: str) -> bool:
    """Whether jobs are still running (or finishing) in a partition.

    Pending jobs do not count: nothing will run them once the partition's nodes leave. When
    Slurm cannot be asked, assume there are jobs: removing a busy partition is the worse error.
    """
    return _has_jobs(partition_jobs_query(name), f"partition {name}")


def node_has_jobs(name: str) -> bool:
    """Whether jobs are still running (or finishing) on a node; True when Slurm cannot say."""
    return _has_jobs(node_jobs_query(name), f"node {name}")


def partition_jobs_query(name: str) -> list[str]:
    """`squeue` listing a partition's busy jobs: it prints nothing once the partition is idle."""
    return _jobs_query(f"--partition={name}")


def node_jobs_query(name: str) -> list[str]:
    """`squeue` listing the busy jobs of a node: it prints nothing once the node is idle."""
    return _jobs_query(f"--nodelist={name}")


def _jobs_query(selection: str) -> list[str]:
    return [
        "squeue",
        "--noheader",
        "--format=%i",
        selection,
        f"--states={','.join(BUSY_JOB_STATES)}",
    ]


def _has_jobs(argv: list[str], what: str) -> bool:
    try:
        result = host.run(argv, timeout=SQUEUE_TIMEOUT)
    except SlurmOpsError as e:
        logger.warning("cannot list jobs of %s: %s", what, e.stderr or e)
        return True
    return bool(result.stdout.strip())


def order_controllers(previous: list[str], present: list[str]) -> list[str]:
    """Keep the controllers' join order: known units first, newcomers appended.

    `previous` is the order recorded so far (unit names), `present` the units that exist now.
    The first entry is the primary controller.
    """

    def unit_number(name: str) -> int:
        return int(name.rsplit("/", 1)[-1])

    kept = [name for name in previous if name in present]
    newcomers = sorted((name for name in present if name not in kept), key=unit_number)
    return kept + newcomers
