"""What the controller's Slurm configuration should be, derived from charm state.

Everything slurm.conf holds is rendered from scratch on every reconcile: the charm's options,
the ordered controllers (the leader alone without network state), the partitions that slurmd
applications publish, the slurmdbd daemons (accounting; its enforcement with an `accounts`
document, `associations.conf_settings`) and the JWT key file
(`AuthAltTypes=auth/jwt`). Comparing the rendering with the file on disk is what decides
whether anything is written and whether `scontrol reconfigure` runs, so a compute unit
joining (which changes none of these inputs) never touches slurm.conf.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import associations
import future_nodes
import native_metrics
import overrides
import partitions as partitions_module
import rebuild
from config import SlurmctldConfig
from controllers import slurmctld_host
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, PartitionEntry
from hpc_libs.interfaces.slurmdbd import DbdEntry
from hpc_libs.slurm.base import HEALTH_CHECK_PROGRAM, JWT_KEY_NAME
from slurmutils import CGroupConfig, GresConfig, SlurmConfig

LOG_DIR = "var/log/slurm"  # Relative to the manager's root; the charm creates it.
SLURMCTLD_LOG_FILE = f"/{LOG_DIR}/slurmctld.log"

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
# What `process-isolation=cgroup` confines by default (Slurm's own default for each is `no`:
# jobs tracked, not confined): a job's cores, its RAM (`--mem`), and its devices (GPUs not
# allocated to it are hidden). The operator's `cgroup-parameters` override each of them.
CONFINEMENT: dict[str, dict[str, Any]] = {
    "cgroup": {"constraincores": True, "constrainramspace": True, "constraindevices": True},
    "none": {},
}
# slurm.conf defaults the operator's `slurm-conf-parameters` override. Slurm's own
# ReturnToService is 0: a node slurmctld marked DOWN "Not responding" (its slurmd dead or cut
# off for SlurmdTimeout) would stay DOWN after its slurmd registers again, until an operator
# resumes it. 1 returns it at that registration, and only when its reason is still Slurm's own
# "Not responding": an operator's drain or down replaces that reason and stays.
# SchedulerParameters' batch_sched_delay (Slurm's default 3 s): what a node's registration, a
# node update or a submission asks of the main scheduler runs at slurmctld's next background
# tick (every second) only once this many seconds passed since that path's last pass. A new
# dynamic node's waiting jobs then started up to 3 s after it registered (scale from zero,
# benchmarks/README.md); 1 keeps one such pass a second at most.
OPERATOR_DEFAULTS: dict[str, Any] = {
    "returntoservice": 1,
    "schedulerparameters": {"batch_sched_delay": 1},
}
JWT_KEY_FILE = f"/etc/slurm/{JWT_KEY_NAME}"  # SlurmctldManager.jwt_key writes it.
# Tokens (`scontrol token`, slurmrestd's rest_auth/jwt) are accepted besides auth/slurm.
JWT_AUTH: dict[str, Any] = {
    "authalttypes": ["auth/jwt"],
    "authaltparameters": {"jwt_key": JWT_KEY_FILE},
}


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


def failover_settings(
    config: SlurmctldConfig, placement: Mapping[str, Any], slurmctld_timeout: int | None = None
) -> dict[str, Any]:
    """Return the failover timers, and where the state lives as placement says (`placement`).

    `slurmctld_timeout` replaces the configured one while the controllers upgrade
    (`major_upgrade.upgrade_timeout`).

    With network state every controller unit runs slurmctld, so each needs to hear when it
    becomes primary or stops being it (`primary_watch`): placement names the programs too.
    """
    settings: dict[str, Any] = {
        "statesavelocation": placement["statesavelocation"],
        "slurmctldtimeout": slurmctld_timeout or config.slurmctld_timeout,
        "messagetimeout": config.message_timeout,
    }
    settings.update(placement)
    return settings


def health_settings(config: SlurmctldConfig) -> dict[str, Any]:
    """slurm.conf's keys for the slurmd charm's node health check (its README: Node health).

    slurmd runs the program at its start and every `HealthCheckInterval` s (0: at start only).
    """
    return {
        "healthcheckprogram": HEALTH_CHECK_PROGRAM,
        "healthcheckinterval": config.health_check_interval,
        "healthchecknodestate": config.health_check_node_state.split(","),
    }


def render_slurm_conf(
    config: SlurmctldConfig,
    controllers: list[ControllerHost],
    partitions: dict[str, PartitionEntry],
    dbds: Sequence[DbdEntry],
    placement: Mapping[str, Any],
    *,
    native_metrics_on: bool = False,
    slurmctld_timeout: int | None = None,
) -> SlurmConfig:
    """Render the complete slurm.conf for the cluster; `dbds` are the slurmdbd daemons.

    `placement` holds the keys of where the state lives (`placement.Placement.conf_settings`);
    `native_metrics_on` adds Slurm's own metrics endpoint (`native_metrics.enabled`).
    """
    conf = SlurmConfig.from_dict(
        {
            "clustername": config.cluster_name,
            "slurmctldhost": [slurmctld_host(c) for c in controllers],
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
            **associations.conf_settings(config, dbds),
            **failover_settings(config, placement, slurmctld_timeout),
            **rebuild.conf_settings(config.reboot_timeout),
            **health_settings(config),
            **native_metrics.conf_settings(native_metrics_on, config),
        }
    )
    operator = {**OPERATOR_DEFAULTS, **config.slurm_conf_parameters}
    conf = overrides.with_slurm_conf_parameters(conf, operator)
    default = partitions_module.default_partition(partitions, config.default_partition)
    for name, record in sorted(partitions.items()):
        changes: dict[str, Any] = {}
        if name == default:
            changes["default"] = True
        elif default == config.default_partition:
            changes["default"] = None  # The operator's choice outranks the application's.
        if record.retiring:
            # Keep a retiring partition drained even if a later reconfigure re-reads the file.
            changes.update(default=None, state="drain")
        conf.partitions[name], conf.nodesets[name] = record.spec.named(name, **changes)
    for node_name, node in future_nodes.placeholders(config.future_nodes, partitions).items():
        conf.nodes[node_name] = node
    if (hidden := rebuild.hidden_partition(partitions)) is not None:
        conf.partitions[rebuild.PARTITION] = hidden
    return conf


def render_cgroup_conf(config: SlurmctldConfig) -> CGroupConfig:
    """Render cgroup.conf, served to compute nodes by configless slurmctld."""
    cgroup = CGroupConfig.from_dict({"cgroupplugin": CGROUP_PLUGIN[config.process_isolation]})
    fields = {**CONFINEMENT[config.process_isolation], **config.cgroup_parameters}
    return overrides.with_cgroup_parameters(cgroup, fields)


def render_gres_conf() -> GresConfig:
    """Render gres.conf, served configless: every slurmd finds its NVIDIA GPUs itself.

    Slurm 24.11's gpu/nvidia plugin reads the driver's /proc and /sys files and needs no
    NVIDIA library; on a machine without the driver it finds nothing, so CPU nodes are
    unaffected. A node's `Gres=` count comes from `slurmd -C` (the slurmd charm).
    """
    return GresConfig.from_dict({"autodetect": "nvidia"})
