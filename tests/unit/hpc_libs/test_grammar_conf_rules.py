"""Rules for slurm.conf and cgroup.conf keys an operator sets (hpc_libs.slurm.grammar)."""

import pytest
from hpc_libs.slurm import grammar
from slurmutils import CGroupConfig, SlurmConfig


def known(model: type) -> set[str]:
    return {name.replace("_", "") for name in model.__annotations__}


@pytest.mark.parametrize(
    ("model", "rules"), [(SlurmConfig, grammar.SLURM_CONF), (CGroupConfig, grammar.CGROUP_CONF)]
)
def test_every_key_with_a_rule_is_one_slurmutils_knows(model, rules):
    assert {key.lower() for key in rules} <= known(model)


@pytest.mark.parametrize(
    "value", ["bf_interval=45", "bf_continue,bf_window=4320", "CPU=1000,GRES/gpu=3000"]
)
def test_option_lists_take_names_and_name_value_items(value):
    grammar.options(value)


@pytest.mark.parametrize(
    "value", ["", "a=1=2", "a,,b", "=1", "a=1 b=2", "a=1#", "a='1'", "a=\\", "a=1\nb=2"]
)
def test_option_lists_refuse_anything_else(value):
    with pytest.raises(ValueError):
        grammar.options(value)


def test_port_ranges():
    grammar.port_range("60001-63000")
    assert grammar.port_range_bounds("60001-63000") == (60001, 63000)
    for bad in ("63000-60001", "0-10", "1-65536", "60001", "60001-", "a-b", "1-2-3"):
        with pytest.raises(ValueError):
            grammar.port_range(bad)


def test_absolute_paths_and_decimals():
    grammar.absolute_path("/etc/slurm/prolog.d/*")
    grammar.decimal(100)("99.5")
    for rule, bad in (
        (grammar.absolute_path, "prolog.sh"),
        (grammar.decimal(100), "100.5"),
        (grammar.decimal(100), "-1"),
        (grammar.decimal(100), "1e2"),
    ):
        with pytest.raises(ValueError):
            rule(bad)


def test_check_value_names_the_slurm_conf_spelling():
    with pytest.raises(grammar.GrammarError) as caught:
        grammar.check_value(SlurmConfig, "maxjobcount", "0")

    assert caught.value.key == "MaxJobCount"
