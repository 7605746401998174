"""Slurm's output carries users' text, and root's parsers read it: real Slurm, hostile jobs.

An unprivileged user (`nobody`) submits held jobs whose comment, name and account hold new
lines (and a CR, a U+2028, `|`) that forge lines of squeue's answers naming a victim's job
(root's own held job), and a partition string that forges a line of slurmctld's log. Slurm
24.11 accepts them and prints them verbatim (checked first: without that the other checks
prove nothing). Each product query then runs on the lab's controller, and the product's own
parser reads the real answer on this host: no job id, node or series may come from the
forgeries.

`SLURM_OUTPUT_RECORD=<dir>` also writes each answer to `<dir>/<name>.txt`: the fuzz suite's
seeds (`tests/fuzz/slurm_output`) are recorded that way.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hpc_libs.slurm import data_parser, queue
from incluster import PARTITION, Cluster
from slurm_exporter import exporter, metrics

SLURMCTLD_SRC = str(Path(__file__).resolve().parents[2] / "charms/slurmctld/src")


def slurmctld_module(name: str) -> ModuleType:
    """Import one of the slurmctld charm's modules from its src (sys.path restored after)."""
    sys.path.insert(0, SLURMCTLD_SRC)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(SLURMCTLD_SRC)


rebuild = slurmctld_module("rebuild")
scaling_view = slurmctld_module("scaling_view")
takeover = slurmctld_module("takeover")

USER = "nobody"
HIDDEN = "rebuild"


@dataclass(frozen=True)
class Hostile:
    """The victim's job id and the ids of the user's forging jobs."""

    victim: int
    forgers: tuple[int, ...]

    def forged_lines(self) -> list[str]:
        """What the forgeries hold: lines that name the victim as a pending job of ours."""
        victim = self.victim
        return [
            f"{victim}|PENDING",
            f"{victim}|PENDING|rebuild:{PARTITION}:1:reboot:{PARTITION}-9",
            f"{victim} PENDING",
        ]


def record(name: str, output: str) -> str:
    """Keep `output` under $SLURM_OUTPUT_RECORD (if set); return it."""
    if folder := os.environ.get("SLURM_OUTPUT_RECORD"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.txt").write_text(output)
    return output


def as_user(cluster: Cluster, *argv: str) -> str:
    """Run a command on the controller as the unprivileged user, from a directory it owns."""
    return cluster.sh(cluster.controller, "runuser", "-u", USER, "--", *argv)


@pytest.fixture(scope="module")
def hostile(cluster: Cluster) -> Iterator[Hostile]:
    """A root-only hidden partition, root's held victim job, and the user's forging jobs.

    The partition has no `EnforcePartLimits=ALL` here (unlike the charm's), so a user's job
    naming it in a list is queued there: the worst case for the parsers.
    """
    controller = cluster.controller
    cluster.sh(
        controller,
        "scontrol",
        "create",
        f"partitionname={HIDDEN}",
        "nodes=ALL",
        "rootonly=yes",
        "hidden=yes",
    )
    submit = ["sbatch", "--parsable", "--hold", "--chdir=/tmp", "--output=/dev/null"]
    victim = int(cluster.sh(controller, *submit, f"-p{PARTITION}", "--wrap=true").strip())
    lines = Hostile(victim, ()).forged_lines()
    forged = "x\n" + "\n".join(lines) + "\r" + lines[0] + "\u2028" + lines[0]
    forgers = [
        as_user(cluster, *submit, f"-p{PARTITION},{HIDDEN}", f"--comment={forged}", "--wrap=true"),
        as_user(cluster, *submit, f"-p{PARTITION}", f"--job-name={forged}", "--wrap=true"),
        as_user(cluster, *submit, f"-p{PARTITION}", f"--account={forged}", "--wrap=true"),
    ]
    found = Hostile(victim, tuple(int(out.strip()) for out in forgers))
    try:
        yield found
    finally:
        cluster.controller.exec(["scancel", str(victim), *map(str, found.forgers)], timeout=60)
        cluster.controller.exec(["scontrol", "delete", f"partitionname={HIDDEN}"], timeout=60)


def test_slurm_prints_users_text_verbatim_so_lines_can_be_forged(
    cluster: Cluster, hostile: Hostile
):
    """The premise: a naive `%i|%T|%k` read of the hidden partition finds the victim."""
    answer = cluster.sh(
        cluster.controller,
        *("squeue", "--all", "--noheader", f"--partition={HIDDEN}", "--states=all"),
        "--format=%i|%T|%k",
    )
    record("squeue-rebuild-naive", answer)

    naive = {line.split("|")[0] for line in answer.split("\n") if "|" in line}
    assert str(hostile.victim) in naive, answer


def test_the_rebuild_query_reads_no_users_line(cluster: Cluster, hostile: Hostile):
    """The charm's rollouts read root's jobs only, id and state: no forged id comes back."""
    answer = record(
        "squeue-rebuild", cluster.sh(cluster.controller, *queue.root_jobs_query(rebuild.PARTITION))
    )

    assert queue.parse_root_jobs(answer) == {}, answer


def real_job_ids(cluster: Cluster) -> set[str]:
    """Every job id Slurm knows (a field no user writes), from a query of ids alone."""
    answer = cluster.sh(cluster.controller, "squeue", "--all", "--noheader", "--format=%i")
    return {line.strip() for line in answer.split("\n") if line.strip()}


def test_the_exporters_jobs_are_the_real_ones_with_their_own_accounts(
    cluster: Cluster, hostile: Hostile
):
    """No forged job, none hidden; an account is only ever the account of its own job."""
    listing = record("squeue-exporter", slurm_query(cluster, exporter.SQUEUE))
    accounts = record("squeue-exporter-accounts", slurm_query(cluster, exporter.SQUEUE_ACCOUNTS))

    jobs = metrics.read_jobs(listing, accounts, metrics.Snapshot())

    assert {job.job_id for job in jobs} == real_job_ids(cluster), listing
    assert {job.user for job in jobs} == {"root", USER}
    forger_ids = {str(forger) for forger in hostile.forgers}
    assert all(not job.account or job.job_id in forger_ids for job in jobs)


def test_the_takeover_repair_names_no_forged_candidate(cluster: Cluster, hostile: Hostile):
    """Every line is a whole record of fields no user writes: each real job read, none forged.

    Held by their users and never started, none is a casualty of a takeover.
    """
    answer = record("squeue-takeover", slurm_query(cluster, takeover.JOBS_QUERY))

    records = [takeover.parse_job_line(line) for line in takeover.lines(answer)]
    assert {str(job.job_id) for job in records if job is not None} == real_job_ids(cluster)
    assert None not in records, answer
    assert takeover.job_candidates(answer, since=0) == [], answer


def test_the_scaling_view_counts_each_pending_job_once(cluster: Cluster, hostile: Hostile):
    """scontrol's JSON keeps users' text in its strings: every real job counted, once."""
    listed = cluster.sh(cluster.controller, "scontrol", "--json=list")
    version = data_parser.choose(data_parser.offered_by_list(listed))
    answers = [
        cluster.sh(cluster.controller, "scontrol", "show", what, f"--json={version}")
        for what in ("nodes", "jobs", "reservations")
    ]

    view = scaling_view.view(*answers, [PARTITION], now=0, version=version)

    examples = {shape["example"] for shape in view["pending"]}
    assert sum(shape["jobs"] for shape in view["pending"]) == len(real_job_ids(cluster))
    assert examples <= {hostile.victim, *hostile.forgers}
    assert view["omitted"] == 0


def slurm_query(cluster: Cluster, argv: list[str]) -> str:
    """Run one of the exporter's queries as the exporter does (epoch times)."""
    env = " ".join(f"{key}={value}" for key, value in metrics.TIME_FORMAT_ENV.items())
    proc = cluster.controller.exec(["env", *env.split(), *argv], timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
