"""Slurm's grammar for untrusted values: the rules, hostile vectors and round-trip properties."""

import json

import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.interfaces.base import describe_invalid
from hpc_libs.interfaces.slurmd import ComputeData, ControllerData, ControllerEntry
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import conf_server_option
from hpc_libs.slurm.text import literals_as_yes_no
from hpc_libs_fakes import node_config, parse_config_line
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from slurmutils import Node, Partition

EXAMPLES = 300  # Per property: the closing note counts the inputs run per parser.

HOSTILE = ["60 Nodes=ALL", "60\nNodes=ALL", '60"', "60#", "60=1", "60\\", "60\t", "", "6\x000"]


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        (
            "MaxTime",
            ["UNLIMITED", "infinite", "60", "5:30", "1:00:00", "2-12", "2-12:30", "2-12:30:15"],
            ["-1", "1.5", "1:2:3:4", "1-", "x", "99999999999"],
        ),
        (
            "MaxNodes",
            ["0", "4", "UNLIMITED", "4294967293"],
            ["-1", "+4", "4.0", "0x10", "4294967294", "4k"],
        ),
        ("PriorityTier", ["0", "65533"], ["65534", "UNLIMITED", "-1"]),
        ("DefMemPerCPU", ["1024", "18446744073709551613"], ["UNLIMITED", "18446744073709551614"]),
        ("State", ["UP", "drain", "INACTIVE"], ["ON", "UP,DOWN"]),
        (
            "OverSubscribe",
            ["NO", "exclusive", "YES", "YES:4", "FORCE:1"],
            ["YES:1", "FORCE:0", "NO:2", "MAYBE"],
        ),
        ("PreemptMode", ["OFF", "REQUEUE,GANG"], ["REQUEUE,", "KILL"]),
        ("Default", ["YES", "no", "True", "0"], ["maybe"]),
        ("AllowGroups", ["a,b_c.d-e", "ALL"], ["a,,b", "a;b", "a b"]),
        ("TRESBillingWeights", ["CPU=1.0,Mem=0.25G,GRES/gpu=2"], ["CPU=1 Mem=2", "CPU"]),
    ],
)
def test_partition_rules(key: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        grammar.check_value(Partition, key, value)
    hostile = [v for v in HOSTILE if key != "TRESBillingWeights" or v != "60=1"]
    for value in [*bad, *hostile]:
        with pytest.raises(grammar.GrammarError) as caught:
            grammar.check_value(Partition, key.lower(), value)
        assert caught.value.key == key


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        ("CPUs", ["1", "65533"], ["65534", "-2", "2.0"]),
        ("RealMemory", ["1000"], ["1000M", "-1"]),
        ("Weight", ["1", "4294967293"], ["4294967294"]),
        ("Gres", ["gpu", "gpu:2", "gpu:a100:2", "gpu:a100:1,gpu:t4:1"], ["gpu::2", "gpu:a:b:c"]),
        ("CpuSpecList", ["0,2-3"], ["0-", "a"]),
        ("NodeAddr", ["node-1.example", "10.0.0.1", "fe80::1"], ["-bad", "a_b"]),
    ],
)
def test_node_rules(key: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        grammar.check_value(Node, key, value)
    for value in [*bad, *HOSTILE]:
        with pytest.raises(grammar.GrammarError):
            grammar.check_value(Node, key, value)


def test_a_key_without_a_rule_still_gets_the_token_rule() -> None:
    grammar.check_value(Partition, "Colour", "blue")
    with pytest.raises(grammar.GrammarError):
        grammar.check_value(Partition, "Colour", "blue Nodes=ALL")


@pytest.mark.parametrize(
    "entry",
    [
        "ctl",
        "ctl:6817",
        "10.0.0.1:1",
        "[fe80::1]:6817",
        "fe80::1",
        "a.b-c:65535",
        "fe80::1%eth0",
        "[fe80::1%enp0s31f6]:6817",
        "fe80::1%2",
        "fe80::1%br-0.100_x",
    ],
)
def test_controller_entries_accepted(entry: str) -> None:
    grammar.controller_entry(entry)


@pytest.mark.parametrize(
    "address",
    [
        "fe80::1%$x",
        "fe80::1%a,b",
        "fe80::1%a%b",
        "fe80::1%",
        "fe80::1%.",
        "fe80::1%..",
        "fe80::1%a/b",
        "fe80::1%a:b",
        "fe80::1%eth0\n",
        "fe80::1%abcdefghijklmnop",  # 16 characters: Linux's IFNAMSIZ holds 15 and a NUL.
        "fe80::1%é",
    ],
)
def test_an_ipv6_scope_id_must_be_an_interface_name(address: str) -> None:
    for rule in (grammar.host, grammar.controller_entry):
        with pytest.raises(ValueError):
            rule(address)
    with pytest.raises(ValueError):
        grammar.controller_entry(f"[{address}]:6817")


@pytest.mark.parametrize(
    "entry",
    ["ctl --foo", "a,b", "ctl\n", "ctl:0", "ctl:65536", "ctl:", "[10.0.0.1]:1", "-ctl", ""],
)
def test_controller_entries_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        grammar.controller_entry(entry)


def test_free_text_refuses_quotes_and_controls() -> None:
    grammar.free_text("new node: resume when ready")
    for text in ['say "hi"', "it's", "a\nb", " lead", "a\\b", ""]:
        with pytest.raises(ValueError):
            grammar.free_text(text)


# Raw databag vectors: a hostile slurmd application's data reads as "not ready".


def raw(**fields: object) -> dict[str, object]:
    """Decode a databag as ops.Relation.load does: each field is JSON text."""
    return {k: json.loads(json.dumps(v)) for k, v in fields.items()}


@pytest.mark.parametrize(
    ("partition", "key"),
    [
        ({"maxtime": "60 Nodes=ALL"}, "MaxTime"),
        ({"maxtime": "60\nPartitionName=evil Nodes=ALL"}, "MaxTime"),
        ({"allowgroups": ["admins Nodes=ALL"]}, "AllowGroups"),
        ({"allowaccounts": ["a#b"]}, "AllowAccounts"),
        ({"qos": 'x"y'}, "QOS"),
        ({"alternate": "p Default=YES"}, "Alternate"),
        ({"partitionname": "p\nNodeName=x"}, "PartitionName"),
    ],
)
def test_hostile_partition_data_is_refused_naming_the_key(
    partition: dict[str, object], key: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        ComputeData.model_validate(
            raw(partition=partition, nodeset={"nodeset": "c", "feature": "c"})
        )

    class App:
        name = "compute"

    message = describe_invalid(App(), caught.value)  # type: ignore[arg-type]
    assert message.startswith("compute sent an invalid partition: ")
    assert f"invalid {key}:" in message


def test_hostile_nodeset_data_is_refused() -> None:
    with pytest.raises(ValidationError):
        ComputeData.model_validate(raw(nodeset={"nodeset": "c", "feature": "c Nodes=ALL"}))


@pytest.mark.parametrize(
    "controllers",
    [
        ["10.0.0.1"],
        [{"address": "ctl --foo"}],
        [{"address": "a,b"}],
        [{"address": "ctl\n"}],
        [{"address": "10.0.0.1", "port": 0}],
        [{"address": "10.0.0.1", "port": 70000}],
        [{"hostname": "ctl -f", "address": "10.0.0.1"}],
        [{"address": "fe80::1%a,b"}],
        [{"address": "fe80::1%$x"}],
    ],
)
def test_hostile_controller_entries_are_not_ready(controllers: list[object]) -> None:
    with pytest.raises(ValidationError):
        ControllerData.model_validate(raw(auth_key_id="secret:x", controllers=controllers))


def test_controller_entries_give_conf_servers_primary_first() -> None:
    data = ControllerData(
        auth_key_id="secret:x",
        controllers=[
            ControllerEntry(hostname="ctl-0", address="10.0.0.1"),
            ControllerEntry(address="fe80::1", port=7817),
        ],
    )
    assert data.conf_servers() == ["10.0.0.1:6817", "[fe80::1]:7817"]
    assert data.is_complete


def test_parse_config_line_refuses_a_value_that_adds_a_key() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_line(Partition, 'MaxTime="60 Nodes=ALL"')
    assert caught.value.key == "MaxTime"


# Properties: whatever is accepted renders to text that splits back into exactly its keys.

# slurmutils reads an all-digit name as a number, so generated names start with a letter.
NAMES = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True)
PARTITION_VALUES: dict[str, st.SearchStrategy[str]] = {
    "MaxTime": st.one_of(
        st.just("UNLIMITED"),
        st.integers(0, 10**6).map(str),
        st.tuples(st.integers(0, 365), st.integers(0, 23), st.integers(0, 59)).map(
            lambda t: f"{t[0]}-{t[1]:02}:{t[2]:02}:00"
        ),
    ),
    "DefaultTime": st.integers(0, 10**5).map(str),
    # slurmutils takes only the lower-case spelling for MaxNodes.
    "MaxNodes": st.one_of(st.just("unlimited"), st.integers(0, 2**32 - 3).map(str)),
    "MinNodes": st.integers(0, 2**32 - 3).map(str),
    "PriorityTier": st.integers(0, 65533).map(str),
    "DefMemPerCPU": st.integers(0, 2**40).map(str),
    "GraceTime": st.integers(0, 2**31).map(str),
    # slurmutils' enumerations are lower case.
    "State": st.sampled_from(["up", "down", "drain", "inactive"]),
    "Hidden": st.sampled_from(["YES", "NO", "yes", "no"]),
    "AllowGroups": st.lists(NAMES, min_size=1, max_size=3, unique=True).map(",".join),
    "OverSubscribe": st.sampled_from(["no", "exclusive", "yes", "force"]),
}
NODE_VALUES: dict[str, st.SearchStrategy[str]] = {
    "CPUs": st.integers(0, 65533).map(str),
    "RealMemory": st.integers(1, 2**40).map(str),
    "Weight": st.integers(1, 2**32 - 3).map(str),
    "TmpDisk": st.integers(1, 2**32 - 3).map(str),
    "Features": st.lists(NAMES, min_size=1, max_size=3, unique=True).map(",".join),
    "Gres": st.from_regex(r"gpu(:[a-z0-9]{1,6})?(:[1-8])?", fullmatch=True),
}


def config_line(values: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(sorted(values)), st.just(""), min_size=1).flatmap(
        lambda keys: st.fixed_dictionaries({k: values[k] for k in keys})
    )


def rendered_keys(text: str) -> list[str]:
    """Split a rendered line as Slurm does: at whitespace, key up to the first `=`."""
    return [token.partition("=")[0].lower() for token in text.split()]


@settings(max_examples=EXAMPLES, deadline=None)
@given(config_line(PARTITION_VALUES))
def test_parsed_partition_renders_back_to_exactly_its_keys(fields: dict[str, str]) -> None:
    line = " ".join(f"{k}={v}" for k, v in fields.items())
    partition = parse_config_line(Partition, line)
    text = literals_as_yes_no(str(partition))
    assert "\n" not in text
    assert sorted(rendered_keys(text)) == sorted(k.lower() for k in fields)
    grammar.check_fields(Partition, partition.dict())  # The consumer accepts it too.


@settings(max_examples=EXAMPLES, deadline=None)
@given(config_line(NODE_VALUES))
def test_node_config_renders_back_to_exactly_its_keys(fields: dict[str, str]) -> None:
    admin = " ".join(f"{k}={v}" for k, v in fields.items() if k != "Features")
    conf = node_config({"CPUs": 2, "RealMemory": 1000}, "compute", admin)
    expected = {"cpus", "realmemory", "features"} | {k.lower() for k in fields}
    assert "\n" not in conf
    assert set(rendered_keys(conf)) == expected
    assert len(rendered_keys(conf)) == len(expected)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_refused_or_renders_to_exactly_its_keys(text: str) -> None:
    try:
        partition = parse_config_line(Partition, text)
    except ConfigError:
        return
    rendered = literals_as_yes_no(str(partition))
    assert "\n" not in rendered
    assert set(rendered_keys(rendered)) == {t.partition("=")[0].lower() for t in text.split()}


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
HOSTS = st.one_of(
    st.lists(LABEL, min_size=1, max_size=3).map(".".join),
    st.ip_addresses().map(str),
)
ENTRIES = st.builds(
    ControllerEntry,
    hostname=st.one_of(st.none(), st.lists(LABEL, min_size=1, max_size=2).map(".".join)),
    address=HOSTS,
    port=st.one_of(st.none(), st.integers(1, 65535)),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(ENTRIES, min_size=1, max_size=4))
def test_controller_data_round_trips_to_valid_conf_servers(entries: list[ControllerEntry]) -> None:
    data = ControllerData(auth_key_id="secret:x", controllers=entries)
    again = ControllerData.model_validate_json(data.model_dump_json())
    assert again == data
    servers = again.conf_servers()
    assert len(servers) == len(entries)
    for server in servers:
        grammar.controller_entry(server)
    option = conf_server_option(servers)
    assert option.split(",") == servers
    assert not any(c.isspace() for c in option)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(max_size=30))
def test_any_controller_entry_is_refused_or_one_argument(text: str) -> None:
    try:
        grammar.controller_entry(text)
    except ValueError:
        return
    assert text and not any(c.isspace() or c in ",\"'\\" for c in text)


@pytest.mark.parametrize("entry", ["ctl --foo", "a,b", "ctl:0", "-ctl"])
def test_conf_server_option_refuses_an_entry_that_is_not_host_port(entry: str) -> None:
    with pytest.raises(ValueError):
        conf_server_option(["ctl0", entry])
