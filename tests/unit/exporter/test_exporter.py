"""The Slurm exporter, from command output recorded on a Slurm 24.11 lab machine.

The vectors in vectors/slurm-24.11 were recorded on one lab machine (`obs-0`, slurmctld and
slurmd) with two partitions (`debug`: obs-0, ghost-[1-2]; `gpu`: ghost-[1-2]), ghost-1
drained ("bad dimm on slot 3"), ghost-2 down ("maintenance"), one running and three pending
jobs in `debug` and one pending in `gpu`, with the exporter's exact command lines
(then `sinfo` and `squeue` with one format each, `SLURM_TIME_FORMAT=%s`) at Unix time
1795618875. The sinfo and squeue lines are those recordings split into the current formats
(`exporter.SINFO` and `SINFO_REASONS`, `exporter.SQUEUE` and `SQUEUE_ACCOUNTS`), the jobs
numbered 1-5 in the recorded order.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm.scontrol import parse_pings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from slurm_exporter import exporter, metrics

VECTORS = Path(__file__).parents[1] / "hpc_libs" / "vectors"
RECORDED_AT = 1795618875.0
HOST = "obs-0"
BACKUP_PING = """{"pings": [
  {"hostname": "obs-0", "pinged": "UP", "responding": true, "mode": "primary", "primary": true},
  {"hostname": "obs-1", "pinged": "UP", "responding": true, "mode": "backup", "primary": false}
]}"""


def _recorded(name: str) -> str:
    return (VECTORS / "slurm-24.11" / name).read_text()


COMMANDS = {
    tuple(exporter.SINFO): "sinfo",
    tuple(exporter.SINFO_REASONS): "sinfo_reasons",
    tuple(exporter.SQUEUE): "squeue",
    tuple(exporter.SQUEUE_ACCOUNTS): "squeue_accounts",
}
"""The source name of each command the exporter may run (else its program's name)."""


class FakeSlurm:
    """Answer the exporter's commands with recorded output; record what it ran."""

    def __init__(self, **overrides: str | Exception) -> None:
        self.outputs: dict[str, str | Exception] = {
            "scontrol": _recorded("ping.json").replace("pingctl", HOST),
            "sdiag": _recorded("sdiag.json"),
            "sinfo": _recorded("sinfo-nodes.out"),
            "sinfo_reasons": _recorded("sinfo-reasons.out"),
            "squeue": _recorded("squeue-jobs.out"),
            "squeue_accounts": _recorded("squeue-accounts.out"),
            **overrides,
        }
        self.ran: list[list[str]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str:
        assert env == {"SLURM_TIME_FORMAT": "%s"}
        self.ran.append(list(argv))
        answer = self.outputs[COMMANDS.get(tuple(argv), argv[0])]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _scrape(
    collector: exporter.SlurmCollector,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scrape `collector` as Prometheus would and parse the text back into samples."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return samples


def _collector(
    slurm: FakeSlurm, hostname: str = HOST, **kwargs: object
) -> exporter.SlurmCollector:
    kwargs = {"sack_socket": Path(__file__), **kwargs}  # A path that exists.
    collector = exporter.SlurmCollector(
        hostname,
        run=slurm,
        clock=lambda: RECORDED_AT,
        fence_flag=Path("/nonexistent/fenced"),
        **kwargs,  # pyright: ignore[reportArgumentType]
    )
    collector.collect_once()
    return collector


def _series(
    samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str
) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def test_nodes_count_base_states_and_drain_as_a_flag() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    nodes = _series(samples, "slurm_nodes")
    assert nodes == {
        (("partition", "debug"), ("state", "allocated")): 1,
        (("partition", "debug"), ("state", "idle")): 1,
        (("partition", "debug"), ("state", "down")): 1,
        (("partition", "gpu"), ("state", "idle")): 1,
        (("partition", "gpu"), ("state", "down")): 1,
    }
    assert _series(samples, "slurm_nodes_flagged") == {
        (("flag", "drain"), ("partition", "debug")): 1,
        (("flag", "drain"), ("partition", "gpu")): 1,
    }


def test_node_reasons_and_their_time() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    assert _series(samples, "slurm_node_reason_info") == {
        (("node", "ghost-1"), ("reason", "bad dimm on slot 3")): 1,
        (("node", "ghost-2"), ("reason", "maintenance")): 1,
    }
    assert _series(samples, "slurm_node_reason_since_timestamp_seconds") == {
        (("node", "ghost-1"),): 1795618809,
        (("node", "ghost-2"),): 1795618819,
    }


def test_partition_jobs_pending_reasons_and_oldest_age() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    assert _series(samples, "slurm_partition_jobs") == {
        (("partition", "debug"), ("state", "pending")): 3,
        (("partition", "debug"), ("state", "running")): 1,
        (("partition", "gpu"), ("state", "pending")): 1,
    }
    reasons = _series(samples, "slurm_partition_jobs_pending_reason")
    assert reasons[(("partition", "debug"), ("reason", "Resources"))] == 1
    assert reasons[(("partition", "debug"), ("reason", "JobHeldUser"))] == 1
    assert sum(reasons.values()) == 4
    assert _series(samples, "slurm_partition_oldest_pending_job_age_seconds") == {
        (("partition", "debug"),): RECORDED_AT - 1795618821,
        (("partition", "gpu"),): RECORDED_AT - 1795618821,
    }


def test_partition_cpus_and_gpus() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    cpus = _series(samples, "slurm_partition_cpus")
    assert cpus[(("partition", "debug"), ("state", "allocated"))] == 2
    assert cpus[(("partition", "debug"), ("state", "other"))] == 8
    assert cpus[(("partition", "debug"), ("state", "total"))] == 10
    assert cpus[(("partition", "gpu"), ("state", "total"))] == 8
    assert (
        _series(samples, "slurm_partition_gpus")[(("partition", "gpu"), ("state", "total"))] == 0
    )


def test_scheduler_statistics_in_seconds() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    assert samples[("slurm_scheduler_cycle_last_seconds", ())] == pytest.approx(1840e-6)
    assert samples[("slurm_scheduler_cycle_mean_seconds", ())] == pytest.approx(956e-6)
    assert samples[("slurm_scheduler_dbd_agent_queue_size", ())] == 0
    assert ("slurm_backfill_last_cycle_timestamp_seconds", ()) in samples
    rpcs = _series(samples, "slurm_rpc_requests_total")
    assert rpcs[(("type", "MESSAGE_NODE_REGISTRATION_STATUS"),)] == 3
    assert samples[("slurm_exporter_last_success_timestamp_seconds", ())] == RECORDED_AT


def test_the_controller_in_control_exports_the_cluster_and_a_backup_only_itself() -> None:
    """HA: two exporters, one cluster; together they never export the same series twice."""
    primary = _scrape(_collector(FakeSlurm(scontrol=BACKUP_PING), "obs-0"))
    backup_slurm = FakeSlurm(scontrol=BACKUP_PING)
    backup = _scrape(_collector(backup_slurm, "obs-1"))

    assert [argv[0] for argv in backup_slurm.ran] == ["scontrol"]  # No cluster-wide command.
    assert _series(primary, "slurm_controller_primary") == {(("host", "obs-0"),): 1}
    assert _series(backup, "slurm_controller_primary") == {(("host", "obs-1"),): 0}
    assert _series(primary, "slurm_controller_up") == {
        (("host", "obs-0"),): 1,
        (("host", "obs-1"),): 1,
    }
    assert not _series(backup, "slurm_controller_up")
    assert not _series(backup, "slurm_nodes")
    own = {"slurm_exporter_last_success_timestamp_seconds", "slurm_exporter_skipped_lines"}
    own |= {n for n, _ in backup if n.startswith("slurm_exporter_collect_")}
    shared = {key for key in primary.keys() & backup.keys() if key[0] not in own}
    assert not shared, f"series both controllers export: {shared}"


def test_a_backup_that_took_over_exports_the_cluster() -> None:
    """The primary is down: the backup, now in control, exports the cluster and its role."""
    ping = BACKUP_PING.replace(
        '"UP", "responding": true, "mode": "primary"',
        '"DOWN", "responding": false, "mode": "primary"',
    )
    samples = _scrape(_collector(FakeSlurm(scontrol=ping), "obs-1"))
    assert _series(samples, "slurm_controller_primary") == {(("host", "obs-1"),): 1}
    assert _series(samples, "slurm_controller_up")[(("host", "obs-0"),)] == 0
    assert _series(samples, "slurm_nodes")


def test_fenced_comes_from_the_watchdog_flag(tmp_path: Path) -> None:
    flag = tmp_path / "fenced"
    flag.write_text("2026-11-25T15:00:00Z cannot write /var/lib/slurm/checkpoint for 6 s\n")
    collector = exporter.SlurmCollector(
        HOST, run=FakeSlurm(), clock=lambda: RECORDED_AT, fence_flag=flag
    )
    collector.collect_once()
    assert _series(_scrape(collector), "slurm_fenced") == {(("host", HOST),): 1}
    flag.unlink()
    collector.collect_once()
    assert _series(_scrape(collector), "slurm_fenced") == {(("host", HOST),): 0}


def test_a_failing_source_is_counted_and_the_last_success_kept() -> None:
    slurm = FakeSlurm()
    collector = _collector(slurm)
    slurm.outputs["squeue"] = SlurmOpsError("squeue timed out", command=["squeue"])
    collector.clock = lambda: RECORDED_AT + 30
    assert collector.collect_once() is False
    samples = _scrape(collector)
    assert samples[("slurm_exporter_last_success_timestamp_seconds", ())] == RECORDED_AT
    assert _series(samples, "slurm_exporter_collect_errors_total") == {(("source", "squeue"),): 1}
    assert not _series(samples, "slurm_partition_jobs")
    assert _series(samples, "slurm_nodes")


def test_a_node_drained_by_the_health_check_has_its_failed_check() -> None:
    nodes = (
        "bad|debug|idle+drain|0/4/0/4|(null)|(null)|\n"
        "operator|debug|idle+drain|0/4/0/4|(null)|(null)|\n"
        "resumed|debug|idle|0/4/0/4|(null)|(null)|\n"
        "odd|debug|idle+drain|0/4/0/4|(null)|(null)|\n"
    )
    reasons = (
        "bad|debug|1795618809|health: mounts: /home not mounted\n"
        "operator|debug|1795618809|maintenance, health: mounts: later\n"
        "resumed|debug|1795618809|health: cpus: 2 CPUs online, registered 4\n"
        "odd|debug|1795618809|health: Mounts} 1: x\n"
    )
    samples = _scrape(_collector(FakeSlurm(sinfo=nodes, sinfo_reasons=reasons)))

    assert _series(samples, "slurm_node_health") == {(("check", "mounts"), ("node", "bad")): 0}


def test_hostile_slurm_output_cannot_add_a_series() -> None:
    """A reason is free text set by any operator: it stays one label value, escaped."""
    nodes = (
        "evil|debug|idle+drain|0/4/0/4|(null)|(null)|\n"
        "fine|debug|idle+drain|0/4/0/4|(null)|(null)|\n"
    )
    reasons = (
        'evil|debug|1795618809|x"} 1 slurm_controller_primary{host="evil"} 1\n'
        "bad name|debug|Unknown|none\n"
        "spacer|debug|Unknown|none\n"
        'fine|debug|1|quote " back\\slash\n'
    )
    collector = _collector(FakeSlurm(sinfo=nodes, sinfo_reasons=reasons))
    samples = _scrape(collector)
    assert _series(samples, "slurm_node_reason_info") == {
        (("node", "fine"), ("reason", 'quote " back\\slash')): 1,
    }
    assert _series(samples, "slurm_controller_primary") == {(("host", HOST),): 1}
    assert samples[("slurm_exporter_skipped_lines", ())] == 3  # "bad name" and its neighbours.


def test_a_newline_in_an_account_cannot_forge_a_pending_job() -> None:
    """With AccountingStorageEnforce unset an account is any text: a newline in it must not
    make a pending job of its own (which would fire SlurmPendingJobTooOld), nor steal the
    account of a real job, nor hide the user's real job."""
    forged = "physics\n9|debug|PENDING|1|mallory|64|Priority"
    jobs = "7|debug|RUNNING|1795618800|mallory|1|None\n8|debug|PENDING|1795618870|bob|2|Priority\n"
    accounts = f"7|{forged}\n8|chem\n8|evil\n"
    samples = _scrape(_collector(FakeSlurm(squeue=jobs, squeue_accounts=accounts), per_user=True))
    assert _series(samples, "slurm_partition_jobs") == {
        (("partition", "debug"), ("state", "running")): 1,
        (("partition", "debug"), ("state", "pending")): 1,
    }
    assert _series(samples, "slurm_partition_oldest_pending_job_age_seconds") == {
        (("partition", "debug"),): RECORDED_AT - 1795618870
    }
    assert _series(samples, "slurm_user_jobs") == {
        (("state", "running"), ("user", "mallory")): 1,
        (("state", "pending"), ("user", "bob")): 1,
    }
    assert not _series(samples, "slurm_account_jobs")  # Both accounts' lines were suspect.


def test_the_job_listing_holds_no_free_text() -> None:
    """Only the accounts' listing prints an account, last, keyed by the job id."""
    assert "%a" not in metrics.SQUEUE_FORMAT
    assert metrics.SQUEUE_ACCOUNT_FORMAT.endswith("%a")
    assert "Reason" not in metrics.SINFO_FORMAT
    assert metrics.SINFO_REASON_FORMAT.endswith("Reason:0")


def test_a_newline_in_a_node_reason_cannot_forge_a_node() -> None:
    """The forged line reads as a reason line, of a node sinfo's listing does not hold."""
    reasons = "ghost-1|debug*|1795618809|bad dimm\nghost-9|debug|1|Unknown|none\n"
    samples = _scrape(_collector(FakeSlurm(sinfo_reasons=reasons)))
    nodes = {dict(labels)["node"] for labels in _series(samples, "slurm_node_state_info")}
    assert nodes == {"ghost-1", "ghost-2", "obs-0"}
    assert _series(samples, "slurm_node_reason_info") == {
        (("node", "ghost-1"), ("reason", "bad dimm")): 1
    }


@pytest.mark.parametrize("number", ["1" * 400, "1" * 5000, "\u0661", "\u00b2", "-1", "1e9"])
def test_a_number_slurm_cannot_print_skips_the_line(number: str) -> None:
    with pytest.raises(ValueError, match="not a count"):
        metrics.parse_squeue_line(f"1|debug|PENDING|1|bob|{number}|Priority")


def test_per_user_series_only_when_asked() -> None:
    assert not _series(_scrape(_collector(FakeSlurm())), "slurm_user_jobs")
    samples = _scrape(_collector(FakeSlurm(), per_user=True))
    assert _series(samples, "slurm_user_jobs") == {
        (("state", "pending"), ("user", "nobody")): 2,
        (("state", "running"), ("user", "nobody")): 1,
        (("state", "pending"), ("user", "root")): 2,
    }
    assert _series(samples, "slurm_user_rpc_requests_total")[(("user", "nobody"),)] == 3


@pytest.mark.parametrize(
    ("complete", "state", "flags"),
    [
        ("idle+drain", "idle", ["drain"]),
        ("mixed+drain+reboot_requested", "mixed", ["drain", "reboot_requested"]),
        ("down*", "down", ["not_responding"]),
        ("idle~", "idle", ["powered_down"]),
        ("allocated", "allocated", []),
    ],
)
def test_a_complete_state_splits_into_base_state_and_flags(
    complete: str, state: str, flags: list[str]
) -> None:
    assert metrics.split_state(complete) == (state, flags)


def test_gpus_from_gres_strings() -> None:
    line = metrics.parse_sinfo_line(
        "gpu-0|gpu|mixed|4/4/0/8|gpu:a100:4(S:0-1),shard:8|gpu:a100:1(IDX:0),shard:0|"
    )
    assert (line.gpus_total, line.gpus_allocated) == (4, 1)


def test_a_job_in_several_partitions_counts_in_each() -> None:
    job = metrics.parse_squeue_line("12_3|debug,gpu|PENDING|100|alice|4|Priority")
    assert job.partitions == ["debug", "gpu"]
    assert (job.job_id, job.state, job.cpus) == ("12_3", "pending", 4)


def test_slurm_26_05_ping_reads_without_pinged() -> None:
    output = (VECTORS / "slurm-26.05" / "ping.json").read_text()
    pings = metrics.controller_pings(parse_pings(output))
    assert pings == [metrics.Ping(host="juju-b7c1c6-0", up=True)]


def test_each_nodes_state_and_the_usable_nodes_of_a_partition() -> None:
    """The node-down alert needs the node; the no-usable-node alert needs a drained idle node
    to count as unusable though its base state is idle."""
    samples = _scrape(_collector(FakeSlurm()))
    assert _series(samples, "slurm_node_state_info") == {
        (("node", "ghost-1"), ("state", "idle")): 1,
        (("node", "ghost-2"), ("state", "down")): 1,
        (("node", "obs-0"), ("state", "allocated")): 1,
    }
    assert _series(samples, "slurm_node_flag_info") == {
        (("flag", "drain"), ("node", "ghost-1")): 1
    }
    assert _series(samples, "slurm_partition_nodes_usable") == {
        (("partition", "debug"),): 1,
        (("partition", "gpu"),): 0,
    }


def test_held_jobs_do_not_age_the_queue() -> None:
    held = "1|debug|PENDING|100|root|1|JobHeldUser\n2|debug|PENDING|1795618800|root|1|Priority\n"
    samples = _scrape(_collector(FakeSlurm(squeue=held)))
    assert _series(samples, "slurm_partition_oldest_pending_job_age_seconds") == {
        (("partition", "debug"),): RECORDED_AT - 1795618800
    }


PRIMARY_DOWN_PING = BACKUP_PING.replace(
    '"UP", "responding": true, "mode": "primary"',
    '"DOWN", "responding": false, "mode": "primary"',
)


def test_a_new_primary_exports_the_cluster_only_after_the_old_one_dropped_it() -> None:
    """Failover: the backup's exporter waits one interval plus a grace before it exports the
    cluster, by when the old primary's exporter has run a pass and dropped it: no scrape of
    the two ever holds the same cluster-wide series."""
    now = [RECORDED_AT]
    old_slurm, new_slurm = FakeSlurm(scontrol=BACKUP_PING), FakeSlurm(scontrol=BACKUP_PING)
    old, new = (
        exporter.SlurmCollector(
            host,
            run=slurm,
            clock=lambda: now[0],
            fence_flag=Path("/nonexistent/fenced"),
            sack_socket=Path(__file__),
            handover=40,
        )
        for host, slurm in (("obs-0", old_slurm), ("obs-1", new_slurm))
    )
    old.collect_once()
    new.collect_once()
    assert _series(_scrape(old), "slurm_nodes")
    assert not _series(_scrape(new), "slurm_nodes")

    # obs-0's slurmctld dies; obs-1 takes control. obs-1's next pass comes first.
    old_slurm.outputs["scontrol"] = new_slurm.outputs["scontrol"] = PRIMARY_DOWN_PING
    now[0] += 30
    new.collect_once()
    assert _series(_scrape(new), "slurm_controller_primary") == {(("host", "obs-1"),): 1}
    assert not _series(_scrape(new), "slurm_nodes"), "exported while obs-0 may still serve it"
    assert not _series(_scrape(new), "slurm_controller_up")
    now[0] += 5
    old.collect_once()
    assert not _series(_scrape(old), "slurm_nodes")
    assert _series(_scrape(old), "slurm_controller_primary") == {(("host", "obs-0"),): 0}

    now[0] += 35  # One interval and the grace after obs-1 first saw itself in control.
    new.collect_once()
    assert _series(_scrape(new), "slurm_nodes")
    assert _series(_scrape(new), "slurm_controller_up")[(("host", "obs-0"),)] == 0


class LosingControl(FakeSlurm):
    """The controller answers the pass's first ping, then dies while its commands run."""

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str:
        answer = super().__call__(argv, env, timeout)
        if argv[0] == "scontrol":
            self.outputs["scontrol"] = PRIMARY_DOWN_PING
        return answer


def test_a_pass_that_outlived_its_controller_is_not_served_as_the_primarys() -> None:
    slurm = LosingControl(scontrol=BACKUP_PING)
    samples = _scrape(_collector(slurm, "obs-0"))
    ran = [COMMANDS.get(tuple(argv), argv[0]) for argv in slurm.ran]
    assert ran == ["scontrol", "sdiag", "sinfo", "sinfo_reasons", "squeue", "scontrol"]
    assert not _series(samples, "slurm_nodes")
    assert not _series(samples, "slurm_controller_up")
    assert _series(samples, "slurm_controller_primary") == {(("host", "obs-0"),): 0}


def test_cluster_totals_count_a_node_in_two_partitions_once() -> None:
    samples = _scrape(_collector(FakeSlurm()))
    assert _series(samples, "slurm_cluster_cpus") == {
        (("state", "allocated"),): 2,
        (("state", "idle"),): 0,
        (("state", "other"),): 8,
        (("state", "total"),): 10,
    }
    assert _series(samples, "slurm_cluster_nodes") == {
        (("state", "allocated"),): 1,
        (("state", "idle"),): 1,
        (("state", "down"),): 1,
    }
    partitions = _series(samples, "slurm_partition_cpus")
    assert sum(v for k, v in partitions.items() if ("state", "total") in k) == 18


@pytest.mark.parametrize("private", ["jobs", "users", "accounts", "usage"])
def test_private_data_turns_the_per_user_series_off(private: str) -> None:
    """Any local user can scrape the exporter: what PrivateData hides from users, it hides."""
    slurm = FakeSlurm()
    samples = _scrape(_collector(slurm, per_user=True, private=frozenset({private})))
    for name in ("slurm_user_jobs", "slurm_user_cpus", "slurm_account_jobs"):
        assert not _series(samples, name)
    assert not _series(samples, "slurm_user_rpc_requests_total")
    assert tuple(exporter.SQUEUE_ACCOUNTS) not in map(tuple, slurm.ran)


def test_private_jobs_and_usage_are_not_read() -> None:
    """An unprivileged exporter would read its own jobs only, and be refused sdiag: it reads
    neither, so it never serves an empty queue as the cluster's, nor fails every pass."""
    slurm = FakeSlurm(squeue=AssertionError("squeue ran"), sdiag=AssertionError("sdiag ran"))
    samples = _scrape(_collector(slurm, private=frozenset({"jobs", "usage"})))
    assert not _series(samples, "slurm_partition_jobs")
    assert not _series(samples, "slurm_scheduler_queue_length")
    assert _series(samples, "slurm_nodes")
    assert samples[("slurm_exporter_last_success_timestamp_seconds", ())] == RECORDED_AT


def test_the_command_line_reads_private_data(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[exporter.SlurmCollector] = []
    monkeypatch.setattr(exporter, "serve", lambda collector, *_: made.append(collector))
    exporter.main(["--per-user", "--private-data", "Jobs, usage"])
    assert made[0].private == {"jobs", "usage"}
    assert not made[0].per_user


def test_a_unit_whose_slurmctld_is_stopped_exports_its_role_and_no_failure() -> None:
    """Unprivileged, the exporter reaches Slurm only through the local slurmctld's socket: a
    standby unit (slurmctld stopped) is not in control, and that is no failed pass."""
    slurm = FakeSlurm()
    samples = _scrape(_collector(slurm, sack_socket=Path("/nonexistent/sack.socket")))
    assert slurm.ran == []
    assert _series(samples, "slurm_controller_primary") == {(("host", HOST),): 0}
    assert not _series(samples, "slurm_exporter_collect_errors_total")
    assert samples[("slurm_exporter_last_success_timestamp_seconds", ())] == RECORDED_AT


@pytest.mark.parametrize(
    "ping",
    ['{"pings": "nope"}', BACKUP_PING.replace('"obs-1"', '"obs-1 up=1"')],
    ids=["not-pings-json", "host-outside-the-grammar"],
)
def test_a_ping_it_cannot_read_is_a_failed_ping_and_no_controller_series(ping: str) -> None:
    """hpc_libs reads ping's JSON (`scontrol.parse_pings`); the exporter labels the hosts."""
    samples = _scrape(_collector(FakeSlurm(scontrol=ping), "obs-1"))  # One failed pass.
    assert _series(samples, "slurm_exporter_collect_errors_total") == {(("source", "ping"),): 1}
    assert not _series(samples, "slurm_controller_up")
