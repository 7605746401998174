"""The exporter's parsers under hostile Slurm output (`slurm_exporter.metrics`).

Slurm prints users' and operators' text verbatim: an account (any text while
`AccountingStorageEnforce` is unset) and a node's reason may hold newlines, separators, CR,
U+2028, or a whole forged record. The listings here are built the way squeue and sinfo print
them, each field verbatim, joined by the format's literal separators, each record ending with
"\\n"; the free text is drawn from hostile pieces and forged records naming jobs and nodes
that do not exist, and ids and nodes that do. Whatever the text:

* nothing raises out of the parsers or a scrape;
* no job id, node, partition, user or account comes out that a real record did not hold,
  and no real record comes out changed (an account may come out cut at its first newline:
  the job's own text);
* the scraped exposition parses back into exactly the series the collector holds.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import recorded
import strategies as s
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from slurm_exporter import exporter, metrics

SEP = metrics.SEPARATOR
NOW = 1795618875.0
PARTITIONS = ("debug", "gpu")
USERS = ("alice", "bob", "root")
NODES = ("n-1", "n-2", "n-3")
STATES = ("idle", "idle+drain", "down*", "mixed", "allocated", "idle~")
FORGED_JOBS = (
    f"999999{SEP}debug{SEP}PENDING{SEP}1{SEP}mallory{SEP}64{SEP}Priority",
    f"1{SEP}gpu{SEP}PENDING{SEP}1{SEP}alice{SEP}1{SEP}Priority",  # A real id, maybe.
    f"2{SEP}evil",
    f"999999{SEP}evil",
)
FORGED_NODES = (
    f"forged-1{SEP}debug{SEP}idle{SEP}0/4/0/4{SEP}(null){SEP}(null){SEP}",
    f"forged-1{SEP}debug{SEP}1{SEP}forged reason",
    f"n-1{SEP}debug{SEP}1{SEP}stolen reason",
    f"n-2{SEP}gpu{SEP}Unknown{SEP}none",
)
RECORDED = (*recorded.lines("squeue-exporter-accounts"), *recorded.lines("squeue-exporter"))
"""Lines real Slurm printed for a user's forged account, and its real listing."""
PIECES = st.sampled_from(
    [
        *s.HOSTILE,
        *(SEP, "\n", "\r", "\u2028", "physics", "x"),
        *FORGED_JOBS,
        *FORGED_NODES,
        *RECORDED,
    ]
)
HOSTILE_TEXT = st.lists(PIECES, max_size=8).map("".join)
NUMBER = st.one_of(st.sampled_from(s.HUGE), st.integers(0, 2**31).map(str))


@dataclass(frozen=True)
class Job:
    """A job as Slurm holds it: its fields as squeue prints them."""

    job_id: str
    partitions: str
    state: str
    submitted: str
    user: str
    cpus: str
    reason: str
    account: str


@dataclass(frozen=True)
class Node:
    """A node in one partition as sinfo prints it."""

    node: str
    partition: str
    state: str
    cpus: str
    since: str
    reason: str


@st.composite
def forged(draw: st.DrawFn, ids: Sequence[int]) -> str:
    """Free text ending a real line and forging the next: a job, an account, of a real id."""
    job_id = draw(st.sampled_from([*ids, 999999]))
    line = draw(
        st.sampled_from(
            [
                f"{job_id}{SEP}debug{SEP}PENDING{SEP}1{SEP}mallory{SEP}64{SEP}Priority",
                f"{job_id}{SEP}evil",
            ]
        )
    )
    return draw(st.sampled_from(["physics", "", "x y"])) + "\n" + line


@st.composite
def jobs(draw: st.DrawFn) -> list[Job]:
    ids = draw(st.lists(st.integers(1, 50), unique=True, max_size=6))
    account = st.one_of(st.sampled_from(["(null)", "physics"]), HOSTILE_TEXT, forged(ids))
    return [
        Job(
            job_id=str(job_id),
            partitions=draw(st.sampled_from(["debug", "gpu", "debug,gpu"])),
            state=draw(st.sampled_from(["PENDING", "RUNNING", "COMPLETING"])),
            submitted=draw(NUMBER),
            user=draw(st.sampled_from(USERS)),
            cpus=draw(st.one_of(NUMBER, st.integers(1, 64).map(str))),
            reason=draw(st.sampled_from(["Priority", "Resources", "JobHeldUser", "None"])),
            account=draw(account),
        )
        for job_id in ids
    ]


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    keys = draw(
        st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PARTITIONS)), unique=True)
    )
    return [
        Node(
            node=node,
            partition=partition,
            state=draw(st.sampled_from(STATES)),
            cpus="/".join(draw(st.lists(NUMBER, min_size=4, max_size=4))),
            since=draw(st.one_of(st.just("Unknown"), NUMBER)),
            reason=draw(st.one_of(st.sampled_from(["none", "bad dimm"]), HOSTILE_TEXT)),
        )
        for node, partition in keys
    ]


def squeue(listed: Sequence[Job]) -> str:
    fields = ("job_id", "partitions", "state", "submitted", "user", "cpus", "reason")
    return "".join(SEP.join(getattr(j, f) for f in fields) + "\n" for j in listed)


def squeue_accounts(listed: Sequence[Job]) -> str:
    return "".join(f"{j.job_id}{SEP}{j.account}\n" for j in listed)


def sinfo(listed: Sequence[Node]) -> str:
    return "".join(
        f"{n.node}{SEP}{n.partition}{SEP}{n.state}{SEP}{n.cpus}{SEP}(null){SEP}(null){SEP}\n"
        for n in listed
    )


def sinfo_reasons(listed: Sequence[Node]) -> str:
    return "".join(f"{n.node}{SEP}{n.partition}{SEP}{n.since}{SEP}{n.reason}\n" for n in listed)


@given(jobs())
def test_jobs_come_only_from_real_records(real: list[Job]) -> None:
    by_id = {job.job_id: job for job in real}
    snapshot = metrics.Snapshot()
    read = metrics.read_jobs(squeue(real), squeue_accounts(real), snapshot)
    for job in read:
        source = by_id[job.job_id]
        assert job.partitions == source.partitions.split(",")
        assert (job.state, job.user, str(job.cpus)) == (
            source.state.lower(),
            source.user,
            source.cpus,
        )
        own = source.account.split("\n")[0].strip()  # Its own text, cut at a newline.
        assert job.account in ("", "" if own.lower() in ("(null)", "none") else own)
    families = metrics.job_families(squeue(real), squeue_accounts(real), NOW, True, snapshot)
    for family in families:
        for labels in family.samples:
            values = dict(zip(family.label_names, labels, strict=True))
            assert values.get("partition", "debug") in PARTITIONS
            assert values.get("user", "root") in USERS
            assert any(values.get("account", "") in job.account for job in real)
    counted = sum(
        v for k, v in families[0].samples.items() if k[0] == "debug"
    )  # slurm_partition_jobs
    assert counted <= sum("debug" in job.partitions.split(",") for job in real)


@given(nodes())
def test_nodes_come_only_from_real_records(real: list[Node]) -> None:
    by_key = {(n.node, n.partition): n for n in real}
    read = metrics.read_nodes(sinfo(real), sinfo_reasons(real), metrics.Snapshot())
    for node in read:
        source = by_key[(node.node, node.partition)]
        assert node.state == metrics.split_state(source.state)[0]
        assert node.reason == "" or node.reason in metrics.text_label(source.reason)


@given(st.lists(PIECES | st.text(max_size=5), max_size=40).map("".join), st.booleans())
def test_arbitrary_text_never_raises(text: str, per_user: bool) -> None:
    snapshot = metrics.Snapshot()
    metrics.node_families(text, text, snapshot)
    metrics.job_families(text, text, NOW, per_user, snapshot)
    metrics.read_jobs(text, None, snapshot)


class Answers:
    """Answer the exporter's commands with the drawn listings (a primary in control)."""

    def __init__(self, outputs: Mapping[tuple[str, ...], str]) -> None:
        self.outputs = outputs

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str:
        if argv[0] == "scontrol":
            return (
                '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, '
                '"pings": [{"hostname": "ctl", "pinged": "UP", "responding": true}]}'
            )
        if argv[0] == "sdiag":
            return '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "statistics": {}}'
        return self.outputs[tuple(argv)]


@given(jobs(), nodes())
def test_a_scrape_holds_exactly_the_collected_series(
    real_jobs: list[Job], real_nodes: list[Node]
) -> None:
    outputs = {
        tuple(exporter.SQUEUE): squeue(real_jobs),
        tuple(exporter.SQUEUE_ACCOUNTS): squeue_accounts(real_jobs),
        tuple(exporter.SINFO): sinfo(real_nodes),
        tuple(exporter.SINFO_REASONS): sinfo_reasons(real_nodes),
    }
    collector = exporter.SlurmCollector(
        "ctl",
        per_user=True,
        run=Answers(outputs),
        clock=lambda: NOW,
        fence_flag=Path("/nonexistent/fenced"),
        sack_socket=Path(__file__),
    )
    collector.collect_once()
    registry = CollectorRegistry()
    registry.register(collector)
    scraped = [
        sample
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if not sample.name.endswith("_created")
    ]
    held = sum(len(family.samples) for family in collector._families)  # pyright: ignore[reportPrivateUsage]
    extra = 1 + len(collector._errors)  # pyright: ignore[reportPrivateUsage]
    assert len(scraped) == held + extra
    real_node_names = {n.node for n in real_nodes}
    for sample in scraped:
        if "node" in sample.labels:
            assert sample.labels["node"] in real_node_names
