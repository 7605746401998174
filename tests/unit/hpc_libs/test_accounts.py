"""`hpc_libs.slurm.accounts`: the document's checks, the plan's rules, and reading sacctmgr.

The recorded answers (`vectors/sacctmgr/*.txt`) are slurmdbd's after DOCUMENT
(`vectors/sacctmgr/document.yaml`, tests/slurm/test_accounts.py's DOCUMENT_A) was applied to a
fresh one, and the descriptions once an account with a hostile description was added
(`hostile-descriptions.txt`), recorded by that module with `SACCTMGR_RECORD` (Slurm 24.11,
MariaDB 11.8).
"""

from pathlib import Path

import pytest
import sacctmgr_model
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import accounts
from hpc_libs.slurm.accounts import (
    AccountsError,
    Busy,
    Document,
    DocumentError,
    Managed,
    Plan,
    Sacctmgr,
    State,
    drift,
    plan,
)
from hpc_libs_fakes import FakeRun

RECORDED = Path(__file__).parent / "vectors" / "sacctmgr"

DOCUMENT = (RECORDED / "document.yaml").read_text()


def recorded(name: str) -> str:
    return (RECORDED / f"{name}.txt").read_text()


def recorded_state(fake_run: FakeRun) -> State:
    """Read the recorded answers through `Sacctmgr.read`, as on the controller."""
    fake_run.on("sacctmgr", "--parsable2", "--noheader", "show", "qos", stdout=recorded("qos"))
    fake_run.on(
        "sacctmgr",
        "--parsable2",
        "--noheader",
        "show",
        "association",
        stdout=recorded("associations"),
    )
    fake_run.on("sacctmgr", "--parsable2", "--noheader", "show", "user", stdout=recorded("users"))
    fake_run.on(
        "sacctmgr",
        "--parsable2",
        "--noheader",
        "show",
        "account",
        stdout=recorded("descriptions"),
    )
    return Sacctmgr().read()


def applied(document: Document, state: State, previous: Managed | None = None) -> State:
    """Plan `document` on `state` and run the plan on the sacctmgr model."""
    previous = previous or Managed()
    return sacctmgr_model.apply(state, plan(document, state, previous, busy=Busy()))


def summaries(result: Plan) -> list[str]:
    return [change.summary for change in result.changes]


# The document's checks.


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("qos: {short: {max-wall: 10}}", "qos.short.max-wall", "string"),
        ("qos: {short: {maxwall: '10'}}", "qos.short.maxwall", "Extra inputs"),
        ("colour: blue", "colour", "Extra inputs"),
        ("qos: {short: {max-wall: '00:10:30'}}", "qos.short.max-wall", "whole minutes"),
        ("qos: {short: {max-wall: 'forever'}}", "qos.short.max-wall", "UNLIMITED"),
        (
            "qos: {short: {max-tres-per-user: 'cpu=8 mem=1'}}",
            "qos.short.max-tres-per-user",
            "TRES",
        ),
        ("qos: {short: {priority: -1}}", "qos.short.priority", "greater than"),
        ("qos: {short: {priority: true}}", "qos.short.priority", "integer"),
        ("qos: {short: {preempt-mode: always}}", "qos.short.preempt-mode", "Input should be"),
        ("qos: {short: {preempt: [long]}}", "qos.short.preempt", "'long'"),
        ("qos: {short: {preempt: [short]}}", "qos.short.preempt", "'short'"),
        ("accounts: {Physics: {}}", "accounts.Physics", "lower-case"),
        ("accounts: {root: {}}", "accounts.root", "root account"),
        ("accounts: {a: {parent: b}}", "accounts.a.parent", "'b'"),
        ("accounts: {a: {parent: b}, b: {parent: a}}", "accounts.a.parent", "own ancestors"),
        ("accounts: {a: {qos: [short]}}", "accounts.a.qos", "'short'"),
        ("accounts: {a: {qos: [normal, normal]}}", "accounts.a.qos", "twice"),
        ("accounts: {a: {default-qos: short}}", "accounts.a.default-qos", "'short'"),
        ("accounts: {a: {description: 'x|y'}}", "accounts.a.description", "'|'"),
        ('accounts: {a: {description: "x\\ny"}}', "accounts.a.description", "'\\n'"),
        # Quotes, '=' and '#' never reach sacctmgr's command line: sacctmgr strips quotes and
        # reads '=' as the next key; '#' inside a quoted YAML string is the text's, not a comment.
        ("""accounts: {a: {description: 'say "hi"'}}""", "accounts.a.description", "'\"'"),
        ("""accounts: {a: {description: "it's"}}""", "accounts.a.description", '"\'"'),
        ("accounts: {a: {description: 'x=y'}}", "accounts.a.description", "no '|' or quote"),
        ("accounts: {a: {description: 'room #2'}}", "accounts.a.description", "no '|' or quote"),
        ("accounts: {'a=b': {}}", "accounts.a=b", "'='"),
        ("accounts: {'a#b': {}}", "accounts.a#b", "'#'"),
        ("qos: {'x=y': {}}", "qos.x=y", "'='"),
        ("accounts: {a: {}}\nusers: {'al=ice': {accounts: [a]}}", "users.al=ice", "'='"),
        ("accounts: {a: {}}\nusers: {'\"alice\"': {accounts: [a]}}", 'users."alice"', "'\"'"),
        ("qos: {s: {max-tres-per-user: 'cpu=8,mem=1#'}}", "qos.s.max-tres-per-user", "TRES"),
        ("qos: {s: {max-tres-per-user: 'cpu==8'}}", "qos.s.max-tres-per-user", "TRES"),
        ("accounts: {a: {fairshare: 0}}", "accounts.a.fairshare", "greater than"),
        ("users: {alice: {accounts: [a]}}", "users.alice.accounts", "'a'"),
        ("users: {alice: {accounts: []}}", "users.alice.accounts", "at least 1"),
        (
            "accounts: {a: {}, b: {}}\nusers: {alice: {accounts: [a], default-account: b}}",
            "users.alice.default-account",
            "among the user's accounts",
        ),
        ("accounts: {a: {}}\nusers: {'al ice': {accounts: [a]}}", "users.al ice", "' '"),
        ("users: {alice: {accounts: [a], admin-level: root}}", "users.alice.admin-level", ""),
        ("[1, 2]", "", "not a mapping"),
        ("qos: {", "", "not YAML"),
    ],
)
def test_document_refuses_input_naming_the_key(text: str, key: str, reason: str):
    with pytest.raises(DocumentError) as raised:
        Document.parse(text)

    assert raised.value.key == key
    assert reason in raised.value.reason
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, SlurmOpsError)


def test_document_reads_the_reference_example():
    document = Document.parse(DOCUMENT)

    assert document.managed() == Managed(
        frozenset({"normal", "scavenger", "short"}),
        frozenset({"physics", "theory", "chemistry"}),
        frozenset({"alice", "bob", "carol"}),
    )
    assert document.users["bob"].default == "theory"
    assert Document.parse("") == Document.parse("# nothing\n") == Document()


def test_managed_round_trips_and_refuses_what_is_no_name():
    managed = Document.parse(DOCUMENT).managed()

    assert Managed.from_json(managed.to_json()) == managed
    assert Managed.from_json("") == Managed()
    with pytest.raises(DocumentError) as raised:
        Managed.from_json('{"users": ["alice", "x y"]}')
    assert raised.value.key == "managed.users.1"
    with pytest.raises(DocumentError):
        Managed.from_json('{"groups": []}')


# Reading slurmdbd (recorded answers).


def test_read_asks_four_fixed_queries_and_reads_the_recording(fake_run: FakeRun):
    state = recorded_state(fake_run)

    assert [call[:5] for call in fake_run.calls] == [
        ["sacctmgr", "--parsable2", "--noheader", "show", what]
        for what in ("qos", "association", "user", "account")
    ]
    assert all(call[5].startswith("format=") for call in fake_run.calls)
    assert fake_run.calls[3][5] == "format=Account,Description", "free text last"
    assert state.qos["short"]["maxwall"] == "10"
    assert state.qos["short"]["maxtresperuser"] == "cpu=8,mem=16384"
    assert state.accounts["physics"].description == "physics dept", "sacctmgr lowers it"
    assert state.accounts["theory"].parent == "physics"
    assert state.users["alice"].default_account == "theory"
    assert set(state.users["alice"].associations) == {"physics", "theory"}


def test_applied_document_reads_back_as_no_change(fake_run: FakeRun):
    """Idempotent: what slurmdbd holds after the document needs no command."""
    document = Document.parse(DOCUMENT)
    state = recorded_state(fake_run)

    assert plan(document, state, document.managed(), busy=Busy()) == Plan()
    assert drift(document, state, document.managed()) == ()


def test_model_agrees_with_the_recording(fake_run: FakeRun):
    """The sacctmgr model applies the document as the real slurmdbd did."""
    modelled = applied(Document.parse(DOCUMENT), sacctmgr_model.empty())

    assert modelled == recorded_state(fake_run)


def test_reader_splits_on_newlines_only_and_skips_torn_records():
    columns = len(accounts.QOS_FORMAT)
    good = "short|100|00:10:00|||||||requeue|scavenger"
    torn = "evil|1|" + "|" * (columns - 3) + "\rlong|5" + "|" * (columns - 2)
    wide = "wide" + "|" * columns

    qos = accounts.parse_qos(f"{good}\n{torn}\n{wide}\nlong\u2028|5\n")

    assert list(qos) == ["short"]
    assert qos["short"]["preempt"] == "scavenger"


def test_a_recorded_hostile_description_reads_as_unknown():
    """Account evil's description, set by hand, is `x|y`, newline, `ghost|physics dept`,
    newline, `physics|physics dept`: sacctmgr printed it verbatim."""
    known = {"chemistry", "evil", "physics", "root", "theory"}

    descriptions = accounts.parse_descriptions(recorded("hostile-descriptions"), known)

    assert descriptions == {
        "chemistry": "chemistry",
        "evil": None,
        "physics": None,
        "root": "default root account",
        "theory": "theory",
    }


def test_descriptions_that_forge_lines_read_as_unknown():
    """Hand-made lines (the lab module checks that sacctmgr prints a newline verbatim)."""
    output = (
        "physics|physics dept\n"
        "evil|x|y\n"  # a `|` in a description is kept
        "hostile|a\nphysics|forged\n"  # a newline forges physics again
        "torn|b\nnot a record\n"
        "haunted|c\nghost|no such account\n"
        "plain|plain\n"
    )
    known = {"physics", "evil", "hostile", "torn", "haunted", "plain"}

    descriptions = accounts.parse_descriptions(output, known)

    assert descriptions == {
        "physics": None,
        "evil": "x|y",
        "hostile": "a",
        "torn": None,
        "haunted": None,
        "plain": "plain",
    }


def test_busy_reads_user_then_account_and_skips_forged_lines(fake_run: FakeRun):
    fake_run.on("squeue", stdout="alice|physics\ncarol|chem\nistry\nbob|x|y\ndave|Theory\r\n")

    busy = Sacctmgr().busy()

    assert fake_run.calls == [["squeue", "--all", "--noheader", "--format=%u|%a"]]
    assert busy == Busy(frozenset({("physics", "alice"), ("chem", "carol")}))


def test_apply_runs_each_change_and_stops_at_the_first_failure(fake_run: FakeRun):
    result = plan(
        Document.parse("qos: {a: {}}\naccounts: {b: {}}"), State(), Managed(), busy=Busy()
    )
    fake_run.on("sacctmgr", stderr=" Unknown option: x\n", returncode=1)

    with pytest.raises(AccountsError) as raised:
        Sacctmgr().apply(result)

    assert fake_run.calls == [["sacctmgr", "--immediate", "--parsable2", "add", "qos", "name=a"]]
    assert "Unknown option: x" in str(raised.value)
    assert "add qos name=a" in raised.value.message


# The plan's rules.


def test_plan_orders_qos_then_accounts_parents_first_then_users():
    document = Document.parse(DOCUMENT)

    changes = summaries(plan(document, sacctmgr_model.empty(), Managed(), busy=Busy()))

    order = [change.split(" ")[1] for change in changes]
    assert order == sorted(order, key=["qos", "account", "user"].index), changes
    adds = [c for c in changes if c.startswith("add account")]
    assert adds.index(next(c for c in adds if "name=theory" in c)) > adds.index(
        next(c for c in adds if "physics" in c)
    )
    assert changes.index("modify qos where name=short set preempt=scavenger") > changes.index(
        "add qos name=scavenger priority=1"
    )


def test_removals_come_last_users_then_children_then_qos():
    document = Document.parse(DOCUMENT)
    state = applied(document, sacctmgr_model.empty())
    smaller = Document.parse("accounts: {other: {}}\nusers: {alice: {accounts: [other]}}")

    changes = summaries(plan(smaller, state, document.managed(), busy=Busy()))

    assert changes == [
        "modify qos where name=normal set priority=0",
        "add account name=other parent=root qos=normal",
        "add user name=alice account=other",
        "modify user where name=alice set defaultaccount=other",
        "modify user where name=alice set adminlevel=none",
        "remove user where name=alice account=physics",
        "remove user where name=alice account=theory",
        "remove user where name=bob,carol",
        "remove account where name=theory",
        "remove account where name=chemistry,physics",
        "remove qos where name=scavenger,short",
    ]


def test_a_removal_with_jobs_is_held():
    document = Document.parse(DOCUMENT)
    state = applied(document, sacctmgr_model.empty())
    busy = Busy(frozenset({("theory", "bob")}))

    result = plan(Document(), state, document.managed(), busy=busy)

    assert result.held == (
        "user bob in account theory: it has jobs",
        "account physics: it or an account below it has jobs",
        "account theory: it or an account below it has jobs",
    )
    changes = summaries(result)
    assert "remove user where name=alice,carol" in changes
    assert not any("bob" in c or "theory" in c or "physics" in c for c in changes), changes
    assert "remove account where name=chemistry" in changes


def test_held_removals_keep_their_names_recorded_until_done():
    document = Document.parse(DOCUMENT)
    state = applied(document, sacctmgr_model.empty())
    busy = Busy(frozenset({("theory", "bob")}))
    smaller = Document.parse("qos: {short: {}}")

    held = plan(smaller, state, document.managed(), busy=busy)
    done = plan(smaller, sacctmgr_model.apply(state, held), document.managed(), busy=Busy())

    assert held.managed_after(smaller, document.managed()) == document.managed()
    assert "remove account where name=physics" in summaries(done)
    assert done.managed_after(smaller, document.managed()) == smaller.managed()


def test_names_never_managed_are_left_alone_unless_pruned():
    state = applied(
        Document.parse("accounts: {handmade: {}}\nusers: {erin: {accounts: [handmade]}}"),
        sacctmgr_model.empty(),
    )
    document = Document.parse(DOCUMENT)

    kept = summaries(plan(document, state, Managed(), busy=Busy()))
    pruned = summaries(plan(document, state, Managed(), busy=Busy(), prune_unmanaged=True))

    assert not any("handmade" in c or "erin" in c for c in kept)
    assert "remove user where name=erin" in pruned
    assert "remove account where name=handmade" in pruned
    assert not any("root" in c for c in pruned if c.startswith("remove")), "root is never pruned"


def test_a_name_the_previous_document_managed_is_removed():
    first = Document.parse("qos: {old: {}, kept: {}}")
    state = applied(first, sacctmgr_model.empty())

    changes = summaries(
        plan(Document.parse("qos: {kept: {}}"), state, first.managed(), busy=Busy())
    )

    assert changes == ["remove qos where name=old"]


def test_a_key_left_out_is_put_back_to_slurms_default():
    first = Document.parse(
        "qos: {q: {priority: 5, grp-tres: 'cpu=4,mem=1G', preempt-mode: off}}\n"
        "accounts: {a: {fairshare: 9, max-jobs: 3, qos: [normal, q], default-qos: q}}"
    )
    state = applied(first, sacctmgr_model.empty())
    second = Document.parse("qos: {q: {grp-tres: 'cpu=8'}}\naccounts: {a: {}}")

    changes = summaries(plan(second, state, first.managed(), busy=Busy()))

    assert changes == [
        "modify qos where name=q set grptres=cpu=8,mem=-1 preemptmode=cluster priority=0",
        "modify account where name=a set defaultqos=-1 fairshare=1 maxjobs=-1 qos=normal",
    ]


def test_commands_are_batched_for_1000_users_in_100_accounts():
    names = "\n".join(f"  a{i:03}: {{fairshare: {1 + i % 5}}}" for i in range(100))
    users = "\n".join(f"  u{i:04}: {{accounts: [a{i % 100:03}]}}" for i in range(1000))
    document = Document.parse(f"accounts:\n{names}\nusers:\n{users}\n")

    result = plan(document, sacctmgr_model.empty(), Managed(), busy=Busy())

    assert len(result.changes) == 5 + 100, summaries(result)[:10]
    state = sacctmgr_model.apply(sacctmgr_model.empty(), result)
    assert plan(document, state, Managed(), busy=Busy()) == Plan()


def test_drift_names_what_differs_for_managed_names_only():
    document = Document.parse(DOCUMENT)
    state = applied(document, sacctmgr_model.empty())
    by_hand = sacctmgr_model.apply(
        state,
        Plan(
            (
                accounts.Change(
                    ("modify", "account", "where", "name=physics", "set", "fairshare=7"), ""
                ),
                accounts.Change(("remove", "user", "where", "name=bob"), ""),
                accounts.Change(
                    ("modify", "user", "where", "name=alice", "set", "defaultaccount=physics"), ""
                ),
            )
        ),
    )

    assert drift(document, by_hand, document.managed()) == (
        "account physics: fairshare is 7, the document says 100",
        "user alice: default-account is physics, the document says theory",
        "user bob: missing",
    )
    assert applied(document, by_hand, document.managed()) == state
