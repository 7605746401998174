"""The operator's own slurm.conf and cgroup.conf parameters.

`slurm-conf-parameters` and `cgroup-parameters` hold `key=value` lines, one per line; blank
lines and lines starting with `#` are ignored. They are read by hpc_libs' one parser
(`hpc_libs.slurm.parameters`) with this module's policies (`SLURM_CONF_PARAMETERS`,
`CGROUP_PARAMETERS`). Each line is checked on its own, and the first bad one is refused
naming its key:

* the key must be one slurmutils' model of the file knows (any case, as Slurm reads it),
  given once, not one the charm sets itself (`SLURM_CONF_OWNED`, `CGROUP_CONF_OWNED`), and
  one Slurm's grammar admits (`hpc_libs.slurm.grammar.admitted`: an allow-list of the keys
  whose values have a rule; the grammar module says which and why);
* the value must obey Slurm's grammar for the key (`hpc_libs.slurm.grammar`: one token, no
  whitespace, quote, `#` or backslash, plus the key's own rule);
* slurmutils must read it and write it back exactly as given, so what slurm.conf holds is
  what the operator wrote: a value can never become a second key, a second line, an
  `Include` or a node or partition definition.

There is no line continuation (a backslash is refused) and no way to name a node, a node
set or a partition. The accepted lines are merged into what the charm renders; the charm's
own keys always win (`with_slurm_conf_parameters`).
"""

from collections.abc import Callable, Mapping
from typing import Any

from hpc_libs.errors import ConfigError
from hpc_libs.slurm import grammar, parameters
from hpc_libs.slurm.parameters import owned_by
from hpc_libs.slurm.ports import DAEMON_PORTS
from slurmutils import CGroupConfig, SlurmConfig

SLURM_CONF_OWNED: Mapping[str, str] = {
    **owned_by(
        "is the charm's: it writes the node sets, partitions and nodes",
        "NodeSet",
        "PartitionName",
        "NodeName",
        "DownNodes",
        "FrontendName",
        "Include",
    ),
    **owned_by(
        "is the charm's: the controllers are the slurmctld units", "SlurmctldHost", "SlurmctldAddr"
    ),
    **owned_by(
        "is the charm's: it sets up authentication (auth/slurm, auth/jwt for tokens)",
        "AuthType",
        "AuthAltTypes",
        "AuthAltParameters",
        "AuthInfo",
        "CredType",
    ),
    **owned_by(
        "is the charm's: the daemons' users own the key and state it writes",
        "SlurmUser",
        "SlurmdUser",
    ),
    **owned_by(
        "is the charm's: it publishes and opens the daemons' ports",
        "SlurmctldPort",
        "SlurmdPort",
    ),
    **owned_by(
        "is refused: only a restart applies TCP listening settings, and the charm applies "
        "slurm-conf-parameters with scontrol reconfigure",
        "CommunicationParameters",
    ),
    **owned_by(
        "is the charm's: the integration with slurmdbd sets accounting",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStorageBackupHost",
        "AccountingStorageExternalHost",
        "AccountingStoragePort",
        "AccountingStorageUser",
        "AccountingStoragePass",
        "AccountingStorageParameters",
    ),
    **owned_by(
        "is the charm's: it keeps the state there (use-network-state)",
        "StateSaveLocation",
        "SlurmctldPrimaryOnProg",
        "SlurmctldPrimaryOffProg",
    ),
    **owned_by(
        "is the charm's: the process-isolation option sets it",
        "ProctrackType",
        "TaskPlugin",
        "JobAcctGatherType",
    ),
    **owned_by("is the charm's: GPU nodes need select/cons_tres", "SelectType"),
    **owned_by(
        "is refused: slurm.conf is served to every node and readable by every user, so it "
        "holds no password",
        "JobCompPass",
    ),
    **owned_by("is the charm's: slurmctld logs there", "SlurmctldLogFile"),
    **owned_by(
        "is the charm's: rebuild-nodes reboots nodes with the slurmd charm's program",
        "RebootProgram",
    ),
    "ResumeTimeout": "is the charm's: use the reboot-timeout option",
    "HealthCheckProgram": "is the charm's: the slurmd charm's node health check",
    "HealthCheckInterval": "is the charm's: use the health-check-interval option",
    "PriorityWeightPartition": (
        "is the charm's: it gives the rebuild partition's jobs the whole partition weight, so "
        "each runs next on its node (user partitions keep their order)"
    ),
    "EnforcePartLimits": (
        "is the charm's: ALL refuses a user's job naming the root-only rebuild partition, "
        "even in a list of partitions"
    ),
    "ClusterName": "is the charm's: use the cluster-name option",
    "MaxNodeCount": "is the charm's: use the max-node-count option",
    "SlurmctldTimeout": "is the charm's: use the slurmctld-timeout option",
    "MessageTimeout": "is the charm's: use the message-timeout option",
}
"""slurm.conf keys refused from the operator, with why (most are the charm's)."""

CGROUP_CONF_OWNED: Mapping[str, str] = {
    "CgroupPlugin": "is the charm's: the process-isolation option sets it"
}
"""cgroup.conf keys the charm sets itself, with why."""

OWNED_ITEMS: Mapping[str, Mapping[str, str]] = {
    "slurmctldparameters": {"enable_configless": "is the charm's: it serves the configuration"},
}
"""Items of option-list keys the charm sets itself: the operator may set the key's others."""


def _union(operator: Any, charm: Any) -> Any:
    """Merge an option list (a dict) or a plain list: the operator's items and the charm's."""
    if isinstance(operator, dict) and isinstance(charm, dict):
        return {**operator, **charm}
    if isinstance(operator, list) and isinstance(charm, list):
        return [*operator, *(item for item in charm if item not in operator)]
    return charm


COMBINED: Mapping[str, Callable[[Any, Any], Any]] = {
    "slurmctldparameters": _union,
    "grestypes": _union,
    "accountingstorageenforce": _union,
}
"""Keys both the charm and the operator set, merged: the charm's items are always there.

AccountingStorageEnforce: with an `accounts` document the charm enforces
`associations,limits,qos`, and the operator's items (`safe`, `wckeys`, `nojobs`...) are
added; without one the operator's value is the whole key (their own associations)."""


SLURM_PORTS = DAEMON_PORTS


SLURM_CONF_PARAMETERS = parameters.Policy(
    SlurmConfig, separator="line", owned=SLURM_CONF_OWNED, owned_items=OWNED_ITEMS, exact=True
)
CGROUP_PARAMETERS = parameters.Policy(
    CGroupConfig, separator="line", owned=CGROUP_CONF_OWNED, exact=True
)


def slurm_conf_parameters(text: str) -> dict[str, Any]:
    """Parse `slurm-conf-parameters` into slurmutils slurm.conf fields.

    Raises:
        ConfigError: A line is refused; `key` names its key.

    """
    fields = parameters.parse(SLURM_CONF_PARAMETERS, text)
    first = int(fields.get("firstjobid", 1))
    last = int(fields.get("maxjobid", grammar.DEFAULT_MAX_JOB_ID))
    if first > last:
        key = "FirstJobId" if "firstjobid" in fields else "MaxJobId"
        raise ConfigError(
            f"FirstJobId {first} is above MaxJobId {last} (Slurm's default MaxJobId is "
            f"{grammar.DEFAULT_MAX_JOB_ID}): slurmctld would not start",
            key=key,
        )
    if (ports := _srun_ports(fields)) is not None:
        first, last = ports
        if first <= SLURM_PORTS[1] and last >= SLURM_PORTS[0]:
            raise ConfigError(
                f"SrunPortRange {first}-{last} holds Slurm's own ports "
                f"{SLURM_PORTS[0]}-{SLURM_PORTS[1]}, which the daemons listen on",
                key="SrunPortRange",
            )
    return fields


def srun_port_range(fields: Mapping[str, Any]) -> tuple[int, int] | None:
    """Return the first and last port of the operator's `SrunPortRange`, None when unset.

    `fields` are the parsed `slurm-conf-parameters` (the config model holds them).
    """
    return _srun_ports(fields)


def _srun_ports(fields: Mapping[str, Any]) -> tuple[int, int] | None:
    value = fields.get("srunportrange")
    return None if value is None else grammar.port_range_bounds(str(value))


def cgroup_parameters(text: str) -> dict[str, Any]:
    """Parse `cgroup-parameters` into slurmutils cgroup.conf fields.

    Raises:
        ConfigError: A line is refused; `key` names its key.

    """
    return parameters.parse(CGROUP_PARAMETERS, text)


def with_slurm_conf_parameters(conf: SlurmConfig, fields: Mapping[str, Any]) -> SlurmConfig:
    """Return the charm's slurm.conf with the operator's parsed `slurm-conf-parameters` added.

    The charm's keys win; an option list both set (`COMBINED`) holds the items of both.
    """
    return SlurmConfig.from_dict(_merge(fields, conf.dict()))


def with_cgroup_parameters(cgroup: CGroupConfig, fields: Mapping[str, Any]) -> CGroupConfig:
    """Return the charm's cgroup.conf with the operator's parsed `cgroup-parameters` added."""
    return CGroupConfig.from_dict(_merge(fields, cgroup.dict()))


def _merge(operator: Mapping[str, Any], charm: Mapping[str, Any]) -> dict[str, Any]:
    """Return the charm's fields, then the operator's others: a key both set is the charm's.

    Unless it is in `COMBINED`: then it holds the items of both.
    """
    merged = dict(charm)
    for key, value in operator.items():
        if key not in charm:
            merged[key] = value
        elif key in COMBINED:
            merged[key] = COMBINED[key](value, charm[key])
    return merged
