"""The slurmd side: `slurmd -C` parsing, the `--conf` string and the databag model."""

import json

from hpc_libs.interfaces.slurmd import ComputeData
from hpc_libs.slurm import parameters, schema_cache
from hpc_libs.slurm.slurmd import NODE_LINE, merge_node, parse_slurmd_c
from pytest_benchmark.fixture import BenchmarkFixture
from slurmutils import Node, Partition

SLURMD_C = (
    "NodeName=compute-0 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 "
    "ThreadsPerCore=2 RealMemory=257000\nUpTime=12-03:12:41\n"
)
HARDWARE: dict[str, int | str] = {
    "CPUs": 64,
    "Boards": 1,
    "SocketsPerBoard": 2,
    "CoresPerSocket": 16,
    "ThreadsPerCore": 2,
    "RealMemory": 257000,
    "Gres": "gpu:a100:4",
}
schema_cache.install()  # as every charm does when it is built
PARTITION = parameters.Policy(Partition)
PARTITION_CONFIG = "Default=YES MaxTime=1-00:00:00 ExclusiveUser=NO DefMemPerCPU=2000"


def test_parse_slurmd_c(benchmark: BenchmarkFixture) -> None:
    """Hardware from `slurmd -C` output."""
    hardware = benchmark(parse_slurmd_c, SLURMD_C)

    assert hardware["CPUs"] == 64


def test_node_config(benchmark: BenchmarkFixture) -> None:
    """The `--conf` string from hardware, the partition feature and admin parameters."""

    def node_config() -> str:
        admin = Node.from_dict(parameters.parse(NODE_LINE, "Weight=10 Features=fast TmpDisk=1000"))
        return str(merge_node(HARDWARE, "compute", admin))

    conf = benchmark(node_config)

    assert conf.startswith("cpus=64 ")


def test_parse_partition_config(benchmark: BenchmarkFixture) -> None:
    """An operator's `partition-config` text, YES/NO booleans included."""
    partition = benchmark(parameters.parse, PARTITION, PARTITION_CONFIG)

    assert partition["default"] is True


def test_compute_data_from_databag(benchmark: BenchmarkFixture) -> None:
    """What SlurmdRequirer.compute_data does with slurmd's app databag (JSON per field)."""
    partition = parameters.parse(PARTITION, PARTITION_CONFIG)
    databag = {
        "partition": json.dumps({"partitionname": "compute", "nodes": ["compute"], **partition}),
        "nodeset": json.dumps({"nodeset": "compute", "feature": "compute"}),
    }

    def load() -> ComputeData:
        return ComputeData.model_validate({k: json.loads(v) for k, v in databag.items()})

    data = benchmark(load)

    assert data.is_complete
