"""Every slurm.conf value the option check accepts goes through the real writer unchanged.

`slurm-conf-parameters` is checked key by key (`overrides`); the writer is slurmutils behind
`SlurmctldManager.config` (issue 20, High 3 for slurm.conf). For every key the grammar admits,
each accepted example is merged into the charm's slurm.conf, written and read back: it must
come back as the same field, never as a `ConfigError` or `ModelError` at write time.
"""

from pathlib import Path

import overrides
import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.slurm import grammar
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.text import yes_no_as_literals
from slurmutils import SlurmConfig

PROBES = ("1", "60", "yes", "0", "/etc/slurm/x", "a", "1-0", "UNLIMITED", "infinite", "10.0.0.1")
"""Values tried for every key: integers, a boolean, a path, a name, a time, host, unlimited."""

EXAMPLES = {  # Keys whose values the probes below do not cover.
    "BcastParameters": "destdir=/tmp",
    "DependencyParameters": "kill_invalid_depend",
    "JobAcctGatherFrequency": "task=30",
    "JobAcctGatherParams": "usepss",
    "JobCompParams": "flush_timeout=30",
    "LaunchParameters": "use_interactive_step",
    "MpiParams": "ports=12000-12999",
    "PreemptParameters": "strict_order",
    "ScronParameters": "enable",
    "SchedulerParameters": "bf_interval=45,bf_continue",
    "SelectTypeParameters": "cr_core_memory",
    "SlurmctldParameters": "idle_on_node_suspend",
    "SlurmdParameters": "config_overrides",
    "TaskPluginParam": "cores",
    "TopologyParam": "dragonfly",
    "X11Parameters": "home_xauthority",
    "AccountingStorageEnforce": "associations,limits",
    "AccountingStoreFlags": "job_comment",
    "CliFilterPlugins": "cli_filter/lua",
    "DebugFlags": "backfill,gres",
    "CpuFreqGovernors": "ondemand,performance",
    "HealthCheckNodeState": "any",
    "JobSubmitPlugins": "lua",
    "PriorityFlags": "max_tres",
    "PrivateData": "jobs,usage",
    "PrologFlags": "alloc,contain",
    "PropagateResourceLimits": "none",
    "PropagateResourceLimitsExcept": "memlock",
    "ReconfigFlags": "keeppartstate",
    "SuspendExcStates": "down,drain",
    "MaxDBDMsgs": "20000",
    "AcctGatherEnergyType": "acct_gather_energy/rapl",
    "AcctGatherFilesystemType": "acct_gather_filesystem/lustre",
    "AcctGatherInterconnectType": "acct_gather_interconnect/ofed",
    "AcctGatherProfileType": "acct_gather_profile/hdf5",
    "JobCompType": "jobcomp/filetxt",
    "JobContainerType": "job_container/tmpfs",
    "MCSPlugin": "mcs/user",
    "SwitchType": "switch/hpe_slingshot",
    "SlurmctldDebug": "info",
    "SlurmctldSyslogDebug": "error",
    "SlurmdDebug": "debug",
    "SlurmdSyslogDebug": "quiet",
    "LogTimeFormat": "iso8601_ms",
    "MpiDefault": "pmix",
    "PreemptType": "preempt/qos",
    "PriorityType": "priority/multifactor",
    "PriorityUsageResetPeriod": "monthly",
    "SchedulerType": "sched/backfill",
    "SrunPortRange": "60001-63000",
    "Licenses": "fluent:30,ansys:2",
    "PriorityWeightTRES": "CPU=1000,Mem=2000",
}

SLURMUTILS_REFUSES = frozenset(
    {"RebootProgram", "PreemptMode", "SuspendExcNodes", "TopologyPlugin"}
)
"""Admitted by the grammar, but slurmutils cannot write any value back as given (it quotes
RebootProgram, wants lists or host maps for the others): the option check refuses them all."""

CHARM_OWNED = frozenset(grammar.SLURM_CONF) & frozenset(overrides.SLURM_CONF_OWNED)
"""Admitted by the grammar (Slurm's own rules, in hpc_libs) but set by the slurmctld charm,
so its option check refuses them (the rolling rebuild's keys)."""

CHARM_CONF = {
    "clustername": "charmed-hpc",
    "slurmctldhost": ["ctl0(192.0.2.0)"],
    "slurmctldparameters": {"enable_configless": True},
    "grestypes": ["gpu"],
}


def accepted(key: str) -> list[str]:
    values = [EXAMPLES[key]] if key in EXAMPLES else []
    for value in (*values, *PROBES):
        try:
            overrides.slurm_conf_parameters(f"{key}={value}")
        except ConfigError:
            continue
        values.append(value)
    return list(dict.fromkeys(values))


def test_every_admitted_key_has_an_accepted_example_or_is_named_as_refused():
    without = {key for key in grammar.SLURM_CONF if not accepted(key)}

    assert without == SLURMUTILS_REFUSES | CHARM_OWNED


@pytest.mark.parametrize("key", sorted(set(grammar.SLURM_CONF) - SLURMUTILS_REFUSES - CHARM_OWNED))
def test_accepted_values_reach_slurm_conf_through_the_writer_unchanged(
    key: str, tmp_path: Path, machine
):
    config = SlurmctldManager(tmp_path).config
    for value in accepted(key):
        fields = overrides.slurm_conf_parameters(f"{key}={value}")
        conf = SlurmConfig.from_dict(dict(CHARM_CONF))
        conf = overrides.with_slurm_conf_parameters(conf, fields)

        config.write(conf)

        written = yes_no_as_literals(config.path.read_text()).splitlines()
        line = yes_no_as_literals(f"{key.lower()}={value}")
        loaded = config.load().dict()
        if key.lower() in overrides.COMBINED:  # the charm's items are merged in
            prefix = f"{key.lower()}="
            merged = next(w for w in written if w.startswith(prefix)).removeprefix(prefix)
            assert set(value.split(",")) <= set(merged.split(","))
        else:
            assert line in written, value
            assert {k: loaded[k] for k in fields} == fields
