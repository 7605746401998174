"""slurm.conf through SlurmctldManager's config path, with 1 and 50 partitions.

Every slurmctld reconcile loads slurm.conf, sets one partition and nodeset per slurmd
application, renders the file and compares it with the one on disk.
"""

from pathlib import Path

import pytest
from hpc_libs.slurm.slurmctld import SlurmctldManager
from pytest_benchmark.fixture import BenchmarkFixture
from slurmutils import NodeSet, Partition, SlurmConfig

SIZES = [1, 50]


def cluster_config(partitions: int) -> SlurmConfig:
    """Return a controller's slurm.conf with `partitions` partitions of dynamic nodes."""
    conf = SlurmConfig(
        clustername="hpc",
        slurmctldhost=["ctl-0(10.0.0.1)", "ctl-1(10.0.0.2)"],
        authtype="auth/slurm",
        credtype="cred/slurm",
        slurmctldparameters={"enable_configless": True},
        disablerootjobs=True,
    )
    for index in range(partitions):
        name = f"compute-{index}"
        conf.nodesets[name] = NodeSet(nodeset=name, feature=name)
        conf.partitions[name] = Partition(
            partitionname=name,
            nodes=[name],
            default=index == 0,
            maxtime="1-00:00:00",
            exclusiveuser=False,
        )
    return conf


@pytest.fixture
def manager(tmp_path: Path) -> SlurmctldManager:
    """Return a controller whose files live under `tmp_path`."""
    return SlurmctldManager(tmp_path)


@pytest.mark.parametrize("partitions", SIZES)
def test_render_slurm_conf(
    benchmark: BenchmarkFixture, manager: SlurmctldManager, partitions: int
) -> None:
    """Render slurm.conf text, YES/NO booleans included (what `write` compares)."""
    conf = cluster_config(partitions)

    text = benchmark(manager.config.render, conf)

    assert text.count("partitionname=") == partitions
    assert "default=YES" in text


@pytest.mark.parametrize("partitions", SIZES)
def test_load_slurm_conf(
    benchmark: BenchmarkFixture, manager: SlurmctldManager, partitions: int
) -> None:
    """Read and parse slurm.conf from disk."""
    manager.config.write(cluster_config(partitions))

    conf = benchmark(manager.config.load)

    assert len(conf.partitions) == partitions
    assert conf.partitions["compute-0"].default is True


@pytest.mark.parametrize("partitions", SIZES)
def test_reconcile_slurm_conf(
    benchmark: BenchmarkFixture, manager: SlurmctldManager, partitions: int
) -> None:
    """Load, set every partition again, render and compare: the unchanged-file case."""
    wanted = cluster_config(partitions)
    manager.config.write(wanted)

    def reconcile() -> bool:
        conf = manager.config.load()
        conf.nodesets = wanted.nodesets
        conf.partitions = wanted.partitions
        return manager.config.write(conf)

    assert benchmark(reconcile) is False
