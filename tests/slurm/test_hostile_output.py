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
from incluster import PARTITION, Cluster

SLURMCTLD_SRC = str(Path(__file__).resolve().parents[2] / "charms/slurmctld/src")


def slurmctld_module(name: str) -> ModuleType:
    """Import one of the slurmctld charm's modules from its src (sys.path restored after)."""
    sys.path.insert(0, SLURMCTLD_SRC)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(SLURMCTLD_SRC)


rebuild = slurmctld_module("rebuild")

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
    answer = record("squeue-rebuild", cluster.sh(cluster.controller, *rebuild.JOBS_QUERY))

    assert rebuild.parse_jobs(answer) == {}, answer
