"""slurmctld's operator options on real Slurm (issue 11, "Config" and "ports").

One deployment for the module, driven as a scenario: slurmctld, two slurmd applications of
one unit each (`compute`, the oldest, and `debug`, so the default partition can move) and a
sackd login node `login`. Runs on real Juju or on the lab (see conftest.py).

- a `slurm-conf-parameters` change shows in `scontrol show config` after exactly one
  `scontrol reconfigure` (slurmctld logs one "Processing Reconfiguration Request" each);
- a refused key blocks slurmctld naming it, and the configuration served stays the last
  valid one (slurm.conf untouched, no reconfigure);
- `default-partition` moves the default; naming an application that is not integrated
  blocks and the implicit default (the oldest application's) applies;
- `cgroup-parameters` lands in cgroup.conf and slurmctld keeps running (the lab runs
  `process-isolation=none`, so no slurmd enforces it there);
- every daemon opened its port, and listens on it (sackd too: slurmctld pushes each new
  configuration to login nodes on SlurmdPort);
- an `SrunPortRange` is opened (Juju's `open-port <from>-<to>/tcp`) on the login and compute
  nodes, where srun runs, and closed once removed; srun listens inside it and its job runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import deploy_slurm, wait_for_active
from dynamic_nodes_helpers import (
    partition,
    poll,
    reconfigure_count,
    sh,
    slurm_conf_fingerprint,
    wait_all_idle,
)

RELEASES = ("forky",)
"""One release, the newer: the overrides meet the same grammar and slurmctld's own parser."""

SETTLE = 10 * 60
REACT = 3 * 60
PUSHED_CONF = "cat /run/slurm/conf/slurm.conf"
"""The configless copy sackd keeps on a login node."""
TUNING = "# Backfill every 45 s.\nSchedulerParameters=bf_interval=45\nMaxJobCount=20000\n"


wait_active = partial(wait_for_active, timeout=SETTLE)


def wait_slurmctld_blocked(juju: jubilant.Juju, words: str) -> jubilant.Status:
    """Wait until slurmctld's unit is blocked with `words` in its message."""

    def blocked(status: jubilant.Status) -> bool:
        unit = status.apps["slurmctld"].units["slurmctld/0"].workload_status
        return unit.current == "blocked" and words in unit.message

    return juju.wait(blocked, error=jubilant.any_error, timeout=REACT)


def show_config(juju: jubilant.Juju) -> dict[str, str]:
    """`scontrol show config` as a mapping (what the running slurmctld uses)."""
    out = sh(juju, "scontrol show config")
    pairs = (line.partition("=") for line in out.splitlines() if " = " in line)
    return {key.strip(): value.strip() for key, _, value in pairs}


def listening_ports(juju: jubilant.Juju, unit: str) -> set[str]:
    """The TCP ports a unit's machine listens on, as `<port>/tcp` (from /proc/net/tcp*)."""
    return listening_in(sh(juju, "cat /proc/net/tcp /proc/net/tcp6", unit=unit))


def listening_in(proc_net_tcp: str) -> set[str]:
    """The listening ports in the text of /proc/net/tcp and tcp6, as `<port>/tcp`."""
    fields = [line.split() for line in proc_net_tcp.splitlines()]
    return {
        f"{int(f[1].rsplit(':', 1)[1], 16)}/tcp"
        for f in fields
        if len(f) > 3 and f[3] == "0A" and ":" in f[1]
    }


def open_ports(juju: jubilant.Juju, unit: str) -> set[str]:
    """The ports `juju status` shows the unit opened."""
    return set(juju.status().apps[unit.split("/", maxsplit=1)[0]].units[unit].open_ports)


def default_partition(juju: jubilant.Juju) -> set[str]:
    """The partitions marked Default=YES."""
    return {p for p in ("compute", "debug") if "Default=YES" in partition(juju, p)}


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    """slurmctld, slurmd applications `compute` (older) and `debug`, and `login`, all active."""
    deploy_slurm(juju, charm_path, computes=(("compute", 1), ("debug", 1)))
    wait_active(juju)
    wait_all_idle(juju, ["compute-0", "debug-0"])
    return juju


def test_every_daemon_opened_the_port_it_listens_on(cluster: jubilant.Juju):
    status = cluster.status()
    opened = {
        unit: set(status.apps[unit.split("/")[0]].units[unit].open_ports)
        for unit in ("slurmctld/0", "compute/0", "login/0")
    }

    assert opened == {
        "slurmctld/0": {"6817/tcp"},
        "compute/0": {"6818/tcp"},
        "login/0": {"6818/tcp"},
    }
    for unit, ports in opened.items():
        assert ports <= listening_ports(cluster, unit), unit


def test_slurm_conf_parameters_show_in_scontrol_with_one_reconfigure(cluster: jubilant.Juju):
    reconfigures = reconfigure_count(cluster)
    # The charm's default, which the operator's SchedulerParameters replace.
    assert show_config(cluster)["SchedulerParameters"] == "batch_sched_delay=1"

    cluster.config("slurmctld", {"slurm-conf-parameters": TUNING})
    shown = poll(
        lambda: c if (c := show_config(cluster)).get("MaxJobCount") == "20000" else None,
        timeout=REACT,
        what="MaxJobCount = 20000 in scontrol show config",
    )
    wait_active(cluster)

    assert shown["SchedulerParameters"] == "bf_interval=45"
    assert reconfigure_count(cluster) - reconfigures == 1
    assert show_config(cluster)["MaxJobCount"] == "20000"  # And no later change.
    poll(  # Pushed to the login node by the reconfigure (sackd listens on 6818).
        lambda: "maxjobcount=20000" in sh(cluster, PUSHED_CONF, unit="login/0").splitlines(),
        timeout=60,
        what="the new slurm.conf on the login node",
    )


def test_a_refused_key_blocks_naming_it_and_the_last_config_is_served(cluster: jubilant.Juju):
    reconfigures = reconfigure_count(cluster)
    conf = slurm_conf_fingerprint(cluster)

    cluster.config(
        "slurmctld", {"slurm-conf-parameters": f"{TUNING}MinJobAge=5\nAuthType=auth/none\n"}
    )
    wait_slurmctld_blocked(cluster, "AuthType")

    assert slurm_conf_fingerprint(cluster) == conf
    assert show_config(cluster)["MaxJobCount"] == "20000"
    assert reconfigure_count(cluster) == reconfigures
    assert "Default=YES" in partition(cluster, "compute")  # Slurm still answers as before.

    cluster.config("slurmctld", {"slurm-conf-parameters": TUNING})
    wait_active(cluster)
    assert slurm_conf_fingerprint(cluster) == conf  # Back to the same text: nothing applied.
    assert reconfigure_count(cluster) == reconfigures


def test_default_partition_moves_the_default(cluster: jubilant.Juju):
    assert default_partition(cluster) == {"compute"}  # The oldest application's.

    cluster.config("slurmctld", {"default-partition": "debug"})
    poll(
        lambda: default_partition(cluster) == {"debug"},
        timeout=REACT,
        what="debug as the only default partition",
    )
    wait_active(cluster)
    job = sh(cluster, "srun --mem=1 printenv SLURM_JOB_PARTITION", wait=60)

    assert job.strip() == "debug"


def test_a_default_partition_not_integrated_blocks_and_the_oldest_is_the_default(
    cluster: jubilant.Juju,
):
    cluster.config("slurmctld", {"default-partition": "gpu"})
    wait_slurmctld_blocked(cluster, "default-partition 'gpu'")

    poll(
        lambda: default_partition(cluster) == {"compute"},
        timeout=REACT,
        what="compute as the default partition again",
    )


def test_cgroup_parameters_land_in_cgroup_conf(cluster: jubilant.Juju):
    cluster.config(
        "slurmctld", {"default-partition": "", "cgroup-parameters": "ConstrainCores=yes"}
    )
    poll(
        lambda: "constraincores=yes" in sh(cluster, "cat /etc/slurm/cgroup.conf").splitlines(),
        timeout=REACT,
        what="constraincores=yes in cgroup.conf",
    )
    wait_active(cluster)

    assert sh(cluster, "cat /etc/slurm/cgroup.conf").splitlines()[0] == "cgroupplugin=disabled"
    assert sh(cluster, "systemctl is-active slurmctld").strip() == "active"
    assert "compute-0" in sh(cluster, "sinfo --noheader --format=%N")


def test_the_srun_port_range_opens_where_srun_runs_and_srun_listens_there(
    cluster: jubilant.Juju,
):
    cluster.config("slurmctld", {"slurm-conf-parameters": f"{TUNING}SrunPortRange=60001-60100\n"})
    poll(
        lambda: all(
            open_ports(cluster, u) == {"6818/tcp", "60001-60100/tcp"}
            for u in ("login/0", "compute/0", "debug/0")
        ),
        timeout=REACT,
        what="60001-60100/tcp opened on the login and compute nodes",
    )
    wait_active(cluster)
    # A step runs while its srun, on the login node, listens: only inside the range.
    proc = "cat /proc/net/tcp /proc/net/tcp6"
    before, _, during = sh(
        cluster,
        f"{proc}; echo ===; srun -p compute --mem=1 sleep 6 & sleep 3; {proc}; wait",
        unit="login/0",
    ).partition("===")
    srun_ports = {int(p.split("/")[0]) for p in listening_in(during) - listening_in(before)}

    assert show_config(cluster)["SrunPortRange"] == "60001-60100"
    assert open_ports(cluster, "slurmctld/0") == {"6817/tcp"}
    assert srun_ports
    assert all(60001 <= p <= 60100 for p in srun_ports), srun_ports

    cluster.config("slurmctld", {"slurm-conf-parameters": TUNING})
    poll(
        lambda: all(open_ports(cluster, u) == {"6818/tcp"} for u in ("login/0", "compute/0")),
        timeout=REACT,
        what="the range closed again",
    )
    wait_active(cluster)
