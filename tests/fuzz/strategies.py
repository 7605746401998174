"""Biased strategies: Slurm's grammar for valid seeds, hostile characters to break them.

A value is drawn from a surface's seed corpus (valid values taken from Slurm's grammar, and
the issues' reproducers) as is, mutated with hostile text (spaces, quotes, new lines, `=`,
`#`, `%`, `$`, backslashes, unicode digits such as `²`, huge numbers), or as free text over a
hostile alphabet. Seeds are also run one by one before hypothesis draws (`seeds_then`), so
every reproducer is tried in every run.
"""

import json
from collections.abc import Sequence
from typing import Any

from hpc_libs.slurm import grammar
from hypothesis import strategies as st

HOSTILE = (
    " ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    '"',
    "'",
    "=",
    "#",
    "%",
    "$",
    "\\",
    ",",
    ":",
    ";",
    "[",
    "]",
    "²",
    "٣",
    "\x00",
    "\x85",
    "\u2028",
    "${HOME}",
    "$$",
    "%n",
    "%%",
    "\\\n",
    " Nodes=ALL",
    "\nSlurmctldHost=evil",
    "\nPrologSlurmctld=/tmp/x",
    " --foo",
    "#x",
)
HUGE = (
    "0",
    "-1",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551616",
    "9" * 40,
    "1" * 5000,
    "1e9",
    "0x10",
    "²",
    "1_000",
    "NaN",
)
ALPHABET = st.sampled_from([*HOSTILE, *"abcAZ09_.-/@+~", "ctl", "10.0.0.1", "fe80::1", "%eth0"])


def mutated(seeds: Sequence[str]) -> st.SearchStrategy[str]:
    """A seed as is, with hostile text inserted, or replaced by hostile text or a number."""
    seed = st.sampled_from(list(seeds))
    hostile = st.sampled_from(HOSTILE)
    return st.one_of(
        seed,
        st.builds(lambda s, h, cut: s[:cut] + h + s[cut:], seed, hostile, st.integers(0, 40)),
        st.builds(lambda s, h: s + h, seed, st.sampled_from(HUGE)),
        st.sampled_from(HUGE),
        st.lists(ALPHABET, min_size=1, max_size=6).map("".join),
        st.text(max_size=12),
    )


def deep_json(depth: int) -> str:
    """A JSON text nested `depth` lists deep (deep enough to exceed Python's recursion limit)."""
    return "[" * depth + "]" * depth


JSON_HOSTILE = (
    deep_json(5000),
    deep_json(100_000),
    '{"a":' * 3000 + "1" + "}" * 3000,
    "null",
    "true",
    "1e999",
    '"\\ud800"',
    "[" + ",".join(["1"] * 10000) + "]",
    "{",
    "",
)


def json_value() -> st.SearchStrategy[Any]:
    """Arbitrary JSON-able values (what a hostile application can put in a databag field)."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=8), children, max_size=3)
        ),
        max_leaves=8,
    )


def raw_field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    """The raw databag text of a field: valid JSON of `valid`, any JSON, or broken/deep JSON."""
    return st.one_of(
        valid.map(json.dumps),
        valid.map(json.dumps),
        json_value().map(json.dumps),
        st.sampled_from(JSON_HOSTILE),
    )


# Seeds from Slurm's grammar: values of each kind its rules accept, and their edges.
UINT_EDGES = ("1", "2", "100", "65534", "65535", "65536", "4294967294", "4294967295")
TIME_VALUES = ("60", "1:00:00", "1-0", "14-0", "14-00:00:00", "UNLIMITED", "INFINITE", "14days")
NAME_VALUES = ("compute", "gpu_a100", "a.b-c", "default", "ALL", "debug")
HOST_VALUES = (
    "ctl0",
    "ctl-1.example.com",
    "10.0.0.1",
    "192.0.2.254",
    "fe80::1",
    "2001:db8::5",
    "fe80::1%eth0",
    "fe80::1%$x",
    "fe80::1%a,b",
    "a_b",
    "localhost",
)
PORT_VALUES = (1, 6817, 65535, 0, 65536, -1, True, "6817", "6_819", 6817.0)


def host_entry() -> st.SearchStrategy[dict[str, Any]]:
    """A daemon's `{hostname, address, port}` entry (controllers, dbds), any field left out."""
    return st.fixed_dictionaries(
        {},
        optional={
            "hostname": mutated(HOST_VALUES),
            "address": mutated(HOST_VALUES),
            "port": st.sampled_from(PORT_VALUES),
        },
    )


def slurm_conf_grammar() -> list[str]:
    """A `key=value` line for every slurm.conf key with a rule, with an edge value."""
    edge_values = (*UINT_EDGES, "0", *TIME_VALUES[:5], "yes", "no")
    return [
        f"{key}={edge_values[number % len(edge_values)]}"
        for number, key in enumerate(sorted(grammar.SLURM_CONF))
    ]


def slurm_conf_seeds() -> list[str]:
    """slurm.conf lines: the issue's reproducers and what the charm must refuse."""
    return [
        "PriorityDecayHalfLife=14days",
        "PriorityDecayHalfLife=14-0",
        "FirstJobId=100000\nMaxJobId=1000",
        "MaxStepCount=0",
        "MaxJobCount=4294967296",
        "MaxArraySize=65536",
        "TCPTimeout=65536",
        "JobCompLoc=http://user:pw@host/x",
        "JobCompType=jobcomp/elasticsearch\nJobCompLoc=http://user:pw@h:9200",
        "Prolog=/tmp/x",
        "SrunPortRange=60001-63000",
        "SrunPortRange=63000-60001",
        "SchedulerParameters=bf_interval=45",
        "MaxJobCount=5000 # comment",
        "# only a comment",
        "UnknownKey=1",
        "NodeName=evil CPUs=1",
        "Include /etc/passwd",
    ]


def slurmdbd_conf_seeds() -> list[str]:
    """slurmdbd.conf lines: slurmdbd.conf(5)'s own forms (the issue's first reproducers)."""
    seeds = [f"Purge{what}After=12" for what in ("Event", "Job", "Resv", "Step", "Suspend")]
    seeds += [
        "PurgeJobAfter=12months",
        "PurgeJobAfter=12days",
        "PurgeJobAfter=12hours",
        "PurgeJobAfter=12x",
        "ArchiveJobs=yes",
        "ArchiveDir=/var/spool/slurm/archive",
        "DefaultQOS=normal",
        "DefaultQOS=1",
        "DebugLevel=info",
        "DebugLevel=verbose3",
        "MaxQueryTimeRange=60-0",
        "CommitDelay=1",
        "MessageTimeout=65536",
        "TrackWCKey=yes",
        "StoragePass=x",
        "DbdHost=evil",
        "PrivateData=accounts,jobs",
    ]
    return seeds


def cgroup_conf_seeds() -> list[str]:
    """cgroup.conf lines from the rules of its keys."""
    seeds = [f"{key}=yes" for key in sorted(grammar.CGROUP_CONF) if key.startswith("Constrain")]
    seeds += [
        "AllowedRAMSpace=100",
        "AllowedRAMSpace=100.5",
        "MaxRAMPercent=99.5",
        "MemorySwappiness=100",
        "MemorySwappiness=101",
        "CgroupPlugin=cgroup/v2",
        "MinRAMSpace=30",
        "CgroupMountpoint=/sys/fs/cgroup",
        "SystemdTimeout=4294967296",
        "Foo=bar",
    ]
    return seeds


def parameters(seeds: Sequence[str]) -> st.SearchStrategy[str]:
    """Option text: one to three seed lines (mutated or not), joined by new lines or spaces."""
    return st.lists(mutated(seeds), min_size=1, max_size=3).flatmap(
        lambda lines: st.sampled_from(["\n", " ", "\n\n"]).map(lambda sep: sep.join(lines))
    )
