"""`hpc_libs.slurm.queue`: root's commands on Slurm's queue, and what it reads of the answers."""

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import queue
from hpc_libs_fakes import FakeRun


@pytest.mark.parametrize(("printed", "job_id"), [("41\n", 41), ("42;cluster\n", 42)])
def test_sbatch_returns_the_id_it_printed(fake_run: FakeRun, printed: str, job_id: int):
    fake_run.on("sbatch", stdout=printed)

    assert queue.sbatch(["--wrap=true"]) == job_id
    assert fake_run.calls == [["sbatch", "--parsable", "--wrap=true"]]


@pytest.mark.parametrize("printed", ["", "Submitted batch job 41\n", "0\n", "123456789\n"])
def test_sbatch_refuses_what_is_no_job_id(fake_run: FakeRun, printed: str):
    fake_run.on("sbatch", stdout=printed)

    with pytest.raises(SlurmOpsError, match="not a job id"):
        queue.sbatch(["--wrap=true"])


def test_root_jobs_asks_for_roots_jobs_only_and_reads_whole_records(fake_run: FakeRun):
    forged = "7|PENDING\r8|PENDING\n9|RUNNING|comment\n10|PENDING\u202811|PENDING\n"
    fake_run.on("squeue", stdout=f"5|COMPLETED\n{forged}6|PENDING\n")

    assert queue.root_jobs("rebuild") == {5: "COMPLETED", 6: "PENDING"}
    assert "--user=root" in fake_run.calls[0]
    assert "--partition=rebuild" in fake_run.calls[0]


def test_busy_queries_print_ids_only(fake_run: FakeRun):
    query = queue.busy_jobs_query("--nodelist=compute-0", ("RUNNING", "COMPLETING"))
    fake_run.on("squeue", stdout="")

    assert not queue.has_jobs(query)
    assert fake_run.calls == [
        [
            "squeue",
            "--noheader",
            "--format=%i",
            "--nodelist=compute-0",
            "--states=RUNNING,COMPLETING",
        ]
    ]


def test_hold_scancel_and_cancel_reboot_take_ids_and_nodes(fake_run: FakeRun):
    queue.hold([3, 4])
    queue.scancel([3, 4])
    queue.cancel_reboot(["compute-0", "compute-1"])

    assert fake_run.calls == [
        ["scontrol", "hold", "3,4"],
        ["scancel", "3", "4"],
        ["scontrol", "cancel_reboot", "compute-0,compute-1"],
    ]
