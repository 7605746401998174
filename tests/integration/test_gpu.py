"""GPU compute nodes end to end (issue 12 "Done when"), on lab machines with simulated GPUs.

Lab only: the `lab-gpus` constraint gives each machine of an application simulated NVIDIA
GPUs that Slurm 24.11's own gpu/nvidia plugin detects (see `slurm_lab.gpu`). slurmctld
serves gres.conf `AutoDetect=nvidia`; the slurmd charm takes the node's `Gres=` from
`slurmd -C`.

The cluster: slurmctld, slurmd application `gpu` (two machines, each with two `Tesla T4`)
and slurmd application `cpu` (one machine without GPU), side by side. One deployment for the
module; the tests run in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import jubilant
import pytest
from deploy_helpers import CONTROLLER_OPTIONS, LAB_OPTIONS, wait_for_active
from dynamic_nodes_helpers import all_nodes_idle, node, node_states, poll, sh

from conftest import on_real_juju

RELEASES = ("trixie", "forky")
"""GRES as 24.11 and 26.05 configure and report them."""

GPU_MODEL = "Tesla T4"
GPU_GRES = "gpu:tesla_t4:2"
# GRES are never oversubscribed; CPUs are (FORCE), so the GPUs alone limit the jobs below.
GPU_PARTITION = "OverSubscribe=force DefCpuPerGPU=1 DefMemPerGPU=100 MaxCPUsPerNode=8"
SETTLE = 10 * 60

pytestmark = pytest.mark.skipif(
    on_real_juju(), reason="simulated GPUs are a lab machine option (lab-gpus)"
)


wait_active = partial(wait_for_active, timeout=SETTLE)


def lab_machine(juju: Any, unit: str) -> Any:
    """The lab machine a unit runs on."""
    return juju.lab.get(juju.ctl.model.units[unit].machine)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> Iterator[jubilant.Juju]:
    """slurmctld, a `gpu` application on 2-GPU machines and a `cpu` application, active."""
    juju.deploy(charm_path("slurmctld"), "slurmctld", config=CONTROLLER_OPTIONS)
    juju.deploy(
        charm_path("slurmd"),
        "gpu",
        num_units=2,
        config={**LAB_OPTIONS, "partition-config": GPU_PARTITION},
        constraints={"lab-gpus": f"2:{GPU_MODEL}"},
    )
    juju.deploy(charm_path("slurmd"), "cpu", config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmd", "gpu:slurmctld")
    juju.integrate("slurmctld:slurmd", "cpu:slurmctld")
    wait_active(juju)
    poll(lambda: all_nodes_idle(juju, ["gpu-0", "gpu-1", "cpu-0"]), timeout=60, what="nodes idle")
    yield juju
    sh(juju, "scancel --user=root || true")


def test_gres_conf_is_served_with_autodetect(cluster: jubilant.Juju):
    served = sh(cluster, "cat /etc/slurm/gres.conf")
    assert re.search(r"(?i)^autodetect\s*=\s*nvidia$", served, re.MULTILINE), served
    # The GPU node fetched it configless (no gres.conf of its own).
    cached = sh(cluster, "cat /run/slurm/conf/gres.conf", unit="gpu/0")
    assert cached == served


def test_gpu_node_registers_with_its_gres_and_cpu_node_without(cluster: jubilant.Juju):
    cpu_node = node(cluster, "cpu-0")
    assert cpu_node is not None and cpu_node["gres"] == ""
    for name in ("gpu-0", "gpu-1"):
        gpu_node = node(cluster, name)
        assert gpu_node is not None
        print(f"EVIDENCE {name} gres={gpu_node['gres']}")
        # Slurm adds the GPUs' socket affinity (from local_cpulist): `gpu:tesla_t4:2(S:0)`.
        assert re.fullmatch(rf"{re.escape(GPU_GRES)}(\(S:[0-9,-]+\))?", gpu_node["gres"])
    found = sh(cluster, "slurmd -C", unit="gpu/0")
    print(f"EVIDENCE slurmd -C on gpu/0: {found!r}")
    assert f"Gres={GPU_GRES}" in found.splitlines()[0]
    assert "Autodetect=nvidia" in found
    partition = sh(cluster, "scontrol show partition gpu --oneliner")
    assert "DefCpuPerGPU=1" in partition and "DefMemPerGPU=100" in partition
    assert "MaxCPUsPerNode=8" in partition


def test_a_one_gpu_step_sees_one_device(cluster: jubilant.Juju):
    env = sh(cluster, "srun -p gpu --gres=gpu:1 env", wait=120)
    visible = [line for line in env.splitlines() if line.startswith("CUDA_VISIBLE_DEVICES=")]
    assert len(visible) == 1, env
    print(f"EVIDENCE srun -p gpu --gres=gpu:1 env: {visible}")
    devices = visible[0].split("=", 1)[1]
    assert re.fullmatch(r"[01]", devices), visible
    # A CPU job on the CPU partition gets no GPU.
    cpu_env = sh(cluster, "srun -p cpu env", wait=120)
    assert "CUDA_VISIBLE_DEVICES" not in cpu_env


def test_two_one_gpu_jobs_share_the_node_and_a_third_waits(cluster: jubilant.Juju):
    submit = "sbatch --parsable -p gpu -w gpu-0 --gres=gpu:1 --oversubscribe --wrap 'sleep 120'"
    jobs = [sh(cluster, submit).strip() for _ in range(3)]

    def states() -> dict[str, tuple[str, str, str]] | None:
        out = sh(cluster, f"squeue --noheader -j {','.join(jobs)} -o '%i %T %N %r'")
        found = {}
        for line in out.splitlines():
            job_id, state, *rest = line.split()
            found[job_id] = (state, rest[0] if len(rest) > 1 else "", rest[-1])
        running = [j for j, s in found.items() if s[0] == "RUNNING"]
        # A job just submitted pends with reason None until the scheduler has looked at it.
        judged = all(s[2] != "None" for s in found.values() if s[0] == "PENDING")
        return found if len(running) == 2 and len(found) == 3 and judged else None

    found = poll(states, timeout=60, what="two GPU jobs running, the third judged")
    running = {j: s for j, s in found.items() if s[0] == "RUNNING"}
    pending = {j: s for j, s in found.items() if s[0] == "PENDING"}
    assert {s[1] for s in running.values()} == {"gpu-0"}
    assert len(pending) == 1
    assert next(iter(pending.values()))[2] == "Resources"
    print(f"EVIDENCE squeue: {found}")
    # The node's CPUs are not what the third job waits for: a job without GPU runs now.
    cpu_job = sh(
        cluster,
        "srun -p gpu -w gpu-0 --oversubscribe --mem=100 --immediate=30 hostname",
        wait=60,
    )
    assert cpu_job.strip()
    sh(cluster, f"scancel {' '.join(jobs)}")
    poll(lambda: all_nodes_idle(cluster, ["gpu-0"]), timeout=60, what="gpu-0 idle again")


def test_a_driver_failure_keeps_the_node_and_blocks_the_unit(cluster: jubilant.Juju):
    from slurm_lab import gpu

    before = node(cluster, "gpu-0")
    assert before is not None
    machine = lab_machine(cluster, "gpu/0")
    gpu.fail_driver(machine)
    try:
        with pytest.raises(jubilant.TaskError) as failure:
            cluster.run("gpu/0", "detect-hardware")
        assert "NVIDIA driver loaded but Slurm found no GPU" in str(failure.value)
        cluster.update_status("gpu/0")  # type: ignore[attr-defined]  # lab only
        status = cluster.status().apps["gpu"].units["gpu/0"].workload_status
        assert status.current == "blocked"
        assert "NVIDIA driver loaded but Slurm found no GPU" in status.message
        print(f"EVIDENCE gpu/0 status: {status.current}: {status.message}")
        after = node(cluster, "gpu-0")
        assert after is not None
        assert after["gres"] == before["gres"]
        print(f"EVIDENCE gpu-0 after failure: gres={after['gres']} state={after['state']}")
        assert node_states(after) == node_states(before)
        assert "DRAIN" not in node_states(after)
        assert (
            sh(
                cluster,
                "systemctl list-units --all 'slurmd-reregister*' --no-legend",
                unit="gpu/0",
            ).strip()
            == ""
        )
    finally:
        gpu.restore_driver(machine, gpu.GpuSpec(2, GPU_MODEL))
    result = cluster.run("gpu/0", "detect-hardware")
    assert result.results["gres"] == GPU_GRES
    assert result.results["changed"] in (False, "False", "false")
    wait_active(cluster, "gpu")
