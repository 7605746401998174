"""The reconcile's property: applying document A then B leaves what B alone leaves on empty.

For the names the documents manage, over the in-memory model of sacctmgr (`sacctmgr_model`,
kept honest by tests/slurm/test_accounts.py on a real slurmdbd). Documents are drawn from
small pools of names so that A and B share QoS, accounts and users, move accounts under new
parents, drop keys and names.
"""

from typing import Any

import sacctmgr_model
import yaml
from hpc_libs.slurm.accounts import Busy, Document, Managed, State, plan
from hypothesis import given, settings
from hypothesis import strategies as st

QOS: tuple[str, ...] = ("q1", "q2", "q3", "normal")
ACCOUNTS: tuple[str, ...] = ("a1", "a2", "a3", "a4")
USERS: tuple[str, ...] = ("u1", "u2", "u3")
TIMES = ("10", "00:30:00", "1-00:00:00")
TRES = ("cpu=4", "cpu=8,mem=2G", "gres/gpu=1,node=2")


@st.composite
def qos_specs(draw: st.DrawFn, name: str, names: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["priority"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        spec["max-wall"] = draw(st.sampled_from(TIMES))
    if draw(st.booleans()):
        spec["grp-tres"] = draw(st.sampled_from(TRES))
    if draw(st.booleans()):
        spec["preempt-mode"] = draw(st.sampled_from(("requeue", "cancel", "cluster")))
    others = [q for q in [*names, "normal"] if q != name]
    spec["preempt"] = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
    return spec


@st.composite
def account_specs(draw: st.DrawFn, parents: list[str], qos: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"parent": draw(st.sampled_from(["root", *parents]))}
    if draw(st.booleans()):
        spec["fairshare"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        spec["max-jobs"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        spec["grp-tres"] = draw(st.sampled_from(TRES))
    if draw(st.booleans()):
        spec["qos"] = draw(st.lists(st.sampled_from(qos), unique=True, min_size=1))
        if draw(st.booleans()):
            spec["default-qos"] = draw(st.sampled_from(spec["qos"]))
    if draw(st.booleans()):
        spec["description"] = draw(st.sampled_from(("Dept one", "Dept two")))
    return spec


@st.composite
def user_specs(draw: st.DrawFn, accounts: list[str]) -> dict[str, Any]:
    mine = draw(st.lists(st.sampled_from(accounts), unique=True, min_size=1))
    spec: dict[str, Any] = {"accounts": mine, "default-account": draw(st.sampled_from(mine))}
    if draw(st.booleans()):
        spec["admin-level"] = draw(st.sampled_from(("none", "operator")))
    if draw(st.booleans()):
        spec["fairshare"] = draw(st.integers(1, 3))
    return spec


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A valid document over the pools of names, as YAML."""
    qos_names = draw(st.lists(st.sampled_from(QOS), unique=True))
    qos = {name: draw(qos_specs(name, qos_names)) for name in qos_names}
    known_qos = sorted({*qos_names, "normal"})
    account_names = draw(st.lists(st.sampled_from(ACCOUNTS), unique=True))
    accounts = {
        name: draw(account_specs(account_names[:index], known_qos))
        for index, name in enumerate(account_names)
    }
    user_names = draw(st.lists(st.sampled_from(USERS), unique=True)) if accounts else []
    users = {name: draw(user_specs(account_names)) for name in user_names}
    return yaml.safe_dump({"qos": qos, "accounts": accounts, "users": users})


def reconciled(document: Document, state: State, previous: Managed) -> State:
    return sacctmgr_model.apply(state, plan(document, state, previous, busy=Busy()))


def managed_part(state: State, names: Managed) -> tuple[Any, ...]:
    return (
        {n: s for n, s in state.qos.items() if n in names.qos},
        {n: a for n, a in state.accounts.items() if n in names.accounts},
        {n: u for n, u in state.users.items() if n in names.users},
    )


@settings(max_examples=40, deadline=None)
@given(documents(), documents())
def test_a_then_b_is_b_on_empty(a_text: str, b_text: str):
    a, b = Document.parse(a_text), Document.parse(b_text)
    empty = sacctmgr_model.empty()

    a_then_b = reconciled(b, reconciled(a, empty, Managed()), a.managed())
    b_alone = reconciled(b, empty, Managed())

    names = a.managed().union(b.managed())
    assert managed_part(a_then_b, names) == managed_part(b_alone, names)
    assert plan(b, a_then_b, b.managed(), busy=Busy()).changes == ()
