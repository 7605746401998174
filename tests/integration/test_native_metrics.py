"""Slurm's own metrics endpoint (Slurm 25.11 and newer) through cos-agent, on the newer Slurm
(Debian forky's 26.05, whatever the run's suite: `LAB_SUITE`).

One lean deployment: two slurmctld units on network state (HA), one slurmd, the COS collector
stand-in on both controllers and the stand-in for COS's Prometheus. Both controllers' collectors
scrape slurmctld on their own machine; a backup redirects (303) to the primary, which the jobs
do not follow, so COS holds the native series of the primary's unit only, renamed
`slurm_native_*` beside the exporter's. The option is left at its default (`auto`): every
daemon runs 26.05, so the leader turns the endpoint on by itself. Across a failover (the
primary's slurmctld killed, then revived) COS holds a native series from both units only in
the one scrape interval after the kill (the dead primary's last samples, until its collector
marks them stale): the backup in control answers the endpoint itself, with the series, and the
killed primary answers nothing. Last, with
PrivateData set (one more config step, no new deploy), the collectors send the token the charm
signed with a key of the endpoint's own, and COS still holds one copy of each native series.
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
from ha_helpers import inject, repair, unit_of_host
from test_observability import prometheus, value

from conftest import on_real_juju

pytestmark = pytest.mark.skipif(on_real_juju(), reason="the COS stand-ins are the lab's")
LAB_SUITE = "forky"
"""Slurm's own endpoint needs 25.11 or newer."""

SETTLE = 15 * 60
SCRAPE_S = 10
"""How often each collector stand-in scrapes (its default `scrape-interval`)."""
SCRAPE_LATE_S = 5
"""How late a scrape may start on a busy lab (Prometheus spreads and delays them)."""
TOKEN_FILE = "/var/snap/opentelemetry-collector/common/slurmctld-metrics.token"
"""Where each controller unit writes its collector's token (`metrics_auth`)."""
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


def primary_and_backup_hosts(juju: jubilant.Juju) -> tuple[str, str]:
    """The controllers' hostnames, the one in control first: the first to answer the ping.

    26.05's ping has no `pinged` (24.11's UP/DOWN): `responding` alone says it.
    """
    answering: list[str] = []

    def one_answers() -> bool:
        pings = json.loads(juju.exec("scontrol ping --json", unit="slurmctld/0").stdout)["pings"]
        ordered = sorted(pings, key=lambda p: not p["responding"])  # Stable: list order kept.
        answering[:] = [p["hostname"] for p in ordered]
        return bool(ordered) and ordered[0]["responding"]

    # A controller re-executed by a reconfigure answers nothing for a moment on a busy lab.
    poll(one_answers, timeout=60, what="a controller answering scontrol ping")
    return answering[0], answering[1]


def primary_and_backup(juju: jubilant.Juju) -> tuple[str, str]:
    """The controller units, the one in control first."""
    status = juju.status()
    hosts = primary_and_backup_hosts(juju)
    return unit_of_host(status, "slurmctld", hosts[0]), unit_of_host(status, "slurmctld", hosts[1])


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
    # The exporter's own series, parsed from 26.05's output (test_observability runs on 24.11
    # only): one controller in charge, the node's state, its partition's CPUs.
    poll(
        lambda: (
            value(cluster, "sum(slurm_controller_primary)") == 1
            and value(cluster, "count(slurm_node_state_info)")
            and value(cluster, "count(slurm_partition_cpus)")
        ),
        timeout=120,
        what="the exporter's series from 26.05's output in COS's Prometheus",
    )


def endpoint_answer(juju: jubilant.Juju, unit: str) -> str:
    """The HTTP status slurmctld's `/metrics/nodes` gives on `unit`'s machine (`000`: none)."""
    curl = "curl -s -o /dev/null -m 5 -w '%{http_code}' localhost:6817/metrics/nodes; true"
    return juju.exec(curl, unit=unit).stdout


def copies(juju: jubilant.Juju, seconds: float, at: float) -> float | None:
    """The most copies of one native series COS held at any 10 s step of `seconds` up to `at`.

    A copy is a unit's: the series without `juju_unit` and `job` (both name the unit).
    """
    per_series = f"max(count without (juju_unit, job) ({NATIVE}))"
    query = f"max_over_time(({per_series})[{int(seconds)}s:10s])"
    result = prometheus(juju, "query", query=query, time=f"{at:.3f}")["result"]
    return float(result[0]["value"][1]) if result else None


def doubled_at(juju: jubilant.Juju, start: float, end: float) -> list[float]:
    """The moments (5 s apart) from `start` to `end` when COS held a native series twice."""
    per_series = f"max(count without (juju_unit, job) ({NATIVE})) > 1"
    answer = prometheus(
        juju, "query_range", query=per_series, start=f"{start:.3f}", end=f"{end:.3f}", step="5s"
    )
    return [float(at) for series in answer["result"] for at, _ in series["values"]]


def test_cos_never_holds_two_copies_of_a_native_series_across_a_failover(cluster: jubilant.Juju):
    """The primary's slurmctld is killed: the backup takes control and answers the endpoint
    itself (200, no redirect) with the native series, and COS holds one from both units only
    within one scrape interval of the kill, the dead primary's last samples not yet stale (a
    local CI failed on one moment with two copies, untimed, when any was an error). The
    primary back in control serves them again, alone.

    Both halves failed before: a backup that stood by when MetricsType came (reloaded, not
    restarted) had no metrics plugin and answered with an empty body once in control, and
    the leader, reading the node's release as unknown right after the failback, turned
    MetricsType off for one reconfigure that timed out, then back on without one (the
    primary served an empty body until the next change). Going back, the backup's last
    scrape and the primary's first may fall within one scrape interval, so only the end
    state is asserted there: the primary's series alone.
    """
    primary, backup = primary_and_backup(cluster)
    primary_host, _ = primary_and_backup_hosts(cluster)
    since = time.time()
    inject(cluster, "kill", primary_host)  # SIGKILL, kept down (a charm's start cannot revive it).
    try:
        poll(
            lambda: endpoint_answer(cluster, backup) == "200",
            timeout=180,
            what=f"{backup} in control, answering /metrics itself",
        )
        took_over = time.time()
        time.sleep(35)  # Three more scrapes by each collector.
        failed_over = time.time()
        # The dead primary's last samples stand until its collector's first failed scrape
        # marks them stale, at most one interval after the kill: only there may the backup's
        # first samples stand beside them (a target switch in any Prometheus). Never after.
        doubled = [round(at - since, 1) for at in doubled_at(cluster, since - 20, failed_over)]
        assert all(0 <= at <= SCRAPE_S + SCRAPE_LATE_S for at in doubled), doubled
        delivered = prometheus(
            cluster,
            "query",
            query=f"count by (juju_unit) (last_over_time(({NATIVE})[30s:10s]))",
        )["result"]
        per_unit = {r["metric"]["juju_unit"]: r["value"][1] for r in delivered}
        print(
            f"failover: {backup} answered {took_over - since:.0f} s after the kill; {per_unit}; "
            f"two copies at {doubled} s"
        )
        assert list(per_unit) == [backup], "the backup in control serves the native series"
    finally:
        repair(cluster, "kill", primary_host)
    poll(
        lambda: (
            endpoint_answer(cluster, primary) == "200"
            and endpoint_answer(cluster, backup) == "303"
        ),
        timeout=180,
        what=f"{primary} in control again, {backup} redirecting",
    )
    time.sleep(25)
    units = prometheus(
        cluster, "query", query=f"count by (juju_unit) (last_over_time(({NATIVE})[15s:5s]))"
    )["result"]
    assert [r["metric"]["juju_unit"] for r in units] == [primary]
    cluster.wait(jubilant.all_active, error=jubilant.any_error, timeout=300)


def test_under_privatedata_cos_gets_one_copy_of_each_native_series_with_a_token(
    cluster: jubilant.Juju,
):
    """PrivateData makes slurmctld answer `/metrics` only to a token: the collectors send the
    one each controller unit signed with the metrics key (a file, named in the job), the
    primary answers 200, the backup still redirects, and COS keeps one copy of each series.
    The token opens nothing but `/metrics`, and no databag, status or log holds it.
    """
    cluster.config("slurmctld", {"slurm-conf-parameters": "PrivateData=usage\n"})
    cluster.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    primary, backup = primary_and_backup(cluster)
    curl = "curl -s -o /dev/null -m 5 -w '%{http_code}' localhost:6817/metrics/nodes"
    with_token = f'{curl} -H "Authorization: Bearer $(cat {TOKEN_FILE})"'
    poll(
        lambda: cluster.exec(with_token, unit=primary).stdout == "200",
        timeout=180,
        what="the primary answering its collector's token",
    )
    assert cluster.exec(curl, unit=primary).stdout == "401"
    assert cluster.exec(with_token, unit=backup).stdout == "303"  # Before any authentication.
    rpc = f"SLURM_JWT=$(cat {TOKEN_FILE}) squeue 2>&1; true"
    assert "authentication error" in cluster.exec(rpc, unit=primary).stdout.lower()

    since = time.time()
    primary_up = f'up{{juju_unit="{primary}", job=~".+_slurm_native_.+"}}'
    poll(
        lambda: value(cluster, f"min({primary_up})") == 1,
        timeout=120,
        what="every native job of the primary's collector scraping with the token",
    )
    # Series a failed scrape would have marked stale: these came with the token.
    fresh = f'count({{__name__=~"slurm_native_.+", juju_unit="{primary}"}})'
    poll(lambda: value(cluster, fresh), timeout=120, what="the primary's native series in COS")
    time.sleep(25)  # Two more scrapes by each collector, with the token.
    now = time.time()
    assert copies(cluster, now - since, now) == 1
    assert value(cluster, f'up{{juju_unit="{backup}", job=~".+_slurm_native_nodes"}}') == 0

    status = repr(cluster.status())  # Every unit's and application's status message.
    log = cluster.debug_log(limit=5000)
    for unit in cluster.status().apps["slurmctld"].units:
        token = cluster.exec(f"cat {TOKEN_FILE}", unit=unit).stdout.strip()
        assert token.count(".") == 2
        jobs = cluster.exec("cat /etc/prometheus/prometheus.yml", unit=unit).stdout
        assert TOKEN_FILE in jobs  # The databag's jobs name the file (the stand-in copies them).
        for text in (jobs, status, log):
            assert token not in text
