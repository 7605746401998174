"""Slurm's own metrics endpoint (Slurm 25.11 and newer) through cos-agent, on the newer Slurm
(`just integration-newer`: Debian forky's 26.05; on Slurm 24.11 the module is skipped).

One lean deployment: two slurmctld units on network state (HA), one slurmd, the COS collector
stand-in on both controllers and the stand-in for COS's Prometheus. Both controllers' collectors
scrape slurmctld on their own machine; a backup redirects (303) to the primary, which the jobs
do not follow, so COS holds the native series of the primary's unit only, renamed
`slurm_native_*` beside the exporter's. With PrivateData set the charm turns the endpoint off
and offers no native job. The option is left at its default (`auto`): every daemon runs 26.05,
so the leader turns the endpoint on by itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import poll
from ha_helpers import unit_of_host
from test_observability import prometheus, value

from conftest import lab_suite, on_real_juju

pytestmark = [
    pytest.mark.newer_slurm,
    pytest.mark.skipif(on_real_juju(), reason="the COS stand-ins are the lab's"),
    pytest.mark.skipif(lab_suite() != "forky", reason="needs Slurm 25.11 or newer (forky)"),
]

SETTLE = 15 * 60
NATIVE = 'label_replace({__name__=~"slurm_native_.+"}, "name", "$1", "__name__", "(.+)")'
"""Every native series, its name kept in `name` (functions over time drop `__name__`)."""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, controllers=2, network_state=True, login=False)
    juju.deploy("opentelemetry-collector", "otelcol")
    juju.integrate("slurmctld:cos-agent", "otelcol:cos-agent")
    juju.deploy("prometheus", "prometheus")
    juju.integrate("otelcol:send-remote-write", "prometheus:receive-remote-write")
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    return juju


def primary_and_backup(juju: jubilant.Juju) -> tuple[str, str]:
    """The controller units, the one in control first: the first to answer `scontrol ping`.

    26.05's ping has no `pinged` (24.11's UP/DOWN): `responding` alone says it.
    """
    pings = json.loads(juju.exec("scontrol ping --json", unit="slurmctld/0").stdout)["pings"]
    primary = next(p["hostname"] for p in pings if p["responding"])
    backup = next(p["hostname"] for p in pings if p["hostname"] != primary)
    status = juju.status()
    return unit_of_host(status, "slurmctld", primary), unit_of_host(status, "slurmctld", backup)


def test_cos_holds_native_series_from_the_primary_only(cluster: jubilant.Juju):
    poll(
        lambda: "openmetrics" in cluster.exec("scontrol show config", unit="slurmctld/0").stdout,
        timeout=300,
        what="MetricsType turned on without the option, once every daemon runs 26.05",
    )
    primary, backup = primary_and_backup(cluster)
    answer = "curl -s -o /dev/null -w '%{http_code}' localhost:6817/metrics/nodes"
    assert cluster.exec(answer, unit=backup).stdout == "303"  # Slurm's, not the charm's.
    assert cluster.exec(answer, unit=primary).stdout == "200"

    poll(
        lambda: value(cluster, f'count(slurm_native_node_cpus{{juju_unit="{primary}"}})'),
        timeout=180,
        what="slurmctld's own node series from the primary in COS's Prometheus",
    )
    # The endpoint came on by itself (`native-metrics=auto`) once the node registered with
    # 26.05: let both collectors scrape a few more times (every 10 s) so the 10 s-aligned
    # window below holds them, then none stored the backup's.
    time.sleep(35)
    units = prometheus(
        cluster, "query", query=f"count by (juju_unit) (last_over_time(({NATIVE})[2m:10s]))"
    )["result"]
    assert [r["metric"]["juju_unit"] for r in units] == [primary]
    backup_up = f'up{{juju_unit="{backup}", job=~".+_slurm_native_nodes"}}'
    assert value(cluster, backup_up) == 0  # Scraped, refused to follow the redirect.
    # Renamed: the native slurm_partition_jobs{partition} never lands among the exporter's
    # slurm_partition_jobs{partition,state}.
    assert value(cluster, "count(slurm_native_partition_jobs)")
    assert value(cluster, 'count(slurm_partition_jobs{state=""})') is None


def test_privatedata_turns_the_endpoint_off_and_withdraws_its_jobs(cluster: jubilant.Juju):
    cluster.config("slurmctld", {"slurm-conf-parameters": "PrivateData=usage\n"})
    cluster.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)

    for unit in cluster.status().apps["slurmctld"].units:
        poll(
            lambda unit=unit: (
                "slurm_native"
                not in cluster.exec("cat /etc/prometheus/prometheus.yml", unit=unit).stdout
            ),
            timeout=120,
            what=f"no native scrape job on {unit}'s collector",
        )
        config = cluster.exec("scontrol show config", unit=unit).stdout
        assert "openmetrics" not in config
        assert "PrivateData" in config and "usage" in config
