"""A real configless Slurm cluster in lab machines, set up only through hpc_libs.

One controller machine and two compute machines boot once per session. hpc_libs and its
dependencies are installed for the machines' Python 3.13 into the lab's charms dir, which
every machine sees read-only at /lab/charms. The controller and the compute nodes are then
configured and started by SlurmctldManager and SlurmdManager, the way the charms do it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from incluster import (
    COMPUTES,
    CONTROLLER,
    DEPS_NAME,
    LOGIN,
    PARTITION,
    SLURMCTLD_LOG,
    Cluster,
    build_hpc_libs_deps,
)
from slurm_lab.machines import CHARMS_MOUNT, Lab, Machine

REPO = Path(__file__).resolve().parents[2]
#: This tier's own lab, apart from other labs on the host (the base cache is shared).

CONTROLLER_SETUP = """
from hpc_libs.slurm.slurmctld import SlurmctldManager
from slurmutils import CGroupConfig, NodeSet, Partition, SlurmConfig

manager = SlurmctldManager()
installed = manager.install("archive")
key = manager.key.generate()
key_written = manager.key.set(key)
conf = SlurmConfig.from_dict(
    {
        "clustername": "slurmtests",
        "slurmctldhost": [f"{args['hostname']}({args['address']})"],
        "slurmuser": "slurm",
        "authtype": "auth/slurm",
        "credtype": "cred/slurm",
        "slurmctldparameters": {"enable_configless": True},
        "maxnodecount": 16,
        "statesavelocation": str(manager.state_save_location),
        "selecttype": "select/cons_tres",
        "proctracktype": "proctrack/linuxproc",
        "jobacctgathertype": "jobacct_gather/none",
        "slurmctldlogfile": args["log"],
    }
)
conf.nodesets[args["partition"]] = NodeSet.from_dict(
    {"nodeset": args["partition"], "feature": args["partition"]}
)
conf.partitions[args["partition"]] = Partition.from_dict(
    {"partitionname": args["partition"], "nodes": [args["partition"]]}
)
conf_written = manager.config.write(conf)
cgroup_written = manager.cgroup_config.write(CGroupConfig.from_dict({"cgroupplugin": "disabled"}))
manager.create_state_save_location()
manager.service.enable()
manager.service.start()
result = {
    "installed": installed,
    "key": key,
    "key_read_back": manager.key.get(),
    "written": [key_written, conf_written, cgroup_written],
    "rewritten": [
        manager.key.set(key),
        manager.config.write(conf),
        manager.cgroup_config.write(CGroupConfig.from_dict({"cgroupplugin": "disabled"})),
    ],
    "reloaded": manager.config.load().dict() == conf.dict(),
    "active": manager.service.is_active(),
    "version": manager.version(),
}
"""

COMPUTE_SETUP = """
from hpc_libs.slurm.slurmd import SlurmdManager, merge_node
from slurmutils import Node

manager = SlurmdManager()
installed = manager.install("archive")
key_written = manager.key.set(args["key"])
hardware = manager.detect_hardware()
conf = str(merge_node(hardware, args["partition"], Node()))
options_written = manager.set_start_options(args["node"], [args["controller"]], conf)
manager.service.enable()
manager.service.start()
result = {
    "installed": installed,
    "written": [key_written, options_written],
    "rewritten": [
        manager.key.set(args["key"]),
        manager.set_start_options(args["node"], [args["controller"]], conf),
    ],
    "hardware": hardware,
    "conf": conf,
    "active": manager.service.is_active(),
}
"""

LOGIN_SETUP = """
from hpc_libs.slurm.sackd import SackdManager

manager = SackdManager()
installed = manager.install("archive")
written = [manager.key.set(args["key"]), manager.set_conf_servers([args["controller"]])]
manager.service.enable()
manager.service.start()
result = {
    "installed": installed,
    "written": written,
    "rewritten": [manager.key.set(args["key"]), manager.set_conf_servers([args["controller"]])],
    "active": manager.service.is_active(),
}
"""


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab of its own (a fresh state dir), so two runs on one host never share machines."""
    lab = Lab(state_dir=tmp_path_factory.mktemp("lab"))
    lab.ensure_base()
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def hpc_libs_deps(lab: Lab) -> Iterator[str]:
    """hpc_libs plus dependencies for Python 3.13, as seen inside the machines.

    $HPC_LIBS_TESTS_SOURCE may name another hpc_libs package dir (a mutated copy, to see
    that these tests fail when the library is wrong).
    """
    source = os.environ.get("HPC_LIBS_TESTS_SOURCE")
    target = lab.charms_dir / DEPS_NAME
    try:
        build_hpc_libs_deps(REPO, target, Path(source) if source else None)
        yield f"{CHARMS_MOUNT}/{DEPS_NAME}"
    finally:
        shutil.rmtree(target, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(lab: Lab, hpc_libs_deps: str) -> Cluster:
    started = time.monotonic()
    names = [CONTROLLER, *COMPUTES.values()]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        machines: dict[str, Machine] = dict(zip(names, pool.map(lab.create, names), strict=True))
    controller = machines[CONTROLLER]
    cluster = Cluster(
        controller,
        {node: machines[host] for node, host in COMPUTES.items()},
        deps=hpc_libs_deps,
    )
    cluster.timings["boot"] = time.monotonic() - started

    setup = cluster.py(
        controller,
        CONTROLLER_SETUP,
        hostname=controller.name,
        address=controller.address,
        partition=PARTITION,
        log=SLURMCTLD_LOG,
    )
    assert setup["installed"] is False, "install('archive') must not install present packages"
    assert setup["written"] == [True, True, True], setup
    assert setup["rewritten"] == [False, False, False], "unchanged files must not be rewritten"
    assert setup["key_read_back"] == setup["key"]
    assert setup["reloaded"], "slurm.conf read back differs from what was written"
    assert setup["version"].startswith("24.11"), setup["version"]
    assert setup["active"], controller.journal("slurmctld", 50)
    cluster.key = setup["key"]

    for node, machine in cluster.computes.items():
        compute = cluster.py(
            machine,
            COMPUTE_SETUP,
            key=cluster.key,
            node=node,
            controller=controller.name,
            partition=PARTITION,
        )
        assert compute["installed"] is False
        assert compute["written"] == [True, True], compute
        assert compute["rewritten"] == [False, False], "unchanged options must not be rewritten"
        assert compute["active"], machine.journal("slurmd", 50)
    for node in cluster.computes:
        cluster.wait_for_node_state(node, "IDLE")
    cluster.timings["cluster up"] = time.monotonic() - started
    print(f"\n[slurm tier] timings: {cluster.timings}")
    return cluster


@pytest.fixture(scope="session")
def login(lab: Lab, cluster: Cluster) -> Machine:
    """A login machine whose sackd SackdManager configured and started."""
    machine = lab.create(LOGIN)
    setup = cluster.py(machine, LOGIN_SETUP, key=cluster.key, controller=cluster.controller.name)
    assert setup["installed"] is False
    assert setup["written"] == [True, True], setup
    assert setup["rewritten"] == [False, False], "unchanged files must not be rewritten"
    assert setup["active"], machine.journal("sackd", 50)
    return machine
