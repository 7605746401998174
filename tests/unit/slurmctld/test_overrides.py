"""The operator's slurm.conf and cgroup.conf parameters: parsing, refusals, merging.

Pure functions of the slurmctld charm's `overrides` module; the charm's scenarios are in
test_overrides_charm.py.
"""

import overrides
import partitions as partitions_module
import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.slurm import grammar, parameters
from hpc_libs.slurm.partition import PartitionSpec
from hypothesis import given, settings
from hypothesis import strategies as st
from ops import testing
from slurmutils import CGroupConfig, SlurmConfig

CHARM_CONF = {
    "clustername": "charmed-hpc",
    "slurmctldhost": ["ctl0(192.0.2.0)"],
    "slurmctldparameters": {"enable_configless": True},
    "grestypes": ["gpu"],
}


def refusal(text: str, parse=None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        (parse or overrides.slurm_conf_parameters)(text)
    return caught.value


def rendered(text: str) -> list[str]:
    conf = overrides.with_slurm_conf_parameters(
        SlurmConfig.from_dict(dict(CHARM_CONF)), overrides.slurm_conf_parameters(text)
    )
    return str(conf).splitlines()


# Accepted input.


def test_lines_become_fields_comments_and_blank_lines_ignored():
    text = """
# Backfill every 45 s.
SchedulerParameters=bf_interval=45,bf_continue
  MaxJobCount=20000
srunportrange=60001-63000
DisableRootJobs=YES
"""
    assert overrides.slurm_conf_parameters(text) == {
        "schedulerparameters": {"bf_interval": 45, "bf_continue": True},
        "maxjobcount": 20000,
        "srunportrange": "60001-63000",
        "disablerootjobs": True,
    }


def test_empty_text_sets_nothing():
    assert overrides.slurm_conf_parameters("") == {}
    assert overrides.cgroup_parameters("\n# nothing\n\n") == {}


def test_merged_file_keeps_the_charms_keys_and_adds_the_operators():
    lines = rendered("MaxJobCount=20000\nSchedulerParameters=bf_interval=45")

    assert lines == [
        "clustername=charmed-hpc",
        "slurmctldhost=ctl0(192.0.2.0)",
        "slurmctldparameters=enable_configless",
        "grestypes=gpu",
        "maxjobcount=20000",
        "schedulerparameters=bf_interval=45",
    ]


def test_slurmctld_parameters_and_gres_types_merge_with_the_charms_items():
    lines = rendered("SlurmctldParameters=idle_on_node_suspend\nGresTypes=shard,gpu")

    assert "slurmctldparameters=idle_on_node_suspend,enable_configless" in lines
    assert "grestypes=shard,gpu" in lines


def test_cgroup_parameters_merge_but_the_plugin_stays_the_charms():
    charm = CGroupConfig.from_dict({"cgroupplugin": "disabled"})

    cgroup = overrides.with_cgroup_parameters(
        charm, overrides.cgroup_parameters("ConstrainCores=yes\nAllowedRAMSpace=95")
    )

    assert str(cgroup).splitlines() == [
        "cgroupplugin=disabled",
        "constraincores=yes",
        "allowedramspace=95",
    ]


# Refusals: each names the key.


@pytest.mark.parametrize(
    "key",
    [
        "SlurmctldHost",
        "AuthType",
        "AuthAltTypes",
        "AuthAltParameters",
        "CredType",
        "StateSaveLocation",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStoragePort",
        "JobAcctGatherType",
        "ClusterName",
        "NodeSet",
        "PartitionName",
        "NodeName",
        "Include",
        "SlurmctldTimeout",
        "MessageTimeout",
        "ProctrackType",
        "TaskPlugin",
        "MaxNodeCount",
        "SlurmctldPort",
        "CommunicationParameters",
        "JobCompPass",
        "RebootProgram",
        "ResumeTimeout",
        "PriorityWeightPartition",
        "EnforcePartLimits",
        "HealthCheckProgram",
        "HealthCheckInterval",
    ],
)
def test_keys_the_charm_owns_are_refused_by_name(key: str):
    error = refusal(f"MaxJobCount=10\n{key.upper()}=x")

    assert error.key == key  # named as Slurm spells it, whatever the operator's case
    assert error.message.startswith(f"{key} is ")


@pytest.mark.parametrize(
    ("line", "owner"),
    [
        ("ResumeTimeout=600", "reboot-timeout option"),
        ("PriorityWeightPartition=1", "rebuild partition"),
        ("EnforcePartLimits=NO", "rebuild partition"),
    ],
)
def test_rebuild_keys_are_refused_naming_what_sets_them(line: str, owner: str):
    """The charm renders them after the operator's lines: accepted, they would be replaced."""
    error = refusal(line)

    assert owner in error.message


def test_the_configless_item_of_slurmctld_parameters_is_refused():
    error = refusal("SlurmctldParameters=idle_on_node_suspend,enable_configless")

    assert error.key == "SlurmctldParameters"
    assert "enable_configless" in error.message


def test_cgroup_plugin_is_refused():
    error = refusal("CgroupPlugin=cgroup/v2", overrides.cgroup_parameters)

    assert error.key == "CgroupPlugin"


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("Frobnicate=1", "Frobnicate", "unknown key"),
        ("MaxJobCount=10\nmaxjobcount=20", "MaxJobCount", "twice"),
        ("MaxJobCount=10 MinJobAge=5", "MaxJobCount", "one key=value per line"),
        ("MaxJobCount=1e5", "MaxJobCount", "whole number"),
        ("MaxJobCount=", "MaxJobCount", "empty"),
        ("MaxJobCount=10\\", "MaxJobCount", "'\\\\'"),
        ("SchedulerParameters=bf_interval=45 #x", "SchedulerParameters", "one key=value"),
        ('Prolog="/bin/x"', "Prolog", "not allowed"),
        ("Prolog=relative/path", "Prolog", "absolute path"),
        ("SrunPortRange=63000-60001", "SrunPortRange", "ends before"),
        ("srunportrange=6000-7000", "SrunPortRange", "holds Slurm's own ports 6817-6820"),
        ("SrunPortRange=6820-6830", "SrunPortRange", "holds Slurm's own ports"),
        (
            "SchedulerParameters=bf_interval=45,bf_interval=60",
            "SchedulerParameters",
            "would be written as",
        ),
        ("DebugFlags=NoSuchFlag", "DebugFlags", "is not one of"),
        ("Include /etc/slurm/other.conf", "Include", "line 1 is not one key=value"),
        ("NodeName=n1 CPUs=2", "NodeName", "the charm's"),
        ("#\n\nMax Job Count=1", "Max", "line 3 is not one key=value"),
        ("Nodes=ALL", "Nodes", "unknown key"),
    ],
)
def test_bad_lines_are_refused_naming_the_key(text: str, key: str, words: str):
    error = refusal(text)

    assert error.key == key
    assert words in error.message


def test_cgroup_values_are_checked_per_key():
    assert refusal("ConstrainCores=true", overrides.cgroup_parameters).key == "ConstrainCores"
    assert refusal("MemorySwappiness=101", overrides.cgroup_parameters).key == "MemorySwappiness"
    assert refusal("SlurmctldDebug=info", overrides.cgroup_parameters).message == (
        "unknown key SlurmctldDebug"
    )


# Values Slurm refuses (issue 20, Medium 7: each was accepted, then slurmctld failed to start).


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("PriorityDecayHalfLife=14days", "PriorityDecayHalfLife", "is not UNLIMITED"),
        ("PriorityMaxAge=abc", "PriorityMaxAge", "is not UNLIMITED"),
        ("PreemptExemptTime=yes", "PreemptExemptTime", "is not UNLIMITED"),
        ("PriorityCalcPeriod=0", "PriorityCalcPeriod", "is not between 1"),
        ("AcctGatherNodeFreq=65536", "AcctGatherNodeFreq", "is not between 0 and 65533"),
        ("FairShareDampeningFactor=70000", "FairShareDampeningFactor", "is not between 1"),
        ("GroupUpdateTime=65536", "GroupUpdateTime", "is not between"),
        ("JobCompPort=4294967296", "JobCompPort", "is not a port"),
        ("SuspendTime=4294967296", "SuspendTime", "is not between"),
        ("BcastExclude=abc", "BcastExclude", "absolute path"),
        ("PluginDir=lib/slurm", "PluginDir", "absolute path"),
        ("MaxStepCount=0", "MaxStepCount", "is not between 1"),
        ("MaxJobId=0", "MaxJobId", "is not between 1"),
        ("MaxJobId=67108864", "MaxJobId", "is not between 1 and 67108863"),
        ("FirstJobId=0", "FirstJobId", "is not between 1"),
        ("FirstJobId=100\nMaxJobId=50", "FirstJobId", "FirstJobId 100 is above MaxJobId 50"),
        ("FirstJobId=67043329", "FirstJobId", "Slurm's default MaxJobId is 67043328"),
    ],
)
def test_values_slurm_refuses_are_refused_naming_the_key(text: str, key: str, words: str):
    error = refusal(text)

    assert error.key == key
    assert words in error.message


def test_first_job_id_up_to_max_job_id_is_accepted():
    assert overrides.slurm_conf_parameters("FirstJobId=50\nMaxJobId=50") == {
        "firstjobid": 50,
        "maxjobid": 50,
    }


@pytest.mark.parametrize(
    "key",
    [
        "BurstBufferType",
        "NodeFeaturesPlugins",
        "MetricsType",
        "InteractiveStepOptions",
        "SlurmdSpoolDir",
        "SlurmctldPidFile",
        "CpuFreqDef",
        "SwitchParameters",
    ],
)
def test_keys_without_a_rule_are_not_admitted(key: str):
    error = refusal(f"{key}=x")

    assert error.key == key
    assert error.message.startswith(f"{key} is not admitted")


def test_every_key_slurmutils_knows_is_admitted_owned_or_named_as_refused():
    """The allow-list is the grammar's: no key passes with the token rule alone."""
    for key in parameters._known_keys(SlurmConfig):  # pyright: ignore[reportPrivateUsage]
        try:
            overrides.slurm_conf_parameters(f"{key}=x")
        except ConfigError:
            continue
        assert grammar.admitted(SlurmConfig, key), key


@pytest.mark.parametrize(
    "text",
    [
        "JobCompLoc=http://user:secret@es.example.org:9200/slurm",
        "JobCompLoc=https://token@es.example.org",
        "JobCompParams=url=http://u:p@h",
    ],
)
def test_credentials_in_a_url_are_refused_naming_the_key(text: str):
    error = refusal(text)

    assert error.key == text.partition("=")[0]
    assert "user or password" in error.message
    assert "secret" not in error.message


def test_a_url_without_credentials_is_accepted():
    fields = overrides.slurm_conf_parameters("JobCompLoc=http://es.example.org:9200/slurm")

    assert fields == {"jobcomploc": "http://es.example.org:9200/slurm"}


# No input can add a line, a key or a node/partition definition.

OPERATOR_KEYS = ["MaxJobCount", "SchedulerParameters", "Prolog", "DebugFlags", "SrunPortRange"]
NASTY = st.text(alphabet=st.sampled_from(list("aZ0=,#'\" \t\n\r\\/:-.[]()\x0b\x1c\u2028é")))


def _check_no_line_added(text: str) -> None:
    try:
        fields = overrides.slurm_conf_parameters(text)
    except ConfigError:
        return
    lines = rendered(text)
    keys = [line.partition("=")[0] for line in lines]
    assert len(lines) == len(CHARM_CONF) + len(set(fields) - set(CHARM_CONF))
    assert set(keys) == set(CHARM_CONF) | set(fields)
    assert not set(fields) & set(overrides.SLURM_CONF_OWNED)
    assert not {"nodename", "partitionname", "nodeset", "include"} & set(keys)
    # One token per line: nothing Slurm could read as a second key or a comment.
    assert all(len(line.split()) == 1 and not set("#'\"\\") & set(line) for line in lines)


@settings(max_examples=300, deadline=None)
@given(NASTY)
def test_no_text_adds_a_line_or_a_key(text: str):
    _check_no_line_added(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPERATOR_KEYS), NASTY), max_size=4))
def test_no_value_of_a_known_key_adds_a_line_or_a_key(pairs: list[tuple[str, str]]):
    _check_no_line_added("\n".join(f"{key}={value}" for key, value in pairs))


# The explicit default partition.


def entries(*names: str, retiring: str = "") -> dict[str, PartitionEntry]:
    return {
        name: PartitionEntry.serving(name, PartitionSpec()).model_copy(
            update={"retiring": name == retiring}
        )
        for name in names
    }


def test_explicit_default_names_a_serving_partition_only():
    partitions = entries("compute", "gpu", retiring="gpu")

    assert partitions_module.explicit_default("compute", partitions) == "compute"
    assert partitions_module.explicit_default("gpu", partitions) is None
    assert partitions_module.explicit_default("missing", partitions) is None
    assert partitions_module.explicit_default("", partitions) is None


@pytest.mark.parametrize(
    ("wanted", "integrated", "status"),
    [
        ("", [], None),
        ("compute", ["compute"], None),
        (
            "gpu",
            ["compute"],
            testing.BlockedStatus(
                "default-partition 'gpu' is no integrated slurmd application; the implicit "
                "default applies meanwhile"
            ),
        ),
        (
            "new",
            ["compute", "new"],
            testing.WaitingStatus(
                "default-partition: waiting for application 'new' to publish its partition; "
                "the implicit default applies meanwhile"
            ),
        ),
        (
            "old",
            ["compute", "old"],
            testing.BlockedStatus(
                "default-partition 'old' is being removed; the implicit default applies meanwhile"
            ),
        ),
    ],
)
def test_default_partition_status_says_why_it_is_not_the_default(wanted, integrated, status):
    partitions = list(entries("compute", "old", retiring="old").values())

    assert partitions_module.default_partition_status(wanted, partitions, integrated) == status
