"""slurmctld's `future-nodes`: FUTURE placeholders keep a partition with 0 units usable."""

import future_nodes
import pytest
from hpc_libs.errors import ConfigError
from ops import testing
from test_charm_slurmctld import RECONFIGURE, compute_relation, later, running, slurm_conf

parse = future_nodes.parse


def node_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("nodename")]


def test_placeholders_are_rendered_for_an_application_with_no_unit(
    ctx, machine, tmp_path, settled
):
    empty = compute_relation(units=0)
    state = settled(running(empty))
    assert node_lines(slurm_conf(tmp_path)) == []
    option = "compute=3 cpus=2 realmemory=1000\n# not yet integrated:\ngpu=2"

    out = ctx.run(ctx.on.config_changed(), later(state, empty, config={"future-nodes": option}))

    conf = slurm_conf(tmp_path)
    assert node_lines(conf) == [
        "nodename=compute_future[0-2] state=future features=compute cpus=2 realmemory=1000"
    ]
    assert "partitionname=compute nodes=compute default=YES" in conf.splitlines()
    assert "nodeset=compute feature=compute" in conf.splitlines()
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.ActiveStatus()


def test_an_application_that_never_had_a_unit_gets_its_partition(ctx, machine, tmp_path, settled):
    # Deployed with 0 units: no leader ever wrote the application's partition data.
    silent = testing.Relation("slurmd", remote_app_name="compute", remote_units_data={})
    state = settled(running(silent))
    assert "partitionname=compute" not in slurm_conf(tmp_path)

    ctx.run(ctx.on.config_changed(), later(state, silent, config={"future-nodes": "compute=2"}))

    lines = slurm_conf(tmp_path).splitlines()
    assert "partitionname=compute nodes=compute default=YES" in lines
    assert "nodeset=compute feature=compute" in lines
    assert "nodename=compute_future[0-1] state=future features=compute" in lines


def test_one_placeholder_is_a_plain_name():
    assert parse("compute=1") == {"compute": {"count": 1}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("compute=0", "compute: '0' is not a number from 1 to 4096"),
        ("compute=two", "compute: 'two' is not a number"),
        ("Compute=2", "'Compute' is not a slurmd application name"),
        ("compute=2\ncompute=3", "'compute' is given twice"),
        ("compute=2 gres=gpu:1", "compute: 'gres' is not one of cpus, realmemory, tmpdisk"),
        ("compute=2 cpus=-1", "compute cpus: '-1' is not a number"),
        ("compute=2 nodename=x", "'nodename' is not one of"),
        ("compute=2 cpus=65534", "compute cpus: '65534' is not a number from 1 to 65533"),
        ("compute=2 tmpdisk=4294967294", "'4294967294' is not a number from 1 to 4294967293"),
        (f"compute=2 realmemory={2**64 - 2}", "is not a number from 1 to 18446744073709551613"),
        ("compute=²", "compute: '²' is not a number"),
    ],
)
def test_bad_lines_are_refused_naming_the_key(text, message):
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert message in caught.value.message


def test_a_bad_option_blocks_and_keeps_the_last_file(ctx, machine, tmp_path, settled):
    state = settled(running(compute_relation(units=0), config={"future-nodes": "compute=2"}))
    applied = slurm_conf(tmp_path)

    out = ctx.run(
        ctx.on.config_changed(),
        later(state, compute_relation(units=0), config={"future-nodes": "compute=2 x=1"}),
    )

    assert isinstance(out.unit_status, testing.BlockedStatus)
    assert "'future-nodes'" in out.unit_status.message
    assert slurm_conf(tmp_path) == applied


def test_shapes_take_what_slurms_node_fields_hold():
    """CPUs a uint16, TmpDisk a uint32, RealMemory a uint64 (MB), below NO_VAL and INFINITE."""
    top = f"compute=1 cpus=65533 realmemory={2**64 - 3} tmpdisk=4294967293"

    assert parse(top) == {
        "compute": {"count": 1, "cpus": 65533, "realmemory": 2**64 - 3, "tmpdisk": 2**32 - 3}
    }


def test_placeholders_that_leave_no_room_for_the_units_block_naming_both_options(
    ctx, machine, tmp_path, settled
):
    """Every line counts: 300 + 213 placeholders and as many units need 1026 > 1024 places."""
    state = settled(running(compute_relation(units=1), config={"future-nodes": "compute=2"}))
    applied = slurm_conf(tmp_path)
    option = "compute=300\ngpu=213"

    out = ctx.run(
        ctx.on.config_changed(),
        later(state, compute_relation(units=1), config={"future-nodes": option}),
    )

    assert out.unit_status == testing.BlockedStatus(
        "invalid config option 'future-nodes': 513 placeholders and as many units need "
        "max-node-count 1026 or more (it is 1024): lower the counts or raise max-node-count"
    )
    assert slurm_conf(tmp_path) == applied


def test_placeholders_and_as_many_units_that_fit_are_rendered(ctx, machine, tmp_path, settled):
    state = settled(running(compute_relation(units=1)))
    config = {"future-nodes": "compute=6", "max-node-count": 12}

    out = ctx.run(ctx.on.config_changed(), later(state, compute_relation(units=1), config=config))

    assert "nodename=compute_future[0-5] state=future features=compute" in node_lines(
        slurm_conf(tmp_path)
    )
    assert "maxnodecount=12" in slurm_conf(tmp_path).splitlines()
    assert out.unit_status == testing.ActiveStatus()
