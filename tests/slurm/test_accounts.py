"""Associations as code (`hpc_libs.slurm.accounts`) against a REAL slurmdbd.

A module-scoped fixture brings up MariaDB and slurmdbd on the tier's controller machine
(slurmdbd.conf written by `SlurmdbdManager`, as the slurmdbd charm does) and registers the
tier's cluster. The tier's slurmctld is left as it is: sacctmgr reads a copy of slurm.conf
that names slurmdbd (`SLURM_CONF`), so the tier's other modules see no accounting; squeue
(for `Sacctmgr.busy`) reaches the tier's slurmctld through the same copy. Everything runs on
the controller through the library, as the slurmctld charm's leader would.

`SACCTMGR_RECORD=<dir>` writes the answers of `Sacctmgr.read`'s queries to `<dir>`: the unit
tests' recordings (`tests/unit/hpc_libs/vectors/sacctmgr`) are made that way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from incluster import PARTITION, Cluster

RECORDINGS = Path(__file__).parents[1] / "unit" / "hpc_libs" / "vectors" / "sacctmgr"
CONF_DIR = "/etc/slurm-accounts-test"
DB_PASSWORD = "accounts-test-db"
CLUSTER_NAME = "slurmtests"

SLURMDBD_SETUP = """
from hpc_libs.slurm.slurmdbd import DbdHosts, SlurmdbdManager, StorageSettings

manager = SlurmdbdManager()
manager.jwt_key.set(manager.jwt_key.generate())
written = manager.write_config(
    DbdHosts(primary=args["hostname"]),
    StorageSettings("127.0.0.1", 3306, "slurm_acct_db", "slurm", args["password"]),
)
manager.service.enable()
manager.service.restart()
result = {"written": written, "active": manager.service.is_active()}
"""

SLURMDBD_TEARDOWN = """
from hpc_libs.slurm.slurmdbd import SlurmdbdManager

manager = SlurmdbdManager()
manager.service.stop()
manager.service.disable()
manager.config.path.unlink(missing_ok=True)
manager.jwt_key.path.unlink(missing_ok=True)
result = True
"""

#: Runs in every snippet below: sacctmgr and squeue read the test's slurm.conf, and every
#: command the library runs is counted.
LIBRARY = """
import dataclasses, time
os.environ["SLURM_CONF"] = args["conf"]
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm import accounts

calls = []
_run = host.run

def counted(argv, **kwargs):
    calls.append(list(argv))
    return _run(argv, **kwargs)

host.run = counted
sacctmgr = accounts.Sacctmgr()

def state_dict(state):
    return json.loads(json.dumps(dataclasses.asdict(state)))

def reconcile(text, previous, prune=False):
    document = accounts.Document.parse(text)
    managed = accounts.Managed.from_json(previous)
    started = time.monotonic()
    before = len(calls)
    plan = accounts.plan(
        document, sacctmgr.read(), managed, busy=sacctmgr.busy(), prune_unmanaged=prune
    )
    sacctmgr.apply(plan)
    return {
        "changes": [c.summary for c in plan.changes],
        "held": list(plan.held),
        "seconds": time.monotonic() - started,
        "calls": len(calls) - before,
    }
"""

RECONCILE = (
    LIBRARY
    + """
result = reconcile(args["document"], args["previous"], args.get("prune", False))
"""
)

READ = (
    LIBRARY
    + """
document = accounts.Document.parse(args["document"])
managed = accounts.Managed.from_json(args["previous"])
state = sacctmgr.read()
started = time.monotonic()
plan = accounts.plan(document, state, managed, busy=sacctmgr.busy())
result = {
    "state": state_dict(state),
    "changes": [c.summary for c in plan.changes],
    "held": list(plan.held),
    "drift": list(accounts.drift(document, state, managed)),
    "calls": len(calls),
}
"""
)

RECORD = """
os.environ["SLURM_CONF"] = args["conf"]
from hpc_libs.machine import host
from hpc_libs.slurm import accounts

result = {
    name: host.run(accounts.show(what, columns)).stdout
    for name, what, columns in (
        ("qos", "qos", accounts.QOS_FORMAT),
        ("associations", "association", accounts.ASSOC_FORMAT),
        ("users", "user", accounts.USER_FORMAT),
        ("descriptions", "account", accounts.DESCRIPTION_FORMAT),
    )
}
"""

DOCUMENT_A = (RECORDINGS / "document.yaml").read_text()
"""The unit tests' sample document: their recordings are slurmdbd's answers once it is applied."""

DOCUMENT_B = """
qos:
  short: {priority: 50, max-wall: "00:20:00", grp-jobs: 3}
  long: {max-wall: "2-00:00:00", preempt: [short]}
accounts:
  physics: {description: "Physics", fairshare: 10, qos: [normal, long], max-submit-jobs: 9}
  biology: {parent: physics, grp-tres: "cpu=16"}
users:
  alice: {accounts: [biology], admin-level: none}
  dave: {accounts: [physics, biology], default-account: biology, fairshare: 7}
"""

EMPTY = ""
NOTHING = "{}"


def managed_union(*documents: str) -> str:
    """The JSON `Managed` of several documents together, as a test's `previous`."""
    import json

    import yaml

    names: dict[str, set[str]] = {"qos": set(), "accounts": set(), "users": set()}
    for text in documents:
        data: dict[str, Any] = yaml.safe_load(text) or {}
        for kind, found in names.items():
            found.update(data.get(kind) or {})
    return json.dumps({kind: sorted(found) for kind, found in names.items()})


@pytest.fixture(scope="module")
def accounting(cluster: Cluster) -> Iterator[dict[str, str]]:
    """MariaDB and slurmdbd on the controller, a slurm.conf naming it; all gone after."""
    ctl = cluster.controller
    cluster.sh(ctl, "systemctl", "start", "mariadb", timeout=120)
    sql = (
        "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
        f"CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY '{DB_PASSWORD}';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'%';"
    )
    cluster.sh(ctl, "mysql", "-e", sql)
    setup = cluster.py(ctl, SLURMDBD_SETUP, hostname=ctl.name, password=DB_PASSWORD)
    assert setup["active"], ctl.journal("slurmdbd", 50)
    conf = cluster.sh(ctl, "cat", "/etc/slurm/slurm.conf")
    ctl.write_file(
        f"{CONF_DIR}/slurm.conf",
        conf
        + "\nAccountingStorageType=accounting_storage/slurmdbd"
        + f"\nAccountingStorageHost={ctl.name}\n",
    )
    cluster.sh(ctl, "cp", "-p", "/etc/slurm/slurm.key", f"{CONF_DIR}/slurm.key")
    settings = {"conf": f"{CONF_DIR}/slurm.conf"}
    wait_for_slurmdbd(cluster, settings)
    cluster.sh(
        ctl,
        "env",
        f"SLURM_CONF={settings['conf']}",
        "sacctmgr",
        "-i",
        "add",
        "cluster",
        CLUSTER_NAME,
    )
    try:
        yield settings
    finally:
        cluster.py(ctl, SLURMDBD_TEARDOWN)
        ctl.exec(["systemctl", "stop", "mariadb"], timeout=120)
        ctl.exec(["rm", "-rf", CONF_DIR])


def wait_for_slurmdbd(cluster: Cluster, settings: dict[str, str]) -> None:
    import time

    deadline = time.monotonic() + 60
    while True:
        proc = cluster.controller.exec(
            ["env", f"SLURM_CONF={settings['conf']}", "sacctmgr", "--noheader", "show", "cluster"]
        )
        if proc.returncode == 0:
            return
        log = cluster.controller.exec(["tail", "-n", "30", "/var/log/slurm/slurmdbd.log"]).stdout
        journal = cluster.controller.journal("slurmdbd", 30)
        assert time.monotonic() < deadline, f"{proc.stderr}\n{log}\n{journal}"
        time.sleep(1)


def sacctmgr(cluster: Cluster, settings: dict[str, str], *argv: str) -> str:
    """Run sacctmgr by hand on the controller (as an operator would)."""
    return cluster.sh(
        cluster.controller, "env", f"SLURM_CONF={settings['conf']}", "sacctmgr", "-i", *argv
    )


def reconcile(
    cluster: Cluster, settings: dict[str, str], document: str, previous: str, prune: bool = False
) -> dict[str, Any]:
    return cluster.py(
        cluster.controller,
        RECONCILE,
        document=document,
        previous=previous,
        prune=prune,
        **settings,
    )


def read(
    cluster: Cluster, settings: dict[str, str], document: str, previous: str
) -> dict[str, Any]:
    return cluster.py(cluster.controller, READ, document=document, previous=previous, **settings)


def managed_state(state: dict[str, Any], previous: str) -> dict[str, Any]:
    """The part of a read state that names in `previous` (JSON Managed) cover."""
    import json

    names = json.loads(previous)
    return {kind: {n: v for n, v in state[kind].items() if n in names[kind]} for kind in names}


def clear(cluster: Cluster, settings: dict[str, str], *documents: str) -> None:
    """Remove everything the documents manage (the empty document, previously them)."""
    result = reconcile(cluster, settings, EMPTY, managed_union(*documents))
    assert not result["held"], result


def test_applied_document_needs_no_change(cluster: Cluster, accounting: dict[str, str]):
    first = reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    assert first["changes"], first

    again = read(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))
    if record := os.environ.get("SACCTMGR_RECORD"):
        answers = cluster.py(cluster.controller, RECORD, **accounting)
        for name, text in answers.items():
            (Path(record) / f"{name}.txt").write_text(text)

    assert again["changes"] == [], again["changes"]
    assert again["drift"] == []
    physics = again["state"]["accounts"]["physics"]
    assert physics["settings"]["fairshare"] == "100"
    assert physics["description"] == "physics dept"
    assert again["state"]["users"]["alice"]["default_account"] == "theory"
    clear(cluster, accounting, DOCUMENT_A)


def test_a_then_b_is_b_on_empty(cluster: Cluster, accounting: dict[str, str]):
    both = managed_union(DOCUMENT_A, DOCUMENT_B)
    reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    reconcile(cluster, accounting, DOCUMENT_B, managed_union(DOCUMENT_A))
    a_then_b = read(cluster, accounting, DOCUMENT_B, both)
    assert a_then_b["changes"] == [], a_then_b["changes"]

    clear(cluster, accounting, DOCUMENT_A, DOCUMENT_B)
    reconcile(cluster, accounting, DOCUMENT_B, NOTHING)
    b_alone = read(cluster, accounting, DOCUMENT_B, both)

    assert managed_state(a_then_b["state"], both) == managed_state(b_alone["state"], both)
    clear(cluster, accounting, DOCUMENT_B)


def test_hand_made_change_is_drift_and_put_back(cluster: Cluster, accounting: dict[str, str]):
    reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    sacctmgr(
        cluster, accounting, "modify", "account", "where", "name=physics", "set", "fairshare=7"
    )
    sacctmgr(cluster, accounting, "remove", "user", "where", "name=bob", "account=theory")

    drifted = read(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))
    assert "account physics: fairshare is 7, the document says 100" in drifted["drift"]
    assert "user bob: missing" in drifted["drift"]

    reconcile(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))
    assert read(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))["drift"] == []
    clear(cluster, accounting, DOCUMENT_A)


def test_unmanaged_account_is_left_alone(cluster: Cluster, accounting: dict[str, str]):
    sacctmgr(cluster, accounting, "add", "account", "handmade", "fairshare=3")
    sacctmgr(cluster, accounting, "add", "user", "erin", "account=handmade")

    result = reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    after = read(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))

    assert not any("handmade" in change or "erin" in change for change in result["changes"])
    assert after["state"]["accounts"]["handmade"]["settings"]["fairshare"] == "3"
    assert "handmade" in after["state"]["users"]["erin"]["associations"]
    pruned = reconcile(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A), prune=True)
    assert "remove account where name=handmade" in pruned["changes"], pruned
    clear(cluster, accounting, DOCUMENT_A)


def test_removal_with_a_pending_job_is_held(cluster: Cluster, accounting: dict[str, str]):
    ctl = cluster.controller
    reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    ctl.exec(["useradd", "--no-create-home", "carol"])
    job = cluster.sh(
        ctl,
        "runuser",
        "-u",
        "carol",
        "--",
        "sbatch",
        "--parsable",
        "--hold",
        "--account=chemistry",
        f"--partition={PARTITION}",
        "--chdir=/tmp",
        "--wrap=true",
    ).strip()
    without_chemistry = DOCUMENT_A.replace(
        "  chemistry: {fairshare: 30, qos: [normal, scavenger]}\n", ""
    )
    without_chemistry = without_chemistry.replace("  carol: {accounts: [chemistry]}\n", "")
    try:
        held = reconcile(cluster, accounting, without_chemistry, managed_union(DOCUMENT_A))
        state = read(cluster, accounting, without_chemistry, managed_union(DOCUMENT_A))["state"]
        assert held["held"] == [
            "user carol in account chemistry: it has jobs",
            "account chemistry: it or an account below it has jobs",
        ], held
        assert "chemistry" in state["accounts"]
        assert "chemistry" in state["users"]["carol"]["associations"]
    finally:
        cluster.sh(ctl, "scancel", job)
    ended = reconcile(cluster, accounting, without_chemistry, managed_union(DOCUMENT_A))
    state = read(cluster, accounting, without_chemistry, managed_union(DOCUMENT_A))["state"]
    assert ended["held"] == []
    assert "chemistry" not in state["accounts"]
    assert "carol" not in state["users"]
    clear(cluster, accounting, DOCUMENT_A)


def test_hostile_description_does_not_confuse_the_reader(
    cluster: Cluster, accounting: dict[str, str]
):
    reconcile(cluster, accounting, DOCUMENT_A, NOTHING)
    forged = "x|y\nghost|Physics dept\nphysics|Physics dept"
    sacctmgr(cluster, accounting, "add", "account", "evil", f"description={forged}")
    shown = sacctmgr(
        cluster,
        accounting,
        "--parsable2",
        "--noheader",
        "show",
        "account",
        "evil",
        "format=Account,Description",
    )
    assert "\nghost|" in shown, f"sacctmgr no longer prints a newline verbatim: {shown!r}"

    after = read(cluster, accounting, DOCUMENT_A, managed_union(DOCUMENT_A))
    accounts = after["state"]["accounts"]
    if record := os.environ.get("SACCTMGR_RECORD"):
        answers = cluster.py(cluster.controller, RECORD, **accounting)
        (Path(record) / "hostile-descriptions.txt").write_text(answers["descriptions"])

    assert "ghost" not in accounts
    assert accounts["evil"]["description"] is None
    # physics is named twice now: its description reads as unknown and is set again.
    assert accounts["physics"]["description"] is None
    assert after["changes"] == ["modify account where name=physics set description=physics dept"]
    sacctmgr(cluster, accounting, "remove", "account", "evil")
    clear(cluster, accounting, DOCUMENT_A)


def test_measure_1000_users_in_100_accounts(cluster: Cluster, accounting: dict[str, str]):
    """Not a timed assertion: prints the reconcile's seconds and sacctmgr calls."""
    accounts = "\n".join(f"  acct{i:03}: {{fairshare: {1 + i % 5}}}" for i in range(100))
    users = "\n".join(f"  user{i:04}: {{accounts: [acct{i % 100:03}]}}" for i in range(1000))
    document = f"accounts:\n{accounts}\nusers:\n{users}\n"

    applied = reconcile(cluster, accounting, document, NOTHING)
    again = reconcile(cluster, accounting, document, managed_union(document))
    removed = reconcile(cluster, accounting, EMPTY, managed_union(document))

    print(
        f"\n1,000 users in 100 accounts from empty: {applied['seconds']:.1f} s, "
        f"{applied['calls']} commands "
        f"({len(applied['changes'])} changes, 4 sacctmgr reads, 1 squeue)"
        f"\nno-change reconcile: {again['seconds']:.1f} s, {again['calls']} commands"
        f"\nremoving them all: {removed['seconds']:.1f} s, {removed['calls']} commands"
    )
    assert again["changes"] == []
    assert len(applied["changes"]) < 120
