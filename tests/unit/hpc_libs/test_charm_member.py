"""`ClusterMember`: a tiny member charm fires one event; the state and the machine say what it did.

The member runs a daemon (`exampled`) with slurmctld's key and controllers: restarted when
their fingerprint differs from the one it last (re)started with, the key confirmed once it
runs, the ladder while joining, and leaving on the unit's own departure.
"""

import dataclasses
import json
from collections.abc import Iterable
from typing import Any, ClassVar

import ops
import pytest
from charm_testing import FakeMachine, already_installed
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.charm.member import NEEDS_SLURMCTLD, WAITING_FOR_SLURMCTLD, ClusterMember
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.controller import ControllerConsumer, auth_key_digest
from hpc_libs.machine.systemd import Service
from hpc_libs.slurm.sackd import SackdManager
from hpc_libs_fakes import daemon_meta
from ops import testing

KEY = "a2V5LW9uZQ=="
NEW_KEY = "a2V5LXR3bw=="
DAEMON = "exampled"


class MemberCharm(SlurmCharm[SlurmCharmConfig]):
    """Runs `exampled` with slurmctld's key and controllers; records when it leaves."""

    _stored = ops.StoredState()
    left: ClassVar[list[str]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework, config_type=SlurmCharmConfig, manager=SackdManager())
        self.slurmctld = ControllerConsumer(self, "slurmctld")
        self.member = ClusterMember(self, self.slurmctld, self._stored, self._leave)
        self.daemon = Service(DAEMON)

    def reconcile(self, config: SlurmCharmConfig) -> None:
        data = self.slurmctld.controller_data
        if self.member.relation is None or data is None or not data.is_complete:
            return
        try:
            key = self.slurmctld.auth_key()
        except IntegrationError:
            return
        self.member.run(self.daemon, "\n".join([key, *data.conf_servers()]), key)

    def statuses(self, config: SlurmCharmConfig) -> Iterable[ops.StatusBase]:
        if (status := self.member.status()) is not None:
            yield status

    def _leave(self) -> None:
        MemberCharm.left.append("left")


META = daemon_meta("member", "sackd")
OPTIONS = {"options": {"slurm-package-source": {"type": "string", "default": "archive"}}}


@pytest.fixture
def ctx() -> testing.Context[MemberCharm]:
    MemberCharm.left = []
    return testing.Context(MemberCharm, meta=META, config=OPTIONS)


def controllers(*addresses: str) -> str:
    return json.dumps([{"hostname": a, "address": a, "port": 6817} for a in addresses])


def joined_state(
    *addresses: str, key: str = KEY, applied: str = "", **bag: str
) -> tuple[testing.State, testing.Relation]:
    """An installed unit, slurmctld sharing `key` and `addresses` (raw databag `bag` added)."""
    secret = testing.Secret(tracked_content={"key": key})
    data = {"auth_key_id": json.dumps(secret.id), "controllers": controllers(*addresses), **bag}
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data)
    return state_with(relation, [secret], applied=applied), relation


def state_with(
    relation: testing.Relation | None, secrets: list[testing.Secret], **stored: object
) -> testing.State:
    return testing.State(
        relations=[relation] if relation is not None else [],
        secrets=secrets,
        stored_states={
            already_installed("MemberCharm"),
            testing.StoredState(owner_path="MemberCharm", content=stored),
        },
    )


def stored(state: testing.State) -> dict[str, Any]:
    return dict(next(s for s in state.stored_states if s.owner_path == "MemberCharm").content)


def confirmed(state: testing.State, relation: testing.Relation) -> str | None:
    text = state.get_relation(relation.id).local_unit_data.get("auth_key_digest")
    return json.loads(text) if text is not None else None


def fingerprint(key: str, *addresses: str) -> str:
    return "\n".join([key, *(f"{a}:6817" for a in addresses)])


def test_joining_starts_the_daemon_records_what_it_runs_with_and_confirms_the_key(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    state, relation = joined_state("10.0.0.1")

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == [("restart", DAEMON), ("enable", DAEMON)]
    assert stored(out)["applied"] == fingerprint(KEY, "10.0.0.1")
    assert confirmed(out, relation) == auth_key_digest(KEY)
    assert out.unit_status == ops.ActiveStatus()


def test_no_event_is_re_emitted_for_the_reconcile(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    state, relation = joined_state("10.0.0.1")

    ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.calls("restart") == [DAEMON]
    assert [e.handle.kind for e in ctx.emitted_events] == ["slurmctld_relation_changed"]


def test_a_running_daemon_with_what_it_was_started_with_is_left_alone(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    machine.active.add(DAEMON)
    state, relation = joined_state("10.0.0.1", applied=fingerprint(KEY, "10.0.0.1"))

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert confirmed(out, relation) == auth_key_digest(KEY)


@pytest.mark.parametrize(
    ("key", "addresses"),
    [(KEY, ("10.0.0.2", "10.0.0.1")), (NEW_KEY, ("10.0.0.1",))],
    ids=["new-controllers", "new-key"],
)
def test_a_new_key_or_controller_list_restarts_a_running_daemon(
    ctx: testing.Context[MemberCharm], machine: FakeMachine, key: str, addresses: tuple[str, ...]
):
    machine.active.add(DAEMON)
    state, relation = joined_state(*addresses, key=key, applied=fingerprint(KEY, "10.0.0.1"))

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == [("restart", DAEMON)]
    assert stored(out)["applied"] == fingerprint(key, *addresses)
    assert confirmed(out, relation) == auth_key_digest(key)


def test_a_failed_restart_records_nothing_confirms_nothing_and_is_retried(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    """Worst moment: the daemon came back running, but with what it read before the change."""
    machine.active.add(DAEMON)
    machine.service_fails(DAEMON, "fatal: cannot read slurm.key")
    state, relation = joined_state("10.0.0.2", applied=fingerprint(KEY, "10.0.0.1"))

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status.name == "blocked"
    assert stored(out)["applied"] == ""
    assert confirmed(out, relation) is None
    assert machine.calls("restart") == [DAEMON, DAEMON]  # once more after reset-failed
    machine.heal()
    machine.active.add(DAEMON)
    again = ctx.run(ctx.on.update_status(), out)
    assert machine.calls("restart") == [DAEMON, DAEMON, DAEMON]
    assert stored(again)["applied"] == fingerprint(KEY, "10.0.0.2")


# The ladder.


def test_without_slurmctld_it_needs_the_integration(ctx: testing.Context[MemberCharm]):
    out = ctx.run(ctx.on.update_status(), state_with(None, []))

    assert out.unit_status == ops.BlockedStatus(NEEDS_SLURMCTLD)


def test_an_empty_databag_waits_for_slurmctld(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    out = ctx.run(ctx.on.relation_changed(relation), state_with(relation, []))

    assert out.unit_status == ops.WaitingStatus(WAITING_FOR_SLURMCTLD)
    assert machine.service_calls == []


def test_invalid_controllers_wait_naming_the_field(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    state, relation = joined_state()
    bad = testing.Relation(
        "slurmctld",
        id=relation.id,
        remote_app_name="slurmctld",
        remote_app_data={**relation.remote_app_data, "controllers": '[{"address": "a b"}]'},
    )

    out = ctx.run(ctx.on.relation_changed(bad), state_with(bad, list(state.secrets)))

    assert out.unit_status.name == "waiting"
    assert "controllers" in out.unit_status.message
    assert machine.service_calls == []


def test_a_key_not_granted_waits_for_the_key(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    _, relation = joined_state("10.0.0.1")

    out = ctx.run(ctx.on.relation_changed(relation), state_with(relation, []))

    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.startswith("waiting for slurmctld's auth key: ")
    assert machine.service_calls == []


# Leaving.


def departing(relation: testing.Relation) -> testing.Relation:
    """The relation as this unit's own relation-departed sees it (Scenario names the departing
    unit after the remote application: "member" makes it this unit, member/0)."""
    return dataclasses.replace(relation, remote_app_name="member")


def test_its_own_departure_leaves_and_needs_the_integration_again(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    machine.active.add(DAEMON)
    state, relation = joined_state("10.0.0.1", applied=fingerprint(KEY, "10.0.0.1"))
    leaving = departing(relation)

    out = ctx.run(
        ctx.on.relation_departed(leaving, remote_unit=0, departing_unit=0),
        state_with(leaving, list(state.secrets), applied=fingerprint(KEY, "10.0.0.1")),
    )

    assert MemberCharm.left == ["left"]
    assert stored(out)["left"] is True
    assert stored(out)["applied"] == ""
    assert out.unit_status == ops.BlockedStatus(NEEDS_SLURMCTLD)


def test_after_leaving_no_event_runs_the_daemon_until_integrated_again(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    state, relation = joined_state("10.0.0.1")
    left = state_with(relation, list(state.secrets), left=True)

    out = ctx.run(ctx.on.relation_changed(relation), left)
    assert machine.service_calls == []
    assert out.unit_status == ops.BlockedStatus(NEEDS_SLURMCTLD)

    out = ctx.run(ctx.on.relation_created(relation), left)
    assert stored(out)["left"] is False
    assert machine.service_calls == []  # relation-changed follows: it joins then
    out = ctx.run(ctx.on.relation_changed(relation), out)
    assert machine.calls("restart") == [DAEMON]
    assert out.unit_status == ops.ActiveStatus()


def test_another_units_departure_is_not_a_departure(
    ctx: testing.Context[MemberCharm], machine: FakeMachine
):
    machine.active.add(DAEMON)
    state, relation = joined_state("10.0.0.1", applied=fingerprint(KEY, "10.0.0.1"))

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)

    assert MemberCharm.left == []
    assert stored(out)["left"] is False
    assert out.unit_status == ops.ActiveStatus()
