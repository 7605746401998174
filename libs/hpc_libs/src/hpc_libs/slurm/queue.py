r"""Slurm's queue as root acts on it: submit, ask whether jobs are busy, hold, cancel.

Job comments, names, accounts and reasons are users' text, and Slurm prints a newline in
them verbatim: a line of `squeue` output can be forged by any user. So every query here
prints only fields that cannot hold a separator or a newline (job ids, states), the answer
is split on "\n" only, and a line that is not a whole record is skipped. Root acts only on
job ids it chose from such records or submitted itself: `hold`, `scancel` and
`cancel_reboot` take ids and node names, never text read from a job.
"""

import re
from collections.abc import Sequence

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host

TIMEOUT = 60
"""Seconds one command may take."""
JOB_ID = re.compile(r"[1-9][0-9]{0,7}")
JOB_LINE = re.compile(r"(?P<id>[1-9][0-9]{0,7})\|(?P<state>[A-Z_]{1,32})")
"""A line of `root_jobs_query`: the job id and its state, both fields no user can write."""


def sbatch(options: Sequence[str], *, timeout: float = TIMEOUT) -> int:
    """Submit a batch job as root with `options`; return its id (`sbatch --parsable`).

    Raises:
        SlurmOpsError: sbatch failed, or printed something other than a job id.

    """
    parsable = host.run(["sbatch", "--parsable", *options], timeout=timeout).stdout
    text = parsable.strip().split(";")[0]  # `<id>` or `<id>;<cluster>`
    if not JOB_ID.fullmatch(text):
        raise SlurmOpsError(f"sbatch printed {parsable.strip()[:80]!r}, not a job id")
    return int(text)


def root_jobs_query(partition: str) -> list[str]:
    """`squeue` printing root's jobs of `partition`, ended ones included: `<id>|<STATE>`.

    `--user=root`: a user's job in the partition, whatever it says of itself, is not listed.
    """
    return [
        "squeue",
        "--all",
        "--noheader",
        f"--partition={partition}",
        "--user=root",
        "--states=all",
        "--format=%i|%T",
    ]


def root_jobs(partition: str, *, timeout: float = TIMEOUT) -> dict[int, str]:
    """Return the state of each of root's jobs of `partition` Slurm knows, by job id.

    Raises:
        SlurmOpsError: squeue failed.

    """
    return parse_root_jobs(host.run(root_jobs_query(partition), timeout=timeout).stdout)


def parse_root_jobs(output: str) -> dict[int, str]:
    """Read `root_jobs_query`'s answer, split on new lines only (never CR, U+2028...).

    A line that is not a whole `<id>|<STATE>` record is skipped.
    """
    states: dict[int, str] = {}
    for line in output.split("\n"):
        if (match := JOB_LINE.fullmatch(line.strip())) is not None:
            states[int(match["id"])] = match["state"]
    return states


def busy_jobs_query(selection: str, states: Sequence[str]) -> list[str]:
    """`squeue` listing the ids of `selection`'s jobs in `states`: nothing once none is left.

    `selection` is `--partition=<name>` or `--nodelist=<node>`.
    """
    return ["squeue", "--noheader", "--format=%i", selection, f"--states={','.join(states)}"]


def has_jobs(query: Sequence[str], *, timeout: float = TIMEOUT) -> bool:
    """Whether `query` (`busy_jobs_query`) lists any job.

    Raises:
        SlurmOpsError: squeue failed (the caller decides what that means).

    """
    return bool(host.run(query, timeout=timeout).stdout.strip())


def hold(job_ids: Sequence[int], *, timeout: float = TIMEOUT) -> None:
    """Hold pending jobs (`scontrol hold`), by id: they start only once released.

    Raises:
        SlurmOpsError: scontrol failed.

    """
    host.run(["scontrol", "hold", ",".join(map(str, job_ids))], timeout=timeout)


def scancel(job_ids: Sequence[int], *, timeout: float = TIMEOUT) -> None:
    """Cancel jobs, by id.

    Raises:
        SlurmOpsError: scancel failed.

    """
    host.run(["scancel", *map(str, job_ids)], timeout=timeout)


def cancel_reboot(nodes: Sequence[str], *, timeout: float = TIMEOUT) -> None:
    """Cancel the reboots requested for `nodes` and not issued yet.

    Raises:
        SlurmOpsError: scontrol failed.

    """
    host.run(["scontrol", "cancel_reboot", ",".join(nodes)], timeout=timeout)
