"""slurmctld's surfaces: its options, its actions, and every databag it reads.

Each test builds a settled leader (installed, keys made), fires one event carrying the
fuzzed input, and applies the suite's properties (surface.Surface). The real Slurm judges the
rendered files of all the test's examples at its end, in one batch.
"""

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import harness
import oracle
import pytest
import strategies as s
from charm_testing import already_installed
from hpc_libs.interfaces.controller import auth_key_digest
from hypothesis import strategies as st
from ops import testing
from real_slurm import RealSlurm
from surface import Surface

KEY = base64.b64encode(b"k" * 1024).decode()
PEER = "slurmctld-peer"
CHECKPOINT = "var/lib/slurm/checkpoint"


def databag(**fields: object) -> dict[str, str]:
    return {name: json.dumps(value) for name, value in fields.items()}


def secrets() -> list[testing.Secret]:
    return [
        testing.Secret(tracked_content={"key": KEY}, owner="app", label="slurm-auth-key"),
        testing.Secret(tracked_content={"key": KEY}, owner="app", label="slurm-jwt-key"),
    ]


def compute(app: str = "compute", raw: dict[str, str] | None = None) -> testing.Relation:
    data = raw or databag(
        partition={"partitionname": app, "nodes": [app]},
        nodeset={"nodeset": app, "feature": app},
    )
    return testing.Relation(
        "slurmd", remote_app_name=app, remote_app_data=data, remote_units_data={0: {}}
    )


def leader(*relations: testing.RelationBase, config: dict[str, Any] | None = None):
    if not any(isinstance(r, testing.PeerRelation) for r in relations):
        relations = (*relations, testing.PeerRelation(PEER))
    return testing.State(
        leader=True,
        relations=list(relations),
        secrets=secrets(),
        stored_states={already_installed("SlurmctldCharm")},
        config=config or {},
    )


def config_changed(ctx):
    return ctx.on.config_changed()


def baseline(state: testing.State, event=config_changed, prepare=None) -> harness.Outcome:
    return harness.run("slurmctld", event, state, "baseline", prepare)


# Options.

PARAMETER_OPTIONS = {
    "slurm-conf-parameters": (s.slurm_conf_seeds(), s.slurm_conf_grammar()),
    "cgroup-parameters": (s.cgroup_conf_seeds(), []),
}


def fuzz_option(
    option: str,
    seeds: Sequence[Any],
    strategy: st.SearchStrategy[Any],
    real_slurm: RealSlurm,
    *,
    corpus: Sequence[Any] = (),
    keys: Callable[[Any], Iterable[str]] = lambda value: (),
) -> None:
    """Set `option` of a leader serving a partition to each value, through config-changed.

    `keys(value)`: the slurm.conf keys the value itself may add (the parameter options').
    """
    surface = Surface(f"slurmctld option {option}", baseline(leader(compute())))

    def example(value: Any) -> None:
        out = harness.run(
            "slurmctld", config_changed, leader(compute(), config={option: value}), value
        )
        surface.check(out, value, extra_keys=keys(value))

    surface.run(seeds, strategy, example, corpus)
    surface.finish(real_slurm)


@pytest.mark.parametrize("option", sorted(PARAMETER_OPTIONS))
def test_parameter_options(option: str, real_slurm: RealSlurm):
    seeds, corpus = PARAMETER_OPTIONS[option]
    strategy = s.parameters([*seeds, *corpus])
    fuzz_option(option, seeds, strategy, real_slurm, corpus=corpus, keys=oracle.option_keys)


SCALAR_SEEDS: dict[str, list[Any]] = {
    "cluster-name": ["charmed-hpc", "a" * 40, "A_b-1", "", "a b", "x\nSlurmUser=root", "c#1", "é"],
    "default-partition": ["compute", "", "nope", "a b", "compute\nNodes=ALL", "ALL"],
    "process-isolation": ["cgroup", "none", "", "CGROUP", "cgroup\n"],
    "slurm-package-source": ["auto", "ppa", "archive", "", "ppa; rm -rf /"],
    "max-node-count": [1, 1024, 0, -1, 65535, 65536, 2**31, 2**63],
    "slurmctld-timeout": [6, 12, 1, 0, -5, 65535, 65536, 2**40],
    "message-timeout": [3, 6, 1, 0, 100, 65536, 2**40],
}


def scalar_strategy(option: str) -> st.SearchStrategy[Any]:
    seeds = SCALAR_SEEDS[option]
    if isinstance(seeds[0], int):
        return st.one_of(st.sampled_from(seeds), st.integers(-(2**70), 2**70), st.integers(0, 200))
    return s.mutated([x for x in seeds if x] or ["x"])


@pytest.mark.parametrize("option", sorted(SCALAR_SEEDS))
def test_scalar_options(option: str, real_slurm: RealSlurm):
    fuzz_option(option, SCALAR_SEEDS[option], scalar_strategy(option), real_slurm)


# future-nodes with max-node-count: placeholders fill Slurm's node table, so they are judged
# together. Seeds: the bounds of each shape (Slurm's uint16/uint32/uint64 fields), and totals
# at and past half the table.
FUTURE_NODES_SEEDS: list[tuple[str, int]] = [
    ("compute=4 cpus=8 realmemory=32000", 1024),
    ("compute=512", 1024),
    ("compute=513", 1024),
    ("compute=300\ngpu=213", 1024),
    ("compute=1", 1),
    ("compute=1", 2),
    ("compute=4096", 8192),
    ("compute=4096", 65533),
    (f"compute=2 cpus=65533 realmemory={2**64 - 3} tmpdisk={2**32 - 3}", 1024),
    ("compute=2 cpus=65534", 1024),
    (f"compute=2 realmemory={2**64 - 2}", 1024),
    ("compute=2 tmpdisk=4294967294", 1024),
    ("compute=2 cpus=0", 1024),
    ("compute=²", 1024),
    ("compute=2 cpus=8 State=idle", 1024),
    ("compute=2\nNodeName=x", 1024),
]


def future_nodes_strategy() -> st.SearchStrategy[tuple[str, int]]:
    text = s.mutated([text for text, _ in FUTURE_NODES_SEEDS])
    count = st.one_of(st.sampled_from([1, 2, 1024, 8192, 65533]), st.integers(-5, 70000))
    return st.tuples(text, count)


def test_future_nodes_within_max_node_count(real_slurm: RealSlurm):
    state = leader(compute())
    surface = Surface("slurmctld options future-nodes, max-node-count", baseline(state))

    def example(value: tuple[str, int]) -> None:
        text, max_node_count = value
        config = {"future-nodes": text, "max-node-count": max_node_count}
        out = harness.run("slurmctld", config_changed, leader(compute(), config=config), value)
        placeholder_keys = ["NodeName", "State", "Features"] * len(text.split("\n"))
        surface.check(out, value, extra_keys=[*placeholder_keys, *oracle.option_keys(text)])

    surface.run(FUTURE_NODES_SEEDS, future_nodes_strategy(), example)
    surface.finish(real_slurm)


# Actions: checked parameters; the commands they run keep the benign request's shape.


def argv_shape(command: list[str]) -> Counter[str]:
    """A command's words with the values cut: `key=` for `key=value`, `-x` for options."""
    shape: Counter[str] = Counter()
    for word in command:
        key, sep, _ = word.partition("=")
        shape[f"{key.lower()}=" if sep else (word if word.startswith("-") else "<arg>")] += 1
    return shape


def within(command: list[str], baseline: list[list[str]]) -> bool:
    """Whether `command` is a baseline command with some of its words left out, none added."""
    return any(
        command[:2] == base[:2] and not argv_shape(command) - argv_shape(base) for base in baseline
    )


ACTIONS: dict[str, tuple[dict[str, Any], dict[str, st.SearchStrategy[Any]]]] = {
    "resume": (
        {"nodename": "compute-0"},
        {"nodename": s.mutated(["compute-0", "compute-[0-3]", "a,b", "-h", "ALL"])},
    ),
    "set-node-state": (
        {"nodes": "compute-0", "state": "drain", "reason": "maintenance"},
        {
            "nodes": s.mutated(["compute-0", "compute-[0-3]", "-h"]),
            "state": s.mutated(["drain", "down", "resume", "idle", "undrain", "DRAIN"]),
            "reason": s.mutated(["maintenance", "cost $$5", "a b", "x State=idle"]),
        },
    ),
    "token": (
        {"username": "alice", "lifespan": 1800},
        {
            "username": s.mutated(["alice", "root", "-h", "a.b_c-d", "." * 3]),
            "lifespan": st.one_of(
                st.integers(-(2**40), 2**40), st.sampled_from([0, 1, 2147483647, 2**31])
            ),
        },
    ),
    "show-current-config": ({}, {}),
    "scaling-view": (
        {"partitions": "compute"},
        {"partitions": s.mutated(["compute", "compute,gpu", "-h", "compute;reboot", "a,,b"])},
    ),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_actions(action: str):
    benign, fields = ACTIONS[action]
    state = leader(compute())

    def prepare(machine, root):
        machine.responses[("scontrol", "token")] = "SLURM_JWT=eyJ.x.y\n"

    def fire(params):
        return lambda ctx: ctx.on.action(action, params=params)

    base = harness.run("slurmctld", fire(benign), state, benign, prepare)

    def example(params: dict[str, Any]) -> None:
        out = harness.run("slurmctld", fire(params), state, params, prepare)
        for command in out.machine.commands:
            assert within(command, base.machine.commands), f"{params!r} ran {command}"
            assert not any("\n" in word for word in command), (action, params, command)
        for name in ("slurmdbd.conf", "slurm.key", "jwt_hs256.key", KEY):
            assert name not in json.dumps(out.action_results or {}), (action, params)

    seeds = [benign, {k: v for k, v in benign.items() if k != "reason"}]
    surface = Surface(f"slurmctld action {action}")
    surface.run(seeds, st.fixed_dictionaries(fields), example)
    surface.finish()


# Databags.

PARTITION_VALUES = {
    "maxtime": s.mutated(s.TIME_VALUES),
    "defaulttime": s.mutated(s.TIME_VALUES),
    "maxnodes": s.mutated(s.UINT_EDGES),
    "priorityjobfactor": s.mutated(s.UINT_EDGES),
    "oversubscribe": s.mutated(["NO", "YES:4", "FORCE:65536", "EXCLUSIVE"]),
    "state": s.mutated(["UP", "DOWN", "DRAIN", "INACTIVE"]),
    "allowaccounts": s.mutated(["a,b", "ALL"]),
    "default": s.mutated(["YES", "NO"]),
}
NODESET_VALUES = {"feature": s.mutated(s.NAME_VALUES)}


def compute_databag() -> st.SearchStrategy[dict[str, str]]:
    """slurmd's application databag: a partition and node set with fuzzed values, or junk."""
    partition = st.fixed_dictionaries(
        {"partitionname": st.just("compute"), "nodes": st.just(["compute"])},
        optional=PARTITION_VALUES,
    )
    nodeset = st.fixed_dictionaries({"nodeset": st.just("compute")}, optional=NODESET_VALUES)
    return st.fixed_dictionaries(
        {"partition": s.raw_field(partition), "nodeset": s.raw_field(nodeset)}
    )


COMPUTE_SEEDS = [
    databag(
        partition={"partitionname": "compute", "nodes": ["compute"], **{k: v}},
        nodeset={"nodeset": "compute", "feature": "compute"},
    )
    for k, v in (
        ("maxtime", "60 Nodes=ALL"),
        ("maxtime", "14days"),
        ("maxnodes", "4294967296"),
        ("oversubscribe", "FORCE:65536"),
        ("allowaccounts", "a\nPartitionName=evil"),
        ("priorityjobfactor", "65536"),
        ("state", "UP#"),
    )
] + [
    {"partition": s.deep_json(5000), "nodeset": "{}"},
    {"partition": '"x"', "nodeset": "[]"},
    {"partition": json.dumps({"partitionname": "other", "nodes": ["x"]}), "nodeset": "{}"},
]


def test_slurmd_databag(real_slurm: RealSlurm):
    surface = Surface("slurmctld <- slurmd ComputeData", baseline(leader(compute())))

    def example(raw: dict[str, str]) -> None:
        out = harness.run(
            "slurmctld", lambda ctx: ctx.on.config_changed(), leader(compute(raw=raw)), raw
        )
        surface.check(out, raw, extra_keys=oracle.json_keys(raw))

    surface.run(COMPUTE_SEEDS, compute_databag(), example)
    surface.finish(real_slurm)


DBD_SEEDS = [
    {"dbds": json.dumps([{"hostname": h, "address": h, "port": p}])}
    for h, p in zip(s.HOST_VALUES, [*s.PORT_VALUES, 6819], strict=False)
] + [{"dbds": s.deep_json(5000)}, {"dbds": "{}"}, {"dbds": "[]"}]


def test_slurmdbd_databag(real_slurm: RealSlurm):
    def dbd(raw: dict[str, str]) -> testing.Relation:
        return testing.Relation("slurmdbd", remote_app_name="slurmdbd", remote_app_data=raw)

    benign = {"dbds": json.dumps([{"hostname": "dbd0", "address": "10.0.0.7", "port": 6819}] * 2)}
    surface = Surface(
        "slurmctld <- slurmdbd SlurmdbdData", baseline(leader(compute(), dbd(benign)))
    )

    def example(raw: dict[str, str]) -> None:
        relation = dbd(raw)
        out = harness.run(
            "slurmctld",
            lambda ctx: ctx.on.relation_changed(relation),
            leader(compute(), relation),
            raw,
        )
        surface.check(out, raw)

    strategy = st.one_of(
        st.lists(s.host_entry(), max_size=3).map(lambda d: {"dbds": json.dumps(d)}),
        st.fixed_dictionaries({"dbds": s.raw_field(st.lists(s.host_entry(), max_size=3))}),
    )
    surface.run(DBD_SEEDS, strategy, example)
    surface.finish(real_slurm)


def test_consumer_unit_databags():
    """login-node and slurmrestd units confirm the key they run with (`auth_key_digest`) and
    say the Slurm release they run (`version`)."""
    digest = auth_key_digest(KEY)
    surface_name = "slurmctld <- sackd/slurmrestd/slurmdbd ConsumerUnitData"

    def example(case: tuple[str, str, str]) -> None:
        endpoint, field, raw = case
        relation = testing.Relation(
            endpoint, remote_app_name="x", remote_units_data={0: {field: raw}}
        )
        harness.run(
            "slurmctld",
            lambda ctx: ctx.on.relation_changed(relation, remote_unit=0),
            leader(compute(), relation),
            case,
        )

    endpoints = st.sampled_from(["login-node", "slurmrestd", "slurmdbd"])
    seeds = [
        (e, "auth_key_digest", r)
        for e in ("login-node", "slurmrestd")
        for r in (json.dumps(digest), s.deep_json(5000), '"ZZ"', "1")
    ] + [
        ("login-node", "version", r)
        for r in ('"26.05.5"', '"24.11.5-1"', s.deep_json(5000), "25.11")
    ]
    fields = st.one_of(
        st.tuples(st.just("auth_key_digest"), s.raw_field(s.mutated([digest]))),
        st.tuples(st.just("version"), s.raw_field(s.mutated(["26.05.5"]))),
    )
    surface = Surface(surface_name)
    strategy = st.tuples(endpoints, fields).map(lambda c: (c[0], *c[1]))
    surface.run(seeds, strategy, example)
    surface.finish()


def network_state_shared(machine, root) -> None:
    """A real mount at the checkpoint, as the machine's mount table lists it."""
    checkpoint = root / CHECKPOINT
    checkpoint.mkdir(parents=True)
    (root / "mountinfo").write_text(
        "22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
        f"52 22 0:46 / {checkpoint} rw shared:31 - nfs4 10.0.0.5:/export/slurm rw\n"
    )


PEER_SEEDS = [
    {"hostname": h, "address": a}
    for h, a in (
        ("ctl1", "10.0.0.2"),
        ("ctl_1", "10.0.0.2"),
        ("ctl1", "fe80::1%a,b"),
        ("ctl1", "fe80::1%$x"),
        ("ctl1\nSlurmUser=root", "10.0.0.2"),
        ("ctl1", "10.0.0.2 --foo"),
        ("ctl1(x)", "10.0.0.2"),
        ("ctl1", "10.0.0.2)"),
        ("-h", "10.0.0.2"),
        ("ctl1", "a" * 300),
    )
]


def test_slurmctld_peer_unit_databag(real_slurm: RealSlurm):
    """Another controller's hostname and address become `SlurmctldHost` lines (network state)."""
    mount = testing.SubordinateRelation(
        "mount", remote_app_name="filesystem-client", remote_unit_data={"mounted": "true"}
    )

    def state(unit_data: dict[str, str]) -> testing.State:
        peer = testing.PeerRelation(PEER, peers_data={1: unit_data})
        return leader(compute(), peer, mount, config={"use-network-state": True})

    surface = Surface(
        "slurmctld <- slurmctld-peer unit data",
        baseline(state(PEER_SEEDS[0]), prepare=network_state_shared),
    )

    def example(unit_data: dict[str, str]) -> None:
        out = harness.run(
            "slurmctld", config_changed, state(unit_data), unit_data, network_state_shared
        )
        surface.check(out, unit_data)

    strategy = st.fixed_dictionaries(
        {"hostname": s.mutated(["ctl1", "ctl-2"]), "address": s.mutated(s.HOST_VALUES)}
    )
    surface.run(PEER_SEEDS, strategy, example)
    surface.finish(real_slurm)


def peer_app_databag() -> st.SearchStrategy[dict[str, str]]:
    rollout = st.fixed_dictionaries(
        {"partition": s.mutated(["compute"])},
        optional={
            "since": st.sampled_from([0, 5000, -1, 2**70, "5000", True, None]),
            "upgrade": st.sampled_from([True, False, "yes", 1, None]),
            "jobs": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.sampled_from([7, 0, -3, 2**26, 2**70, "7", "7;x", True, None]),
                        "node": s.mutated(["compute-0"]),
                    }
                ),
                max_size=3,
            ),
        },
    )
    partition = st.fixed_dictionaries(
        {"name": s.mutated(["compute", "gone"])},
        optional={
            "partition": st.fixed_dictionaries(
                {"partitionname": s.mutated(["gone"]), "nodes": st.just(["gone"])},
                optional=PARTITION_VALUES,
            ),
            "nodeset": st.fixed_dictionaries({"nodeset": s.mutated(["gone"])}),
            "retiring": st.sampled_from([True, False, "yes", 1, None]),
            "drained": st.sampled_from([True, False, "no", None]),
            "relation_id": st.sampled_from([1, -1, 2**70, "1", None]),
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "partitions": s.raw_field(st.lists(partition, max_size=2)),
            "departed_nodes": s.raw_field(
                st.lists(st.fixed_dictionaries({"name": s.mutated(["compute-3"])}), max_size=2)
            ),
            "controllers": s.raw_field(
                st.lists(
                    st.fixed_dictionaries({"unit": s.mutated(["slurmctld/0", "slurmctld/1"])}),
                    max_size=2,
                )
            ),
            "rollouts": s.raw_field(st.lists(rollout, max_size=2)),
        },
    )


PEER_APP_SEEDS = [
    {
        "partitions": json.dumps(
            [
                {
                    "name": "gone",
                    "partition": {"partitionname": "gone", "nodes": ["gone"]},
                    "nodeset": {"nodeset": "gone"},
                    "retiring": True,
                }
            ]
        )
    },
    {
        "partitions": json.dumps(
            [
                {
                    "name": "gone",
                    "partition": {"partitionname": "other", "nodes": ["x"]},
                    "nodeset": {"nodeset": "gone"},
                    "retiring": True,
                }
            ]
        )
    },
    {"partitions": s.deep_json(5000)},
    {"departed_nodes": json.dumps([{"name": "a b"}])},
    {"controllers": json.dumps([{"unit": "slurmctld/0\nx"}])},
    {
        "rollouts": json.dumps(
            [{"partition": "compute", "since": 1, "jobs": [{"id": "7\n31337", "node": "c-0"}]}]
        )
    },
    {"rollouts": json.dumps([{"partition": "a b", "jobs": [{"id": 7, "node": "c-0;x"}]}])},
]


FORCED_PARTITION_KEYS: tuple[str, ...] = (
    "partitionname",
    "nodes",
    "nodeset",
    "feature",
    "state",
    "default",
)
"""Keys the controller writes for each remembered partition itself (named after its entry)."""


def forced(app_data: dict[str, str]) -> list[str]:
    """The keys the controller writes for the partitions remembered in `app_data`."""
    try:
        partitions = json.loads(app_data.get("partitions", "[]"))
    except (ValueError, RecursionError):
        return []
    return list(FORCED_PARTITION_KEYS) * len(partitions) if isinstance(partitions, list) else []


def test_slurmctld_peer_app_databag(real_slurm: RealSlurm):
    """The controller's memory, as a former leader (or anything with its identity) left it."""

    def state(app_data: dict[str, str]) -> testing.State:
        return leader(compute(), testing.PeerRelation(PEER, local_app_data=app_data))

    def prepare(machine, root):
        machine.responses[("squeue",)] = "1\n"  # jobs still run: retiring partitions stay

    surface = Surface("slurmctld <- slurmctld-peer app data", baseline(state({}), prepare=prepare))

    def example(app_data: dict[str, str]) -> None:
        out = harness.run("slurmctld", config_changed, state(app_data), app_data, prepare)
        surface.check(out, app_data, extra_keys=[*oracle.json_keys(app_data), *forced(app_data)])

    surface.run(PEER_APP_SEEDS, peer_app_databag(), example)
    surface.finish(real_slurm)


def test_mount_unit_databag():
    def example(raw: str) -> None:
        mount = testing.SubordinateRelation(
            "mount", remote_app_name="filesystem-client", remote_unit_data={"mounted": raw}
        )
        harness.run(
            "slurmctld",
            lambda ctx: ctx.on.relation_changed(mount),
            leader(compute(), mount, config={"use-network-state": True}),
            raw,
            network_state_shared,
        )

    seeds = ["true", "false", '"true"', "1", s.deep_json(5000), ""]
    surface = Surface("slurmctld <- filesystem-client MountState")
    surface.run(seeds, s.raw_field(st.booleans()), example)
    surface.finish()
