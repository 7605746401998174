"""Observability end to end (issue 22): the exporter, cos-agent and the alert rules in a real
Prometheus, as COS has them.

One deployment for the module: two slurmctld units on network state (HA; SlurmdTimeout=30 so a
dead slurmd is marked down within a minute), two slurmd applications (`compute`, `debug`) of
one unit each, a login node, slurmdbd on MySQL, the lab's COS collector stand-in `otelcol`
(slurm_lab.juju.standins.cos) on both controllers over `cos-agent`, and the lab's stand-in
for COS's Prometheus (slurm_lab.juju.standins.prometheus) integrated with the collector over
`send-remote-write`. Each controller's collector scrapes its exporter and remote-writes every
series to that one Prometheus, which evaluates the charm's alert rules over the whole cluster,
so the wire contracts are proven against real consumers and the HA rule (one exporter of each
cluster-wide series) is checked where COS would see a breach.

Test-sized intervals, all options (none changes what is checked): the exporter collects every
5 s (`metrics-interval`, its minimum), the collector stand-in scrapes and COS's stand-in
evaluates every 2 s. The alert rules are the charm's files as COS receives them, `for:`
included (promtool's tests in tests/alerts/ cover what `for:` does). An alert is therefore
awaited in COS's `pending` state or later, with its labels and annotations, and the rule it
comes from is checked to be loaded with the file's `for:`; no `for:` is waited out.

- jobs queued in `debug` show in `slurm_partition_jobs{state="pending"}`;
- the dashboards' core panels return data;
- slurmdbd integrated once the rest has settled, so accounting comes to running controllers
  that each hold the cluster id they invented without a database (the worst moment for it);
- the primary's slurmctld killed: `slurm_controller_primary` moves to the backup, the
  cluster-wide series come from the backup's exporter (and back), no cluster-wide series is
  ever exported by both controllers at once, and SlurmNoPrimaryController never fires: it was
  never active (pending) for as long as its `for:`; the primary starts again (a backup that
  kept the invented cluster id would have written it at its takeover, and the primary would
  die of CLUSTER ID MISMATCH);
- slurmdbd frozen (SIGSTOP: the charm cannot see it, so it does not restart it) and a
  compute node's slurmd killed, together, as soon as both controllers are up again after the
  failover (so the agent queue's 2-minute window runs while the failover test ends; a
  slurmctld that starts or takes over while slurmdbd is frozen would wait for it):
  SlurmNodeDown is active with the node and Slurm's reason, and SlurmdbdAgentQueueGrowing is
  active.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jubilant
import pytest
import yaml
from deploy_helpers import deploy_accounting, deploy_slurm
from dynamic_nodes_helpers import all_nodes_idle, is_idle, node_states, poll, sh
from ha_helpers import failover_seconds, ping_hosts, recover, unit_of_host

from conftest import on_real_juju

RELEASES = ("trixie",)
"""24.11 only (CI time): on 26.05 `test_native_metrics` checks the exporter's series beside
Slurm's own, and one copy of each across a failover."""

pytestmark = pytest.mark.skipif(on_real_juju(), reason="the COS stand-ins are the lab's")

SETTLE = 15 * 60
CONTROLLER = "slurmctld/0"
CONTROLLERS = 2
METRICS_INTERVAL = 5
"""The exporter's pass interval (`metrics-interval`; 30 s by default)."""
COS_INTERVAL = "2s"
"""The stand-ins' scrape and rule evaluation interval (10 s by default)."""
RULE_FILE = Path(__file__).parents[2] / "charms/slurmctld/src/prometheus_alert_rules/slurm.rules"
ACTIVE = ("pending", "firing")
OWN_SERIES = "slurm_exporter_.+"
"""Series every exporter has of its own (its health), told apart by `instance`."""
TOPOLOGY = ("instance", "job", "juju_unit")
"""Labels the collector adds per unit: two units' copies of a series differ only by them."""


def prometheus(juju: jubilant.Juju, path: str, **params: str) -> Any:
    """GET COS's Prometheus (the stand-in's) API from a controller unit; return its `data`."""
    address = juju.status().apps["prometheus"].units["prometheus/0"].public_address
    curl = f"curl -sf {shlex.quote(f'http://{address}:9090/api/v1/{path}')}"
    for name, text in params.items():
        curl += f" --data-urlencode {shlex.quote(f'{name}={text}')}"
    answer = json.loads(juju.exec(curl, unit=CONTROLLER).stdout)
    assert answer["status"] == "success", answer
    return answer["data"]


def value(juju: jubilant.Juju, query: str) -> float | None:
    """The single value of an instant query, or None while it has none."""
    result = prometheus(juju, "query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


def active(juju: jubilant.Juju, alertname: str) -> list[dict[str, Any]]:
    """The alerts of `alertname` active now: pending (waiting out `for:`) or firing."""
    return [
        a
        for a in prometheus(juju, "alerts")["alerts"]
        if a["labels"]["alertname"] == alertname and a["state"] in ACTIVE
    ]


def seconds(duration: str) -> float:
    """A Prometheus duration of one unit (`90s`, `2m`, `1h`) in seconds."""
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, duration
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def rule_in_file(alertname: str) -> dict[str, Any]:
    """The alerting rule `alertname` of the charm's rule file."""
    groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alertname)


def assert_loaded_as_in_the_file(juju: jubilant.Juju, alertname: str) -> float:
    """Check that COS's Prometheus evaluates the file's rule: same `for:`, labels and
    annotations (the expression is compared by promtool's tests); return its `for:` (s)."""
    loaded = [
        r
        for g in prometheus(juju, "rules")["groups"]
        for r in g["rules"]
        if r["name"] == alertname
    ]
    want = rule_in_file(alertname)
    for_seconds = seconds(want["for"]) if "for" in want else 0.0
    assert len(loaded) == 1, loaded
    assert loaded[0]["duration"] == for_seconds, (loaded[0], want)
    # The cos_agent library adds the Juju topology to each rule's labels (as the real one).
    assert want["labels"].items() <= loaded[0]["labels"].items(), (loaded[0], want)
    assert loaded[0]["annotations"] == want["annotations"]
    return for_seconds


def since(started: float) -> str:
    """Seconds since `started` (monotonic), for the phase times printed."""
    return f"{time.monotonic() - started:.0f} s"


RUNNING_APPS = ("slurmctld", "compute", "debug", "login", "mysql")
"""What is active before slurmdbd is integrated (slurmdbd waits for slurmctld, blocked)."""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    started = time.monotonic()
    deploy_slurm(
        juju,
        charm_path,
        controllers=CONTROLLERS,
        network_state=True,
        computes=(("compute", 1), ("debug", 1)),
    )
    deploy_accounting(juju, charm_path, with_slurmctld=False)
    juju.wait(
        lambda status: (
            jubilant.all_active(status, *RUNNING_APPS) and jubilant.all_agents_idle(status)
        ),
        error=jubilant.any_error,
        timeout=SETTLE,
    )
    # Accounting comes to the running controllers, each holding the cluster id it invented
    # without a database: the primary's death and restart below (`test_the_primarys_death...`)
    # then prove that no controller kept the invented id (Slurm's CLUSTER ID MISMATCH).
    juju.integrate("slurmctld:slurmdbd", "slurmdbd:slurmctld")
    juju.config(
        "slurmctld",
        {"slurm-conf-parameters": "SlurmdTimeout=30\n", "metrics-interval": METRICS_INTERVAL},
    )
    juju.deploy("opentelemetry-collector", "otelcol", config={"scrape-interval": COS_INTERVAL})
    juju.integrate("slurmctld:cos-agent", "otelcol:cos-agent")
    juju.deploy("prometheus", "prometheus", config={"evaluation-interval": COS_INTERVAL})
    juju.integrate("otelcol:send-remote-write", "prometheus:receive-remote-write")
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(
        lambda: all_nodes_idle(juju, ["compute-0", "debug-0"]),
        timeout=120,
        what="compute-0 and debug-0 idle",
    )
    print(f"\ndeployed in {since(started)}")
    return juju


@pytest.fixture(scope="module")
def faults(cluster: jubilant.Juju) -> Iterator[Callable[[], float]]:
    """Inject the alerts' faults once (slurmdbd frozen, compute-0's slurmd killed); return
    when (monotonic). slurmdbd is thawed when the module ends, whatever happened."""
    injected: list[float] = []

    def inject() -> float:
        if not injected:
            # SIGSTOP: slurmdbd takes no message, and systemd (so the charm) sees it running.
            freeze = 'kill -STOP "$(systemctl show -P MainPID slurmdbd.service)"'
            cluster.exec(freeze, unit="slurmdbd/0")
            injected.append(time.monotonic())
            for _ in range(3):  # Accounting records for the queue (submissions, starts, ends).
                sh(cluster, "sbatch -p debug --wrap 'sleep 1'")
            # By this machine's process id: a unit's cgroup is shared by every lab machine of
            # a cgroup v1 host, so `systemctl kill` would take the other slurmd with it.
            # Masked first: the charm's next hook would start it again, and its registration
            # would end the node's DOWN (ReturnToService=1) before the alert could fire.
            kill = (
                "systemctl mask --runtime slurmd.service && "
                'kill -KILL "$(systemctl show -P MainPID slurmd.service)"'
            )
            cluster.exec(kill, unit="compute/0")
        return injected[0]

    yield inject
    if injected:
        thaw(cluster)


def thaw(juju: jubilant.Juju) -> None:
    """Let the frozen slurmdbd run again (a no-op on a running one)."""
    juju.exec('kill -CONT "$(systemctl show -P MainPID slurmdbd.service)"', unit="slurmdbd/0")


def test_cos_prometheus_has_every_controllers_series_and_the_rules(cluster: jubilant.Juju):
    hosts = ping_hosts(cluster)
    roles = poll(
        lambda: (
            result
            if len(
                result := prometheus(cluster, "query", query="slurm_controller_primary")["result"]
            )
            == CONTROLLERS
            else None
        ),
        timeout=180,
        what="both controllers' role in COS's Prometheus",
    )
    assert {r["metric"]["host"]: r["value"][1] for r in roles} == {hosts[0]: "1", hosts[1]: "0"}
    assert {r["metric"]["juju_application"] for r in roles} == {"slurmctld"}
    rules = {r["name"] for g in prometheus(cluster, "rules")["groups"] for r in g["rules"]}
    assert {"SlurmNodeDown", "SlurmNoPrimaryController", "SlurmdbdAgentQueueGrowing"} <= rules


def test_queued_jobs_show_as_pending(cluster: jubilant.Juju):
    for _ in range(3):
        sh(cluster, "sbatch --hold -p debug --wrap 'sleep 1'")

    pending = poll(
        lambda: (
            value(cluster, 'sum(slurm_partition_jobs{partition="debug",state="pending"})') == 3
        ),
        timeout=120,
        what="3 pending jobs of debug in Prometheus",
    )

    assert pending
    assert value(cluster, "sum(slurm_controller_primary)") == 1


CORE_PANELS = {
    "slurm-cluster.json": ["Nodes by state", "Jobs by state"],
    "slurm-partitions.json": ["Pending jobs", "CPUs by state", "Usable nodes"],
    "slurm-nodes.json": ["Nodes by state"],
    "slurm-scheduler.json": ["Main scheduling cycle", "Queues"],
    "slurm-controllers.json": ["In control (1) per controller", "Exporter pass duration"],
}
"""Panels that have data on any running cluster (not those of failures, GPUs or RPC rates)."""
DASHBOARDS = Path(__file__).parents[2] / "charms/slurmctld/src/grafana_dashboards"
GRAFANA_VALUES = {"__rate_interval": "1m", "__range": "10m"}


def test_core_dashboard_panels_return_data(cluster: jubilant.Juju):
    """Every core panel's queries, with Grafana's variables at "All", answer from Prometheus."""
    empty = []
    for name, titles in CORE_PANELS.items():
        dashboard = json.loads((DASHBOARDS / name).read_text())
        panels = {p["title"]: p for p in dashboard["panels"]}
        for title in titles:
            for target in panels[title]["targets"]:
                expr = re.sub(
                    r"\$\{?(\w+)\}?",
                    lambda m: GRAFANA_VALUES.get(m.group(1), ".*"),
                    target["expr"],
                )
                if not prometheus(cluster, "query", query=expr)["result"]:
                    empty.append(f"{name} / {title}: {expr}")
    assert not empty


def duplicated_cluster_series(juju: jubilant.Juju, minutes: int) -> list[dict[str, Any]]:
    """Series that more than one unit exported at any moment of the last `minutes` (at each
    scrape interval).

    A cluster-wide series two exporters serve differs only by the collector's per-unit labels.
    """
    series = f'{{__name__=~"slurm_.+", __name__!~"{OWN_SERIES}"}}'
    named = f'label_replace({series}, "name", "$1", "__name__", "(.+)")'  # count drops __name__
    copies = f"count without ({', '.join(TOPOLOGY)}) ({named})"
    window = f"[{minutes}m:{COS_INTERVAL}]"
    return prometheus(juju, "query", query=f"max_over_time(({copies}){window}) > 1")["result"]


def test_the_primarys_death_moves_the_role_without_a_duplicate_or_an_alert(
    cluster: jubilant.Juju, faults: Callable[[], float]
):
    hosts = ping_hosts(cluster)
    primary, backup = hosts[0], hosts[1]
    status = cluster.status()
    primary_unit = unit_of_host(status, "slurmctld", primary)
    backup_unit = unit_of_host(status, "slurmctld", backup)
    started = time.monotonic()
    failover_seconds(cluster, "kill", primary, backup)  # The lab's SIGKILL, kept down.
    poll(
        lambda: value(cluster, f'slurm_controller_primary{{host="{backup}"}}') == 1,
        timeout=180,
        what=f"slurm_controller_primary of {backup} at 1",
    )
    moved = poll(
        lambda: value(cluster, f'count(slurm_nodes{{juju_unit="{backup_unit}"}})') or None,
        timeout=180,
        what=f"the cluster-wide series from {backup_unit}",
    )
    print(
        f"\ncluster-wide series from the backup {time.monotonic() - started:.0f} s after the kill"
    )
    assert moved
    assert value(cluster, f'count(slurm_nodes{{juju_unit="{primary_unit}"}})') is None
    assert value(cluster, f'slurm_controller_primary{{host="{primary}"}}') == 0

    recover(cluster, "kill", primary, hosts)
    print(f"both controllers up again {since(started)} after the kill")
    faults()  # The next test's: both slurmctld are up, connected to slurmdbd.
    poll(
        lambda: value(cluster, f'count(slurm_nodes{{juju_unit="{primary_unit}"}})') or None,
        timeout=180,
        what=f"the cluster-wide series back from {primary_unit}",
    )
    print(f"cluster-wide series back from the primary {since(started)} after the kill")
    minutes = int((time.monotonic() - started) / 60) + 2
    assert duplicated_cluster_series(cluster, minutes) == []
    for_seconds = assert_loaded_as_in_the_file(cluster, "SlurmNoPrimaryController")
    no_primary = 'ALERTS{alertname="SlurmNoPrimaryController", alertstate="firing"}'
    assert (
        prometheus(cluster, "query", query=f"max_over_time({no_primary}[{minutes}m])")["result"]
        == []
    )
    # How long it was active at most (ALERTS_FOR_STATE holds since when, while it is).
    active_for = 'time() - ALERTS_FOR_STATE{alertname="SlurmNoPrimaryController"}'
    longest = prometheus(
        cluster, "query", query=f"max_over_time(({active_for})[{minutes}m:{COS_INTERVAL}])"
    )["result"]
    print(f"SlurmNoPrimaryController active at most {longest} (for: {for_seconds:.0f} s)")
    assert all(float(r["value"][1]) < for_seconds for r in longest), longest


def test_slurmdbd_frozen_and_a_slurmd_killed_fire_their_alerts(
    cluster: jubilant.Juju, faults: Callable[[], float]
):
    injected = faults()  # Already, at the end of the failover test (unless it failed early).

    def node_down() -> list[dict[str, Any]] | None:
        return [a for a in active(cluster, "SlurmNodeDown") if a["labels"].get("reason")] or None

    try:
        alerts = poll(node_down, timeout=5 * 60, interval=2, what="SlurmNodeDown with a reason")
        print(f"\nSlurmNodeDown {alerts[0]['state']} {since(injected)} after the faults")
        nodes = sh(cluster, "sinfo --Node --long --noheader; sinfo --list-reasons --long")
        assert {a["labels"]["node"] for a in alerts} == {"compute-0"}, (alerts, nodes)
        assert "compute-0 is down" in alerts[0]["annotations"]["summary"]
        assert_loaded_as_in_the_file(cluster, "SlurmNodeDown")

        queue = poll(
            lambda: active(cluster, "SlurmdbdAgentQueueGrowing") or None,
            timeout=6 * 60,
            interval=2,
            what="SlurmdbdAgentQueueGrowing active",
        )
        print(f"SlurmdbdAgentQueueGrowing {queue[0]['state']} {since(injected)} after the faults")
        assert float(queue[0]["value"]) > 0
        assert_loaded_as_in_the_file(cluster, "SlurmdbdAgentQueueGrowing")
    finally:
        thaw(cluster)


def compute_0(juju: jubilant.Juju) -> dict[str, Any]:
    """compute-0's record, read over ssh: no hook of the controller's unit delays it."""
    out = juju.ssh("slurmctld/0", "scontrol show node compute-0 --json")
    return json.loads(out)["nodes"][0]


def test_the_killed_slurmd_back_returns_its_node_to_service(
    cluster: jubilant.Juju, faults: Callable[[], float]
):
    """A node slurmctld set DOWN "Not responding" is back at its slurmd's next registration.

    Issue 37: Slurm's default ReturnToService=0 kept it DOWN, with its slurmd running and
    registered ("now responding" in slurmctld's log), until an operator resumed it; the
    slurmctld charm now renders ReturnToService=1. With that line reverted this test fails.
    """
    faults()

    def down_not_responding() -> dict[str, Any] | None:
        record = compute_0(cluster)
        down = "DOWN" in node_states(record) and record.get("reason") == "Not responding"
        return record if down else None

    poll(down_not_responding, timeout=5 * 60, interval=2, what="compute-0 DOWN, Not responding")
    start = "systemctl unmask --runtime slurmd.service && systemctl start slurmd.service"
    cluster.exec(start, unit="compute/0")
    started = time.monotonic()
    try:
        poll(
            lambda: is_idle(compute_0(cluster)),
            timeout=60,
            interval=1,
            what="compute-0 idle again, no resume",
        )
        print(f"\ncompute-0 back in service {since(started)} after slurmd started")
    finally:
        if not is_idle(compute_0(cluster)):  # Leave the module's cluster usable.
            sh(cluster, "scontrol update nodename=compute-0 state=resume")
