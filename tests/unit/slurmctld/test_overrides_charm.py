"""slurmctld scenarios: slurm-conf-parameters, cgroup-parameters, default-partition, ports."""

import json
from pathlib import Path

from ops import testing
from test_charm_slurmctld import RECONFIGURE, compute_relation, later, running, slurm_conf


def cgroup_conf(tmp_path: Path) -> str:
    return (tmp_path / "etc/slurm/cgroup.conf").read_text()


def partition_lines(tmp_path: Path) -> list[str]:
    """The slurmd applications' partitions (the hidden rebuild partition has its own tests)."""
    return [
        line
        for line in slurm_conf(tmp_path).splitlines()
        if line.startswith("partition") and not line.startswith("partitionname=rebuild ")
    ]


def test_slurm_conf_parameters_are_applied_with_one_reconfigure(ctx, machine, tmp_path, settled):
    state = settled(running())
    text = "# Tuning\nSchedulerParameters=bf_interval=45\nMaxJobCount=20000\n"

    out = ctx.run(ctx.on.config_changed(), later(state, config={"slurm-conf-parameters": text}))

    lines = slurm_conf(tmp_path).splitlines()
    assert "schedulerparameters=bf_interval=45" in lines
    assert "maxjobcount=20000" in lines
    assert "slurmctldparameters=enable_configless" in lines
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []
    assert out.unit_status == testing.ActiveStatus()


def test_a_node_down_not_responding_returns_at_its_registration_by_default(
    ctx, machine, tmp_path, settled
):
    # Slurm's default (0) leaves such a node DOWN after its slurmd is back (issue 37).
    settled(running())

    assert "returntoservice=1" in slurm_conf(tmp_path).splitlines()


def test_a_new_nodes_jobs_are_scheduled_within_a_second_by_default(
    ctx, machine, tmp_path, settled
):
    # Slurm's batch_sched_delay (3 s) held a registered node's jobs up to 3 s (scale from zero).
    settled(running())

    assert "schedulerparameters=batch_sched_delay=1" in slurm_conf(tmp_path).splitlines()


def test_the_operators_scheduler_parameters_replace_the_default(ctx, machine, tmp_path, settled):
    state = settled(running())
    config = {"slurm-conf-parameters": "SchedulerParameters=bf_continue,batch_sched_delay=5"}

    ctx.run(ctx.on.config_changed(), later(state, config=config))

    lines = slurm_conf(tmp_path).splitlines()
    assert "schedulerparameters=bf_continue,batch_sched_delay=5" in lines
    assert "schedulerparameters=batch_sched_delay=1" not in lines


def test_the_operator_chooses_return_to_service(ctx, machine, tmp_path, settled):
    state = settled(running())
    config = {"slurm-conf-parameters": "ReturnToService=0"}

    ctx.run(ctx.on.config_changed(), later(state, config=config))

    lines = slurm_conf(tmp_path).splitlines()
    assert "returntoservice=0" in lines
    assert "returntoservice=1" not in lines
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def kept_after(ctx, machine, tmp_path, settled, *, event, bad: str) -> testing.State:
    """Run `event` with `bad` parameters over valid ones: the file stays, unreconfigured."""
    state = settled(running(config={"slurm-conf-parameters": "MaxJobCount=20000"}))
    applied = slurm_conf(tmp_path)

    out = ctx.run(event, later(state, config={"slurm-conf-parameters": bad}))

    assert slurm_conf(tmp_path) == applied
    assert machine.ran(*RECONFIGURE) == []
    return out


def test_a_refused_key_blocks_naming_it_and_keeps_the_last_valid_file(
    ctx, machine, tmp_path, settled
):
    bad = "MaxJobCount=30000\nSlurmctldHost=evil(10.0.0.66)"

    out = kept_after(ctx, machine, tmp_path, settled, event=ctx.on.config_changed(), bad=bad)

    assert out.unit_status == testing.BlockedStatus(
        "invalid config option 'slurm-conf-parameters': SlurmctldHost is the charm's: the "
        "controllers are the slurmctld units"
    )
    assert machine.calls("restart") == []


def test_a_bad_value_blocks_naming_the_key_and_keeps_the_last_valid_file(
    ctx, machine, tmp_path, settled
):
    bad = "MaxJobCount=30000\nSchedulerParameters=bf_interval=45 PartitionName=all"

    out = kept_after(ctx, machine, tmp_path, settled, event=ctx.on.update_status(), bad=bad)

    assert isinstance(out.unit_status, testing.BlockedStatus)
    assert "'slurm-conf-parameters': SchedulerParameters:" in out.unit_status.message


SLURM_REFUSES = (
    "scontrol: error: You have to either have PriorityDecayHalfLife != 0 or "
    "PriorityUsageResetPeriod set to something or the priority plugin will result in rolling "
    "over.\nscontrol: fatal: Unable to process configuration file\n"
)


def test_a_file_slurm_refuses_is_not_written_and_blocks_quoting_slurm_until_fixed(
    ctx, machine, tmp_path, settled
):
    state = settled(running(config={"slurm-conf-parameters": "MaxJobCount=20000"}))
    applied = slurm_conf(tmp_path)
    keys = {p.name: p.read_bytes() for p in (tmp_path / "etc/slurm").iterdir()}
    machine.fail("scontrol", "--version", stderr=SLURM_REFUSES)
    cross = "MaxJobCount=30000\nPriorityDecayHalfLife=0"  # each value alone is valid

    out = ctx.run(ctx.on.config_changed(), later(state, config={"slurm-conf-parameters": cross}))

    assert out.unit_status == testing.BlockedStatus(
        "Slurm refuses the new slurm.conf (the old one is kept): You have to either have "
        "PriorityDecayHalfLife != 0 or PriorityUsageResetPeriod set to something or the "
        "priority plugin will result in rolling over."
    )
    assert slurm_conf(tmp_path) == applied
    assert {p.name: p.read_bytes() for p in (tmp_path / "etc/slurm").iterdir()} == keys
    assert machine.ran(*RECONFIGURE) == []
    assert machine.calls("restart") == []
    # Slurm accepts the fixed file at the next event, which applies it.
    machine.heal()
    fixed = "MaxJobCount=30000\nPriorityDecayHalfLife=7-0"
    out = ctx.run(ctx.on.config_changed(), later(out, config={"slurm-conf-parameters": fixed}))
    assert "prioritydecayhalflife=7-0" in slurm_conf(tmp_path).splitlines()
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.ActiveStatus()


def test_fixing_the_option_applies_it_with_one_reconfigure(ctx, machine, tmp_path, settled):
    state = settled(running())
    state = settled(later(state, config={"slurm-conf-parameters": "AuthType=auth/none"}))
    assert "maxjobcount" not in slurm_conf(tmp_path)

    fixed = later(state, config={"slurm-conf-parameters": "MaxJobCount=30000"})
    out = ctx.run(ctx.on.config_changed(), fixed)

    assert "maxjobcount=30000" in slurm_conf(tmp_path).splitlines()
    assert "authtype=auth/slurm" in slurm_conf(tmp_path).splitlines()
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.ActiveStatus()


def test_cgroup_parameters_reach_cgroup_conf_with_one_reconfigure(ctx, machine, tmp_path, settled):
    state = settled(running(config={"process-isolation": "none"}))
    config = {"process-isolation": "none", "cgroup-parameters": "ConstrainCores=yes"}

    ctx.run(ctx.on.config_changed(), later(state, config=config))

    assert cgroup_conf(tmp_path).splitlines() == ["cgroupplugin=disabled", "constraincores=yes"]
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def test_the_default_isolation_confines_cores_ram_and_devices(ctx, machine, tmp_path, settled):
    settled(running())

    assert cgroup_conf(tmp_path).splitlines() == [
        "cgroupplugin=autodetect",
        "constraincores=yes",
        "constrainramspace=yes",
        "constraindevices=yes",
    ]


def test_the_operator_overrides_a_default_confinement(ctx, machine, tmp_path, settled):
    state = settled(running())
    config = {"cgroup-parameters": "ConstrainDevices=no\nAllowedRAMSpace=95"}

    ctx.run(ctx.on.config_changed(), later(state, config=config))

    assert cgroup_conf(tmp_path).splitlines() == [
        "cgroupplugin=autodetect",
        "constraincores=yes",
        "constrainramspace=yes",
        "constraindevices=no",
        "allowedramspace=95",
    ]
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def test_no_isolation_confines_nothing(ctx, machine, tmp_path, settled):
    settled(running(config={"process-isolation": "none"}))

    assert cgroup_conf(tmp_path).splitlines() == ["cgroupplugin=disabled"]


def test_cgroup_plugin_is_refused_and_cgroup_conf_kept(ctx, machine, tmp_path, settled):
    state = settled(running())
    applied = cgroup_conf(tmp_path)

    out = ctx.run(
        ctx.on.config_changed(), later(state, config={"cgroup-parameters": "CgroupPlugin=x"})
    )

    assert out.unit_status == testing.BlockedStatus(
        "invalid config option 'cgroup-parameters': CgroupPlugin is the charm's: the "
        "process-isolation option sets it"
    )
    assert cgroup_conf(tmp_path) == applied


# The default partition.


def test_default_partition_outranks_an_application_asking_for_default(ctx, machine, tmp_path):
    oldest, asking = compute_relation("compute"), compute_relation("debug", default=True)
    gpu = compute_relation("gpu")
    state = running(oldest, asking, gpu, config={"default-partition": "gpu"})

    out = ctx.run(ctx.on.relation_changed(gpu), state)

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute",
        "partitionname=debug nodes=debug",
        "partitionname=gpu nodes=gpu default=YES",
    ]
    assert out.unit_status == testing.ActiveStatus()


def test_default_partition_change_moves_the_default_with_one_reconfigure(
    ctx, machine, tmp_path, settled
):
    oldest, newer = compute_relation("compute"), compute_relation("debug")
    state = settled(running(oldest, newer))

    ctx.run(
        ctx.on.config_changed(), later(state, oldest, newer, config={"default-partition": "debug"})
    )

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute",
        "partitionname=debug nodes=debug default=YES",
    ]
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def test_a_missing_default_partition_blocks_and_the_fallback_applies(ctx, machine, tmp_path):
    oldest, newer = compute_relation("compute"), compute_relation("debug")

    out = ctx.run(
        ctx.on.relation_changed(newer), running(oldest, newer, config={"default-partition": "gpu"})
    )

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute default=YES",
        "partitionname=debug nodes=debug",
    ]
    assert out.unit_status == testing.BlockedStatus(
        "default-partition 'gpu' is no integrated slurmd application; the implicit default "
        "applies meanwhile"
    )


def test_an_invalid_default_partition_name_blocks(ctx, machine, tmp_path):
    out = ctx.run(ctx.on.update_status(), running(config={"default-partition": "GPU x"}))

    assert isinstance(out.unit_status, testing.BlockedStatus)
    assert "'default-partition'" in out.unit_status.message


# Ports.


def test_the_controller_opens_slurmctlds_port(ctx, machine):
    ctx.run(ctx.on.update_status(), running())

    assert machine.opened_ports == ["6817/tcp"]


def test_the_srun_port_range_goes_to_compute_and_login_nodes_to_open(ctx, machine, settled):
    compute, login = compute_relation(), testing.Relation("login-node", remote_app_name="login")
    state = settled(running(compute, login))
    ranged = {"slurm-conf-parameters": "SrunPortRange=60001-63000"}

    out = ctx.run(ctx.on.config_changed(), later(state, compute, login, config=ranged))

    for relation in (compute, login):
        published = out.get_relation(relation.id).local_app_data
        assert json.loads(published["srun_port_range"]) == {"first": 60001, "last": 63000}
    assert machine.opened_ports == ["6817/tcp"]  # srun does not run on the controller.

    out = ctx.run(ctx.on.config_changed(), later(out, compute, login, config={}))

    for relation in (compute, login):
        assert json.loads(out.get_relation(relation.id).local_app_data["srun_port_range"]) is None
