"""Scenarios: the `accounts` document (associations as code) on the controller.

slurmdbd is faked at the charm's seam (`associations.Sacctmgr`): it holds a `State`, says
which associations have jobs, records the plans applied, and fails as sacctmgr does. The
planning itself is the library's (`hpc_libs.slurm.accounts`, tested over recorded sacctmgr
output there); here: when the leader reconciles, what it records, what it says, what
slurm.conf enforces, and `accounts-diff`.
"""

import dataclasses
import json
from collections.abc import Iterator

import associations
import pytest
from hpc_libs.slurm import accounts
from hpc_libs.slurm.accounts import AccountsError, Busy, Document, Plan, State
from ops import testing
from test_charm_slurmctld import PEER, databag, running, slurm_conf
from test_slurmctld_accounting_and_jwt import DBD, slurmdbd_relation

DOCUMENT = """
qos:
  short: {priority: 100, max-wall: "00:10:00"}
accounts:
  physics: {fairshare: 100, qos: [normal, short], default-qos: normal}
  theory: {parent: physics, fairshare: 50}
users:
  alice: {accounts: [physics, theory], default-account: physics}
  bob: {accounts: [theory]}
"""
WITHOUT_BOB = DOCUMENT.replace("  bob: {accounts: [theory]}\n", "")
MANAGED = {"qos": ["short"], "accounts": ["physics", "theory"], "users": ["alice", "bob"]}
APPLIED = associations.digest(Document.parse(DOCUMENT))
"""The recorded digest of DOCUMENT: the peer memory after it was applied in full."""
DOWN = "sacctmgr: error: Problem talking to the database: Connection refused"
ENFORCE = "accountingstorageenforce=associations,limits,qos"


def holding(text: str) -> State:
    """What slurmdbd holds once `text`'s document was applied."""
    return accounts.desired(Document.parse(text))


@dataclasses.dataclass
class FakeSlurmdbd:
    """slurmdbd as the charm's `Sacctmgr` sees it."""

    state: State = dataclasses.field(default_factory=State)
    jobs: Busy = dataclasses.field(default_factory=Busy)
    failure: AccountsError | None = None
    refusal: AccountsError | None = None
    reads: int = 0
    plans: list[Plan] = dataclasses.field(default_factory=list[Plan])

    def read(self) -> State:
        self.reads += 1
        if self.failure is not None:
            raise self.failure
        return self.state

    def busy(self) -> Busy:
        return self.jobs

    def apply(self, plan: Plan) -> None:
        if self.refusal is not None:
            raise self.refusal
        self.plans.append(plan)

    def commands(self) -> list[str]:
        return [change.summary for plan in self.plans for change in plan.changes]


@pytest.fixture
def slurmdbd(machine, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlurmdbd]:
    fake = FakeSlurmdbd()
    monkeypatch.setattr(associations, "Sacctmgr", lambda: fake)
    yield fake


def with_document(
    *relations: testing.RelationBase,
    text: str = DOCUMENT,
    leader: bool = True,
    options: dict[str, str | bool] | None = None,
) -> testing.State:
    """The unit (the leader) with slurmdbd and `text` as the document, and other options."""
    config = {"accounts": text, **(options or {})}
    return running(slurmdbd_relation(DBD), *relations, config=config, leader=leader)


def peer_with(**fields: object) -> testing.PeerRelation:
    return testing.PeerRelation(PEER, local_app_data=databag(**fields))


def recorded(state: testing.State, key: str = "accounts_managed") -> dict | str | None:
    """A key of the peer APP databag, decoded (None: absent)."""
    peer = next(r for r in state.relations if isinstance(r, testing.PeerRelation))
    text = peer.local_app_data.get(key)
    return json.loads(text) if text else None


def enforce_lines(tmp_path) -> list[str]:
    return [
        line
        for line in slurm_conf(tmp_path).splitlines()
        if line.startswith("accountingstorageenforce")
    ]


# Checks.


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            DOCUMENT.replace("default-account: physics", "default-account: chemistry"),
            "users.alice.default-account",
        ),
        (DOCUMENT.replace('max-wall: "00:10:00"', 'max-wall: "10 minutes"'), "qos.short.max-wall"),
        ("users: {alice: {accounts: [physics]}}", "users.alice.accounts"),
        ("qos: [short]", "qos"),
    ],
)
def test_a_bad_document_blocks_naming_the_key_and_nothing_is_applied(
    ctx, slurmdbd, tmp_path, text, key
):
    out = ctx.run(ctx.on.config_changed(), with_document(text=text))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(f"invalid config option 'accounts': {key}")
    assert slurmdbd.reads == 0
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()


# When the leader reconciles.


def test_the_leader_applies_the_document_then_records_what_it_manages(ctx, slurmdbd):
    out = ctx.run(ctx.on.config_changed(), with_document())

    assert slurmdbd.commands(), "nothing applied to an empty slurmdbd"
    assert recorded(out) == MANAGED
    assert recorded(out, "accounts_applied") == APPLIED
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_nothing_differs_no_command_runs(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)

    out = ctx.run(ctx.on.update_status(), with_document())

    assert slurmdbd.reads == 1
    assert slurmdbd.plans == []
    assert recorded(out) == MANAGED


def test_without_a_document_slurmdbd_is_left_alone_and_nothing_is_enforced(
    ctx, slurmdbd, tmp_path
):
    out = ctx.run(
        ctx.on.config_changed(),
        running(slurmdbd_relation(DBD), peer_with(accounts_managed=MANAGED)),
    )

    assert slurmdbd.reads == 0
    assert enforce_lines(tmp_path) == []
    assert recorded(out) == MANAGED  # Kept, should a document come back.


def test_without_slurmdbd_the_document_waits_and_nothing_is_enforced(ctx, slurmdbd, tmp_path):
    out = ctx.run(ctx.on.config_changed(), running(config={"accounts": DOCUMENT}))

    assert slurmdbd.reads == 0
    assert enforce_lines(tmp_path) == []
    assert recorded(out) is None
    assert out.unit_status == testing.ActiveStatus()


def test_a_unit_besides_the_leader_never_runs_sacctmgr(ctx, slurmdbd):
    ctx.run(ctx.on.config_changed(), with_document(leader=False))

    assert slurmdbd.reads == 0


# Enforcement.


def test_the_document_with_slurmdbd_turns_enforcement_on(ctx, slurmdbd, tmp_path):
    ctx.run(ctx.on.config_changed(), with_document())

    assert enforce_lines(tmp_path) == [ENFORCE]


@pytest.mark.parametrize(
    ("document", "line"),
    [
        (DOCUMENT, "accountingstorageenforce=safe,associations,limits,qos"),
        ("", "accountingstorageenforce=safe"),
    ],
    ids=["with-document", "without-document"],
)
def test_the_operators_enforce_items_are_added_to_the_charms(
    ctx, slurmdbd, tmp_path, document, line
):
    parameters = "AccountingStorageEnforce=safe"

    ctx.run(
        ctx.on.config_changed(),
        with_document(text=document, options={"slurm-conf-parameters": parameters}),
    )

    assert enforce_lines(tmp_path) == [line]


# Failures: statuses quoting sacctmgr, retried, never recorded.


def test_slurmdbd_down_is_a_status_quoting_sacctmgr_retried_by_update_status(ctx, slurmdbd):
    slurmdbd.failure = AccountsError("cannot read slurmdbd", stderr=DOWN)

    out = ctx.run(ctx.on.config_changed(), with_document())

    assert out.unit_status == testing.BlockedStatus(
        f"accounts not applied: cannot read slurmdbd: {DOWN}"
    )
    assert recorded(out) is None

    slurmdbd.failure = None
    out = ctx.run(ctx.on.update_status(), out)

    assert slurmdbd.commands()
    assert recorded(out) == MANAGED
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_a_refused_change_records_nothing_new(ctx, slurmdbd):
    refused = "sacctmgr: error: Unknown QOS 'short'"
    slurmdbd.refusal = AccountsError("sacctmgr add user failed", stderr=refused)
    before = {"qos": [], "accounts": ["physics"], "users": ["carol"]}

    out = ctx.run(ctx.on.config_changed(), with_document(peer_with(accounts_managed=before)))

    assert out.unit_status == testing.BlockedStatus(
        f"accounts not applied: sacctmgr add user failed: {refused}"
    )
    assert recorded(out) == before


def test_the_record_survives_a_reconcile_that_could_not_apply(ctx, slurmdbd):
    slurmdbd.failure = AccountsError("cannot read slurmdbd", stderr=DOWN)

    out = ctx.run(ctx.on.update_status(), with_document(peer_with(accounts_managed=MANAGED)))

    assert recorded(out) == MANAGED


# What it manages: the record is what a later document's removals rest on.


def test_a_user_a_former_document_managed_is_removed(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)

    out = ctx.run(
        ctx.on.config_changed(),
        with_document(peer_with(accounts_managed=MANAGED), text=WITHOUT_BOB),
    )

    assert any("bob" in command for command in slurmdbd.commands()), slurmdbd.commands()
    assert recorded(out) == {**MANAGED, "users": ["alice"]}


def test_a_user_no_document_managed_is_left_alone(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)

    ctx.run(ctx.on.config_changed(), with_document(text=WITHOUT_BOB))

    assert not any("bob" in command for command in slurmdbd.commands()), slurmdbd.commands()


def test_prune_unmanaged_removes_a_user_no_document_managed(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)

    ctx.run(
        ctx.on.config_changed(),
        with_document(text=WITHOUT_BOB, options={"accounts-prune-unmanaged": True}),
    )

    assert any("bob" in command for command in slurmdbd.commands()), slurmdbd.commands()


def test_a_removal_held_by_jobs_is_a_status_line_and_stays_managed(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)
    slurmdbd.jobs = Busy(frozenset({("theory", "bob")}))

    out = ctx.run(
        ctx.on.config_changed(),
        with_document(peer_with(accounts_managed=MANAGED), text=WITHOUT_BOB),
    )

    assert out.unit_status.name == "active"
    assert out.unit_status.message.startswith("accounts: removal held while jobs run: ")
    assert "bob" in out.unit_status.message
    assert recorded(out) == MANAGED


def test_a_hand_made_change_is_a_status_line_and_put_back(ctx, slurmdbd):
    wanted = holding(DOCUMENT)
    physics = wanted.accounts["physics"]
    changed = {**physics.settings, "fairshare": "42"}
    slurmdbd.state = dataclasses.replace(
        wanted,
        accounts={**wanted.accounts, "physics": dataclasses.replace(physics, settings=changed)},
    )

    applied = peer_with(accounts_managed=MANAGED, accounts_applied=APPLIED)

    out = ctx.run(ctx.on.update_status(), with_document(applied))

    assert out.unit_status == testing.ActiveStatus(
        "accounts: put back hand-made changes: account physics: fairshare is 42, "
        "the document says 100"
    )
    assert len(slurmdbd.commands()) == 1, slurmdbd.commands()


def test_what_a_new_document_changes_is_no_hand_made_change(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)
    applied = peer_with(accounts_managed=MANAGED, accounts_applied=APPLIED)
    changed = DOCUMENT.replace("fairshare: 100", "fairshare: 42")

    out = ctx.run(ctx.on.config_changed(), with_document(applied, text=changed))

    assert len(slurmdbd.commands()) == 1, slurmdbd.commands()
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")
    assert recorded(out, "accounts_applied") == associations.digest(Document.parse(changed))


# accounts-diff.


def test_accounts_diff_prints_what_differs_and_changes_nothing(ctx, slurmdbd):
    slurmdbd.state = holding(WITHOUT_BOB)

    ctx.run(ctx.on.action("accounts-diff"), with_document(peer_with(accounts_managed=MANAGED)))

    assert ctx.action_results == {"count": 1, "differences": "user bob: missing"}
    assert slurmdbd.plans == []


def test_accounts_diff_with_nothing_different_says_none(ctx, slurmdbd):
    slurmdbd.state = holding(DOCUMENT)

    ctx.run(ctx.on.action("accounts-diff"), with_document(peer_with(accounts_managed=MANAGED)))

    assert ctx.action_results == {"count": 0, "differences": "none"}


def test_accounts_diff_fails_quoting_sacctmgr(ctx, slurmdbd):
    slurmdbd.failure = AccountsError("cannot read slurmdbd", stderr=DOWN)

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("accounts-diff"), with_document())

    assert (
        failed.value.message
        == f"cannot read slurmdbd's associations: cannot read slurmdbd: {DOWN}"
    )


def test_accounts_diff_without_a_document_fails_saying_so(ctx, slurmdbd):
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("accounts-diff"), running(slurmdbd_relation(DBD)))

    assert failed.value.message == "no accounts document: the `accounts` option is empty"
    assert slurmdbd.reads == 0


# Through the library's own sacctmgr runner, on the fake machine.


def test_the_real_runner_applies_with_immediate_and_no_shell(ctx, machine):
    out = ctx.run(ctx.on.config_changed(), with_document())

    applied = [c for c in machine.ran("sacctmgr") if "--immediate" in c]
    assert applied, machine.ran("sacctmgr")
    assert all(c[:3] == ["sacctmgr", "--immediate", "--parsable2"] for c in applied)
    assert any(c[3:5] == ["add", "qos"] for c in applied), applied
    assert recorded(out) == MANAGED


def test_the_real_runner_quotes_sacctmgr_when_slurmdbd_is_down(ctx, machine):
    machine.fail("sacctmgr", stderr=f"{DOWN}\n")

    out = ctx.run(ctx.on.update_status(), with_document())

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("accounts not applied: ")
    assert out.unit_status.message.endswith(DOWN)
    assert not [c for c in machine.ran("sacctmgr") if "--immediate" in c]
    assert recorded(out) is None
