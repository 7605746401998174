"""Scenarios: the cluster id as accounting comes, and the applied config's digest published.

Turning accounting on for a running cluster: slurmctld invented a cluster id without a
database (`<StateSaveLocation>/clustername`); slurmdbd assigns another, and slurmctld dies of
the mismatch at the reconfigure unless the leader deletes the file right before it.
"""

import json
import logging
import re
from pathlib import Path

import pytest
from hpc_libs.machine import host
from hpc_libs.slurm.base import ConfigFile
from ops import testing
from test_charm_slurmctld import RECONFIGURE, compute_relation, later, memory, running
from test_ha_charm import (
    controllers_answer,
    leader_wrote,
    mount,
    network_leader,
    peer,
    slurmctld_calls,
    standing_by,
)
from test_slurmctld_accounting_and_jwt import DBD, slurmdbd_relation

INVENTED_ID = "614"


def cluster_id_file(state_dir: Path) -> Path:
    """slurmctld's cluster id file as slurmctld wrote it when it started without a database."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "clustername"
    path.write_text(INVENTED_ID)
    return path


@pytest.fixture
def seen_at_reconfigure(machine, monkeypatch):
    """Whether `clustername` existed when each `scontrol reconfigure` ran (`watch(path)`).

    With `recreate=True` the reconfigure writes the file again, as a failed one does.
    """
    seen: list[bool] = []
    watched: dict[str, object] = {}

    def run(argv, **kwargs):
        path = watched.get("path")
        if isinstance(path, Path) and [str(a) for a in argv] == RECONFIGURE:
            seen.append(path.exists())
            if watched.get("recreate"):
                path.write_text(INVENTED_ID)
        return machine.run(argv, **kwargs)

    monkeypatch.setattr(host, "run", run)

    def watch(path: Path, *, recreate: bool = False) -> list[bool]:
        watched.update(path=path, recreate=recreate)
        return seen

    return watch


def accounting_comes(
    ctx, state: testing.State, *others: testing.RelationBase, **kwargs
) -> testing.State:
    """slurmdbd publishes its address to a controller integrated with it already.

    `others` and `kwargs` are the rest of the unit's state at that event (`later`).
    """
    relation = slurmdbd_relation(DBD, id=state.get_relations("slurmdbd")[0].id)
    event = ctx.on.relation_changed(relation, remote_unit=0)
    return ctx.run(event, later(state, relation, *others, **kwargs))


def local_state(tmp_path: Path) -> Path:
    return tmp_path / "var/lib/slurm/slurmctld"


# The cluster id when accounting comes.


def test_turning_accounting_on_deletes_the_invented_cluster_id_right_before_the_reconfigure(
    ctx, tmp_path, settled, seen_at_reconfigure, caplog
):
    state = settled(running(slurmdbd_relation()))
    path = cluster_id_file(local_state(tmp_path))
    seen = seen_at_reconfigure(path)
    caplog.set_level(logging.INFO)

    out = accounting_comes(ctx, state)

    assert seen == [False]
    assert not path.exists()
    assert f"deleted {path}" in caplog.text
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_a_failed_accounting_reconfigure_deletes_the_id_again_at_the_retry(
    ctx, machine, tmp_path, settled, seen_at_reconfigure
):
    state = settled(running(slurmdbd_relation()))
    path = cluster_id_file(local_state(tmp_path))
    seen = seen_at_reconfigure(path, recreate=True)
    machine.fail(*RECONFIGURE, stderr="fatal: CLUSTER ID MISMATCH.")

    state = accounting_comes(ctx, state)
    assert state.unit_status.name == "blocked"
    assert path.exists()  # The failed attempt wrote it again.
    machine.heal()

    out = ctx.run(ctx.on.update_status(), later(state, *state.get_relations("slurmdbd")))

    assert seen == [False, False]
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_a_stopped_controller_starting_with_accounting_forgets_the_invented_id(
    ctx, machine, tmp_path, settled
):
    state = settled(running(slurmdbd_relation()))
    path = cluster_id_file(local_state(tmp_path))
    machine.active.discard("slurmctld")  # It died of the mismatch.

    accounting_comes(ctx, state)

    assert machine.calls("start") == ["slurmctld"]
    assert not path.exists()


def test_the_id_is_never_deleted_through_a_link_planted_as_the_state_directory(
    ctx, tmp_path, settled
):
    state = settled(running(slurmdbd_relation()))
    outside = cluster_id_file(tmp_path / "outside")  # A file root must not delete.
    local = local_state(tmp_path)
    local.rename(tmp_path / "var/lib/slurm/slurmctld.mine")
    local.symlink_to(outside.parent)

    out = accounting_comes(ctx, state)

    assert outside.read_text() == INVENTED_ID
    assert out.unit_status.name == "blocked"
    assert "slurmctld is a symbolic link or not a directory" in out.unit_status.message


def test_once_accounting_is_applied_the_cluster_id_is_kept(
    ctx, machine, tmp_path, settled, seen_at_reconfigure
):
    state = accounting_comes(ctx, settled(running(slurmdbd_relation())))
    path = cluster_id_file(local_state(tmp_path))  # slurmdbd's id, written by slurmctld.
    seen = seen_at_reconfigure(path)
    relations = state.get_relations("slurmdbd")

    ctx.run(ctx.on.config_changed(), later(state, *relations, config={"max-node-count": 99}))

    assert seen == [True]
    assert path.read_text() == INVENTED_ID


ACCOUNTING = {
    "accountingstoragetype": "accounting_storage/slurmdbd",
    "accountingstoragehost": "10.0.0.5",
}


def test_a_backup_restarts_when_accounting_comes_and_for_later_changes(ctx, machine, shared_fs):
    """A standby with an invented cluster id would write it at its takeover and kill the next
    controller to start (CLUSTER ID MISMATCH, soak seed 74); a reloaded one has no id at all
    and waits for slurmdbd to take over. So it restarts, as accounting comes and after."""
    state = standing_by(ctx, machine, shared_fs)

    leader_wrote(shared_fs, **ACCOUNTING)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    machine.service_calls.clear()

    leader_wrote(shared_fs, maxnodecount=64, **ACCOUNTING)
    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


def test_a_leader_standing_by_restarts_its_own_slurmctld_when_accounting_comes(
    ctx, machine, shared_fs
):
    peers = peer((2, "ctl2", "10.0.0.2"), order=[2, 0])
    controllers_answer(machine, "ctl2", "ctl0")
    state = ctx.run(
        ctx.on.config_changed(), network_leader(peers, slurmdbd_relation(), planned_units=2)
    )
    path = cluster_id_file(shared_fs / "slurmctld")
    machine.service_calls.clear()

    accounting_comes(ctx, state, mount(), config=state.config, planned_units=2)

    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    assert not path.exists()


def test_a_cluster_without_accounting_keeps_its_cluster_id(
    ctx, machine, tmp_path, settled, seen_at_reconfigure
):
    state = settled(running())
    path = cluster_id_file(local_state(tmp_path))
    seen = seen_at_reconfigure(path)

    ctx.run(ctx.on.config_changed(), later(state, config={"max-node-count": 99}))

    assert seen == [True]
    assert path.exists()


def test_with_network_state_the_id_on_the_share_is_deleted(
    ctx, machine, tmp_path, shared_fs, seen_at_reconfigure
):
    dbd = slurmdbd_relation()
    state = ctx.run(ctx.on.update_status(), network_leader(dbd))
    assert "slurmctld" in machine.calls("start")
    machine.service_calls.clear()
    local = cluster_id_file(local_state(tmp_path))
    path = cluster_id_file(shared_fs / "slurmctld")
    seen = seen_at_reconfigure(path)

    accounting_comes(ctx, state, mount(), config={"use-network-state": True})

    assert seen == [False]
    assert local.exists()  # Not the StateSaveLocation in effect.


def test_the_id_is_gone_before_the_shared_slurm_conf_names_accounting(
    ctx, machine, shared_fs, monkeypatch
):
    """A standby restarts as soon as it reads a slurm.conf that names a new plugin: one that
    read the invented id still on the share would take over with it and kill the next
    controller to start. So the id goes before the file that makes the standby restart."""
    state = ctx.run(ctx.on.update_status(), network_leader(slurmdbd_relation()))
    path = cluster_id_file(shared_fs / "slurmctld")
    id_there_as_written: list[bool] = []
    write = ConfigFile.write

    def watched_write(self, config):
        if self.path.name == "slurm.conf" and "slurmdbd" in self.render(config):
            id_there_as_written.append(path.exists())
        return write(self, config)

    monkeypatch.setattr(ConfigFile, "write", watched_write)

    accounting_comes(ctx, state, mount(), config={"use-network-state": True})

    assert id_there_as_written == [False]


# The digest of the applied configuration.

HEX_16 = re.compile(r"[0-9a-f]{16}")


def digests(state: testing.State) -> dict[str, str | None]:
    """The `config_digest` each consumer relation got, by endpoint."""
    found: dict[str, str | None] = {}
    for relation in state.relations:
        if isinstance(relation, testing.Relation):
            value = relation.local_app_data.get("config_digest")
            found[relation.endpoint] = json.loads(value) if value is not None else None
    return found


def consumers() -> list[testing.Relation]:
    return [
        compute_relation(),
        testing.Relation("login-node", remote_app_name="login", remote_units_data={0: {}}),
        slurmdbd_relation(DBD),
        testing.Relation("slurmrestd", remote_app_name="rest", remote_units_data={0: {}}),
    ]


def test_every_consumer_gets_the_digest_of_the_applied_config(ctx, machine):
    out = ctx.run(ctx.on.update_status(), running(*consumers()))

    published = digests(out)
    assert set(published) == {"slurmd", "login-node", "slurmdbd", "slurmrestd"}
    [digest] = set(published.values())
    assert digest is not None and HEX_16.fullmatch(digest)


def test_the_digest_changes_only_once_slurmctld_accepted_the_new_config(ctx, machine, settled):
    state = settled(running(*consumers(), config={"process-isolation": "cgroup"}))
    before = digests(state)
    isolated = later(state, *consumers_of(state), config={"process-isolation": "none"})
    machine.fail(
        *RECONFIGURE, stderr="slurm_reconfigure error: Unable to contact slurm controller"
    )

    failed = ctx.run(ctx.on.config_changed(), isolated)

    assert digests(failed) == before
    machine.heal()

    out = ctx.run(
        ctx.on.update_status(),
        later(failed, *consumers_of(failed), config={"process-isolation": "none"}),
    )

    after = digests(out)
    assert set(after.values()) != set(before.values())
    assert len(set(after.values())) == 1


def test_the_other_controllers_hear_of_the_applied_config_through_the_peer_memory(
    ctx, machine, settled
):
    """The other controllers run from the files the leader writes on the share: the leader's
    `config_digest` in the peer memory, the one the daemons get, changes with them, once
    slurmctld accepted them (its change is the others' peer event)."""
    state = settled(running(*consumers(), config={"process-isolation": "cgroup"}))
    [before] = set(digests(state).values())
    assert memory(state)["config_digest"] == before
    isolated = later(state, *consumers_of(state), config={"process-isolation": "none"})
    machine.fail(
        *RECONFIGURE, stderr="slurm_reconfigure error: Unable to contact slurm controller"
    )

    failed = ctx.run(ctx.on.config_changed(), isolated)

    assert memory(failed)["config_digest"] == before
    machine.heal()
    out = ctx.run(
        ctx.on.update_status(),
        later(failed, *consumers_of(failed), config={"process-isolation": "none"}),
    )
    [after] = set(digests(out).values())
    assert after != before
    assert memory(out)["config_digest"] == after


def test_an_unchanged_config_publishes_the_same_digest(ctx, machine, settled):
    state = settled(running(*consumers()))

    out = ctx.run(ctx.on.update_status(), later(state, *consumers_of(state)))

    assert machine.ran(*RECONFIGURE) == []
    assert digests(out) == digests(state)


def test_the_served_gres_conf_autodetects_nvidia_gpus_and_is_kept(ctx, machine, tmp_path, settled):
    state = settled(running(*consumers()))
    gres_conf = tmp_path / "etc/slurm/gres.conf"
    assert gres_conf.read_text() == "autodetect=nvidia\n"
    gres_conf.write_text("AutoDetect=nvml\n")  # A hand edit.

    out = ctx.run(ctx.on.update_status(), later(state, *consumers_of(state)))

    assert gres_conf.read_text() == "autodetect=nvidia\n"
    assert digests(out) == digests(state)


def consumers_of(state: testing.State) -> list[testing.Relation]:
    return [r for r in state.relations if isinstance(r, testing.Relation)]
