"""squeue's lines for a recorded `scontrol show jobs --json` answer, as the scaling view asks.

slurmctld's `scaling-view` action reads pending jobs from `squeue --noheader --noconvert
--states=PENDING --Format=<scaling_view.QUEUE_FORMAT>`. squeue and scontrol print the same job
records (both unpack slurmctld's job message), so the line of each recorded pending job is
derived here from its JSON record, field by field as Slurm 24.11's src/squeue/print.c prints
it: JobId `job_id`; NumNodes, NumCPUs and MinCpus the numbers; MinMemory the memory per node
or per CPU in MB (`1000M`, `0`: without the per-CPU flag); Partition as is; ArrayTaskId
the array's task string (with its `%` throttle), else the task id, else `N/A`; tres-alloc the
allocated TRES, else the requested ones, else `N/A`; Reason the job's description if it has
one, else its reason word. tests/slurm/test_rest_recordings.py checks the same on real Slurm.
"""

from __future__ import annotations

from typing import Any


def _number(value: Any) -> int:
    if isinstance(value, dict):
        return int(value.get("number", 0)) if value.get("set", True) else 0
    return int(value)


def _megabytes(value: int) -> str:
    return f"{value}M" if value else "0"


def _task(job: dict[str, Any]) -> str:
    if job.get("array_task_string"):
        return job["array_task_string"]
    task = job.get("array_task_id")
    if isinstance(task, dict) and task.get("set"):
        return str(task["number"])
    return "N/A"


def queue_line(job: dict[str, Any]) -> str:
    """squeue's line of one job record (data_parser v0.0.40 to v0.0.45)."""
    state = job["job_state"]
    assert "PENDING" in (state if isinstance(state, list) else [state])
    fields = [
        str(job["job_id"]),
        str(_number(job["node_count"])),
        str(_number(job["cpus"])),
        str(_number(job["minimum_cpus_per_node"])),
        _megabytes(_number(job["memory_per_node"]) or _number(job["memory_per_cpu"])),
        job["partition"],
        _task(job),
        job.get("tres_alloc_str") or job.get("tres_req_str") or "N/A",
        job.get("state_description") or job["state_reason"],
    ]
    return "|".join(fields)


def queue_text(jobs: dict[str, Any]) -> str:
    """squeue's output for the pending jobs of a recorded jobs answer."""
    pending = [job for job in jobs["jobs"] if "PENDING" in job["job_state"]]
    return "".join(f"{queue_line(job)}\n" for job in pending)
