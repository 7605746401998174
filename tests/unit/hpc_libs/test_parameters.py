"""hpc_libs.slurm.parameters: one parser for the operator's `key=value`, a policy per file."""

import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.slurm import parameters
from hpc_libs.slurm.parameters import Policy, owned_by
from slurmutils import Partition, SlurmConfig

PARTITION = Policy(Partition, owned=owned_by("is the charm's: it names it", "Nodes"))
SLURM_CONF = Policy(SlurmConfig, separator="line", exact=True)


def refusal(policy: Policy, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parameters.parse(policy, text)
    return caught.value


def test_an_owned_key_is_refused_in_one_wording_with_slurms_spelling():
    error = refusal(PARTITION, "MaxTime=60 nodes=x")

    assert (error.key, error.message) == ("Nodes", "Nodes is the charm's: it names it")


def test_the_first_bad_item_is_the_one_named():
    assert refusal(PARTITION, 'Hidden=maybe Features="a b"').key == "Hidden"
    assert refusal(PARTITION, "MaxTime=60 MaxTime=61").message == "MaxTime is given twice"


def test_blank_and_line_separators():
    assert parameters.parse(PARTITION, "MaxTime=60\nHidden=YES") == {
        "maxtime": 60,
        "hidden": True,
    }
    assert refusal(SLURM_CONF, "MaxJobCount=10 MinJobAge=5").message == (
        "MaxJobCount: one key=value per line, no whitespace in the value"
    )
    assert parameters.parse(SLURM_CONF, "# note\n\nMaxJobCount=10\n") == {"maxjobcount": 10}


def test_nodes_is_a_partition_key_though_a_slurm_conf_section():
    assert parameters.parse(Policy(Partition), "Nodes=a,b") == {"nodes": ["a", "b"]}
    assert refusal(SLURM_CONF, "Nodes=ALL").message == "unknown key Nodes"
