"""The surfaces of slurmd, sackd, slurmrestd and slurmdbd: options, actions and databags.

Each daemon reads slurmctld's `ControllerData` (the controllers become `--conf-server`); slurmd
publishes its partition (checked here as slurmctld would read it), runs `slurmd -C` and takes
node parameters; slurmrestd's options become its `ExecStart=`; slurmdbd's option, the
database's answer and its peers become slurmdbd.conf, which the real Slurm judges.
"""

import base64
import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import harness
import oracle
import pytest
import strategies as s
from charm_testing import FakeMachine, already_installed
from hpc_libs.interfaces.slurmd import ComputeData
from hypothesis import strategies as st
from ops import testing
from real_slurm import RealSlurm
from surface import Surface

KEY = base64.b64encode(b"k" * 1024).decode()
PASSWORD = "Zq3xV9pL2mN8rT5wY1cB6dF4hJ7kQ0sA"
AUTH = testing.Secret(tracked_content={"key": KEY})
JWT = testing.Secret(tracked_content={"key": KEY})
USER = testing.Secret(tracked_content={"username": "relation-7", "password": PASSWORD})
CONTROLLERS = [{"hostname": "ctl0", "address": "10.0.0.1", "port": 6817}, {"address": "10.0.0.2"}]
DAEMONS = ("slurmd", "sackd", "slurmrestd", "slurmdbd")


def controller_data(**raw: str) -> dict[str, str]:
    data = {
        "auth_secret_id": json.dumps(AUTH.id),
        "jwt_key_id": json.dumps(JWT.id),
        "controllers": json.dumps(CONTROLLERS),
    }
    return {**data, **raw}


def mysql(**raw: str) -> testing.Relation:
    data = {"database": "slurm_acct_db", "endpoints": "10.0.0.5:3306", "secret-user": USER.id}
    return testing.Relation("database", remote_app_name="mysql", remote_app_data={**data, **raw})


def installed(charm: str, *relations: testing.RelationBase, config=None) -> testing.State:
    relations = (*relations,)
    if charm == "slurmdbd" and not any(r.endpoint == "database" for r in relations):
        relations = (*relations, mysql())
    if charm == "slurmdbd" and not any(isinstance(r, testing.PeerRelation) for r in relations):
        relations = (*relations, testing.PeerRelation("slurmdbd-peer"))
    return testing.State(
        leader=True,
        relations=list(relations),
        secrets=[AUTH, JWT, USER],
        config={"slurm-package-source": "archive", **(config or {})},
        stored_states={already_installed(harness._TYPES[charm])},
    )


def slurmctld(raw: dict[str, str] | None = None) -> testing.Relation:
    return testing.Relation(
        "slurmctld", remote_app_name="slurmctld", remote_app_data=raw or controller_data()
    )


def sackd_fetched(machine, root) -> None:
    """sackd fetched the cluster's slurm.conf (slurmrestd waits for it)."""
    cached = root / "run/slurm/conf/slurm.conf"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text("clustername=c\nauthalttypes=auth/jwt\n")


def changed(relation: testing.RelationBase):
    return lambda ctx: ctx.on.relation_changed(relation, remote_unit=0)


def entries(raw: str) -> int | None:
    """How many controllers a raw `controllers` field lists (None if not a list)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return len(value) if isinstance(value, list) else None


def controller_databag() -> st.SearchStrategy[dict[str, str]]:
    port = st.sampled_from(s.PORT_VALUES)
    return st.fixed_dictionaries(
        {
            "auth_secret_id": st.one_of(
                st.just(json.dumps(AUTH.id)), s.raw_field(s.mutated([AUTH.id]))
            ),
            "controllers": s.raw_field(st.lists(s.host_entry(), min_size=1, max_size=3)),
        },
        optional={
            # The previous release's name of the secret id, read while the new one is absent.
            "auth_key_id": s.raw_field(s.mutated([AUTH.id])),
            "jwt_key_id": s.raw_field(s.mutated([JWT.id])),
            "config_digest": s.raw_field(s.mutated(["0123abcd", "f" * 64])),
            "srun_port_range": s.raw_field(st.fixed_dictionaries({"first": port, "last": port})),
        },
    )


CONTROLLER_SEEDS = (
    [
        controller_data(controllers=json.dumps([{"address": a, "port": 6817}]))
        for a in s.HOST_VALUES
    ]
    + [
        controller_data(controllers=json.dumps([{"address": "10.0.0.1", "port": p}]))
        for p in s.PORT_VALUES
    ]
    + [
        controller_data(controllers=s.deep_json(5000)),
        controller_data(srun_port_range=json.dumps({"first": 63000, "last": 60001})),
        controller_data(srun_port_range=json.dumps({"first": True, "last": 2})),
        controller_data(config_digest=json.dumps("ZZ\nx")),
        controller_data(auth_secret_id=json.dumps("secret:x --foo")),
        controller_data(auth_key_id=json.dumps("secret:x --foo")),
        {
            k: v
            for k, v in controller_data(auth_key_id=json.dumps(AUTH.id)).items()
            if k != "auth_secret_id"
        },
    ]
)


def daemon_baseline(
    charm: str, prepare: Callable[[FakeMachine, Path], None] | None = None
) -> harness.Outcome:
    """`charm`'s outcome with a benign controller: installed, then its relation-changed."""
    benign = slurmctld()
    return harness.run(charm, changed(benign), installed(charm, benign), "baseline", prepare)


@pytest.mark.parametrize("charm", DAEMONS)
def test_controller_databag(charm: str, real_slurm: RealSlurm):
    """slurmctld's ControllerData, as every daemon reads it: controllers become --conf-server."""
    prepare = sackd_fetched if charm == "slurmrestd" else None
    surface = Surface(f"{charm} <- slurmctld ControllerData", daemon_baseline(charm, prepare))

    def example(raw: dict[str, str]) -> None:
        relation = slurmctld(raw)
        out = harness.run(charm, changed(relation), installed(charm, relation), raw, prepare)
        surface.check(out, raw, servers=entries(raw.get("controllers", "")))

    surface.run(CONTROLLER_SEEDS, controller_databag(), example)
    surface.finish(real_slurm)


# slurmd: its options, the node-config action, slurmd -C, and the partition it publishes.

SLURMD_OPTIONS: dict[str, list[Any]] = {
    "partition-config": [
        "MaxTime=60",
        "MaxTime=60 Nodes=ALL",
        "MaxTime=14days",
        "MaxNodes=4294967296",
        "OverSubscribe=FORCE:65536",
        "Default=YES",
        "PartitionName=evil",
        "AllowAccounts=a,b DefaultTime=1-0",
        "State=DOWN#",
    ],
    "default-node-state": ["idle", "down", "drain", "", "IDLE"],
    "default-node-reason": ["new node", "cost $$5", "a\nb", 'x"y', "r" * 2000, ""],
    "retire-timeout": ["unlimited", "60", "4294967296", "-1", "1e9", "²", ""],
    "slurm-package-source": ["auto", "archive", "ppa", "x"],
}


def published_partition_is_valid(out: harness.Outcome, value: object) -> None:
    """What slurmd publishes reads back as valid ComputeData (slurmctld's reader agrees)."""
    for relation in out.state.relations:
        if relation.endpoint == "slurmctld" and relation.local_app_data:
            data = {k: json.loads(v) for k, v in relation.local_app_data.items()}
            ComputeData.model_validate(data)  # raises: slurmd published what slurmctld refuses


@pytest.mark.parametrize("option", sorted(SLURMD_OPTIONS))
def test_slurmd_options(option: str):
    surface = Surface(f"slurmd option {option}", daemon_baseline("slurmd"))

    def example(value: str) -> None:
        relation = slurmctld()
        state = installed("slurmd", relation, config={option: value})
        out = harness.run("slurmd", lambda ctx: ctx.on.config_changed(), state, value)
        surface.check(out, value)
        published_partition_is_valid(out, value)

    seeds = SLURMD_OPTIONS[option]
    strategy = s.parameters(seeds) if option == "partition-config" else s.mutated(seeds)
    surface.run(seeds, strategy, example)
    surface.finish()


NODE_PARAMETER_SEEDS = [
    "RealMemory=2000",
    "Weight=10 Features=fast",
    "CPUs=70000",
    "Gres=gpu:2",
    "NodeName=evil",
    "NodeAddr=1.2.3.4",
    "Features=a,b MemSpecLimit=100",
    "RealMemory=2000 State=DRAIN",
    "TmpDisk=18446744073709551616",
]


def assert_node_conf_within(
    out: harness.Outcome, base: harness.Outcome, what: str, extra: Iterable[str] = ()
) -> None:
    """`out`'s SLURMD_CONF names no key beyond the baseline's and `extra` (the input's own)."""
    conf = out.files.get("etc/default/slurmd") or ""
    allowed = _node_conf_keys(base.files["etc/default/slurmd"]) | {k.lower() for k in extra}
    assert _node_conf_keys(conf) <= allowed, f"injection: {what} gave {conf}"


def test_slurmd_node_config_action():
    base = daemon_baseline("slurmd")
    surface = Surface("slurmd action node-config", base)

    def example(params: dict[str, Any]) -> None:
        relation = slurmctld()
        out = harness.run(
            "slurmd",
            lambda ctx: ctx.on.action("node-config", params=params),
            installed("slurmd", relation),
            params,
        )
        surface.check(out, params)
        extra = oracle.option_keys(str(params.get("parameters", "")))
        assert_node_conf_within(out, base, f"node-config {params!r}", extra)

    seeds = [{"parameters": p} for p in NODE_PARAMETER_SEEDS] + [
        {"parameters": "RealMemory=2000", "reset": True}
    ]
    strategy = st.fixed_dictionaries(
        {"parameters": s.parameters(NODE_PARAMETER_SEEDS)}, optional={"reset": st.booleans()}
    )
    surface.run(seeds, strategy, example)
    surface.finish()


def _node_conf_keys(environment: str) -> set[str]:
    for line in environment.splitlines():
        if line.startswith("SLURMD_CONF="):
            value = line.partition("=")[2].strip('"')
            return {word.partition("=")[0].lower() for word in value.split()}
    return set()


HARDWARE_SEEDS = [
    harness.HARDWARE,
    harness.HARDWARE.replace("CPUs=2", "CPUs=²"),
    harness.HARDWARE.replace("CPUs=2", "CPUs=70000"),
    harness.HARDWARE.replace("RealMemory=1000", "RealMemory=" + "9" * 5000),
    harness.HARDWARE.replace("CPUs=2", "CPUs=2 Feature=x"),
    harness.HARDWARE.replace("CPUs=2", "CPUs=2\nNodeName=evil"),
    "",
    "garbage",
    "NodeName=host0\n",
]


def test_slurmd_hardware_detection():
    """`slurmd -C` output (the machine's, so a broken driver or hwloc) becomes SLURMD_CONF."""
    base = daemon_baseline("slurmd")
    surface = Surface("slurmd <- slurmd -C output", base)

    def example(output: str) -> None:
        def prepare(machine, root):
            machine.responses[("slurmd", "-C")] = output

        relation = slurmctld()
        out = harness.run(
            "slurmd", changed(relation), installed("slurmd", relation), output, prepare
        )
        surface.check(out, output)
        assert_node_conf_within(out, base, f"slurmd -C {output!r}")

    lines = [line for seed in HARDWARE_SEEDS[:1] for line in seed.split()]
    strategy = st.lists(s.mutated(lines), min_size=1, max_size=8).map(" ".join)
    surface.run(HARDWARE_SEEDS, strategy, example)
    surface.finish()


# slurmrestd: its options become ExecStart=.

RESTD_OPTIONS: dict[str, list[Any]] = {
    "listen-address": [
        "",
        "10.0.0.1",
        "Rest-0",
        "NaN",
        "fe80::1%eth0",
        "fe80::1%$x",
        "fe80::1%a,b",
        "::",
        "a b",
    ],
    "port": [6820, 1, 65535, 0, 65536, -1, 2**40],
    "threads": [20, 1, 1024, 0, 1025, 2**40],
    "max-connections": [124, 1, 8192, 0, 8193, -1],
}


@pytest.mark.parametrize("option", sorted(RESTD_OPTIONS))
def test_slurmrestd_options(option: str):
    base = daemon_baseline("slurmrestd", sackd_fetched)
    surface = Surface(f"slurmrestd option {option}", base)

    def example(value: Any) -> None:
        relation = slurmctld()
        state = installed("slurmrestd", relation, config={option: value})
        out = harness.run(
            "slurmrestd", lambda ctx: ctx.on.config_changed(), state, value, sackd_fetched
        )
        surface.check(out, value)

    seeds = RESTD_OPTIONS[option]
    if isinstance(seeds[1], int):
        strategy = st.one_of(st.sampled_from(seeds), st.integers(-(2**40), 2**40))
    else:
        strategy = s.mutated([x for x in seeds if x])
    surface.run(seeds, strategy, example)
    surface.finish()


# slurmdbd: its option, the database's answer, its peers.


def test_slurmdbd_conf_parameters(real_slurm: RealSlurm):
    base = daemon_baseline("slurmdbd")
    surface = Surface("slurmdbd option slurmdbd-conf-parameters", base)

    def example(value: str) -> None:
        relation = slurmctld()
        state = installed("slurmdbd", relation, config={"slurmdbd-conf-parameters": value})
        out = harness.run("slurmdbd", lambda ctx: ctx.on.config_changed(), state, value)
        surface.check(out, value, extra_keys=oracle.option_keys(value))

    seeds = s.slurmdbd_conf_seeds()
    surface.run(seeds, s.parameters(seeds), example)
    surface.finish(real_slurm)


MYSQL_FIELDS = {
    "endpoints": ["10.0.0.5:3306", "[fe80::1]:3306", "a:1,b:2", "file:///run/mysqld.sock", "h:0"],
    "database": ["slurm_acct_db", "x y", "a#b"],
    "username": ["relation-7", "a b", "-h"],
    "password": [PASSWORD, "a#b", "p=1", "x" * 300, "p w"],
    "version": ["8.0.39", "x\ny"],
    "read-only-endpoints": ["10.0.0.6:3306", "file://x", "a b"],
    "secret-user": [USER.id, "secret:x y", "secret:nope"],
}


def test_mysql_databag(real_slurm: RealSlurm):
    base = daemon_baseline("slurmdbd")
    surface = Surface("slurmdbd <- mysql_client", base)

    def example(raw: dict[str, str]) -> None:
        database = mysql(**raw)
        out = harness.run(
            "slurmdbd", changed(database), installed("slurmdbd", slurmctld(), database), raw
        )
        surface.check(out, raw)

    seeds = [{k: v} for k, values in MYSQL_FIELDS.items() for v in values]
    strategy = st.fixed_dictionaries(
        {}, optional={k: s.mutated(v) for k, v in MYSQL_FIELDS.items()}
    )
    surface.run(seeds, strategy, example)
    surface.finish(real_slurm)


def test_slurmdbd_peer_databags(real_slurm: RealSlurm):
    """The peers' hosts (DbdHost/DbdBackupHost) and the join order the leader keeps."""

    def run(raw: tuple[dict[str, str], dict[str, str]]) -> harness.Outcome:
        app, unit = raw
        peer = testing.PeerRelation("slurmdbd-peer", local_app_data=app, peers_data={1: unit})
        return harness.run(
            "slurmdbd", changed(peer), installed("slurmdbd", slurmctld(), peer), raw
        )

    order = json.dumps([{"unit": "slurmdbd/0"}, {"unit": "slurmdbd/1"}])
    benign = ({"dbds": order}, {"hostname": json.dumps("dbd1"), "address": json.dumps("10.0.0.8")})
    surface = Surface("slurmdbd <- slurmdbd-peer", run(benign))

    def example(raw: tuple[dict[str, str], dict[str, str]]) -> None:
        surface.check(run(raw), raw)

    seeds = [
        ({"dbds": order}, {"hostname": json.dumps(h), "address": json.dumps(a)})
        for h, a in (
            ("dbd1", "10.0.0.8"),
            ("dbd_1", "10.0.0.8"),
            ("dbd1\nx=1", "10.0.0.8"),
            ("dbd1", "fe80::1%a,b"),
        )
    ] + [({"dbds": s.deep_json(5000)}, {}), ({"dbds": order}, {"hostname": s.deep_json(5000)})]
    unit = st.fixed_dictionaries(
        {},
        optional={
            "hostname": s.raw_field(s.mutated(["dbd1"])),
            "address": s.raw_field(s.mutated(s.HOST_VALUES)),
        },
    )
    app = st.fixed_dictionaries(
        {
            "dbds": s.raw_field(
                st.lists(
                    st.fixed_dictionaries({"unit": s.mutated(["slurmdbd/1", "slurmdbd/0"])}),
                    max_size=3,
                )
            )
        }
    )
    surface.run(seeds, st.tuples(app, unit), example)
    surface.finish(real_slurm)


SECRET_SEEDS: list[dict[str, str]] = [
    {"key": KEY},
    {"key": "not base64!"},
    {"key": ""},
    {"key": "a\nb"},
    {"key": base64.b64encode(b"k" * 10).decode()},
    {"other": KEY},
    {"key": "=" * 4},
]


@pytest.mark.parametrize("charm", DAEMONS)
def test_auth_key_secret_content(charm: str):
    """The auth key slurmctld grants: its content is another application's input too."""
    prepare = sackd_fetched if charm == "slurmrestd" else None
    surface = Surface(f"{charm} <- slurmctld auth key secret", daemon_baseline(charm, prepare))

    def example(content: dict[str, str]) -> None:
        secret = testing.Secret(tracked_content=content or {"x": "y"})
        relation = slurmctld(controller_data(auth_secret_id=json.dumps(secret.id)))
        state = installed(charm, relation)
        state = dataclasses.replace(state, secrets=[secret, JWT, USER])
        out = harness.run(charm, changed(relation), state, content, prepare)
        surface.check(out, content)

    strategy = st.dictionaries(
        st.sampled_from(["key", "other"]), s.mutated([KEY, "a2V5"]), min_size=1, max_size=2
    )
    surface.run(SECRET_SEEDS, strategy, example)
    surface.finish()
