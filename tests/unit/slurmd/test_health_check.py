"""The slurmd charm's node health check program, over faked system files and node records."""

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PROGRAM = Path(__file__).parents[3] / "charms/slurmd/src/programs/health_check.py"


def load_program() -> ModuleType:
    spec = importlib.util.spec_from_file_location("health_check", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["health_check"] = module
    spec.loader.exec_module(module)
    return module


hc = load_program()
NAME = "compute-0"
META = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the version it answers in."""
VECTORS = Path(__file__).parents[1] / "hpc_libs" / "vectors"


def node(name: str = NAME, *, state: tuple[str, ...] = ("IDLE",), **fields: Any) -> dict[str, Any]:
    """A record of `scontrol show node --json`, in partition `compute`."""
    return {
        "name": name,
        "state": list(state),
        "partitions": ["compute"],
        "reason": "",
        "reason_set_by_user": "",
        "cpus": 2,
        "real_memory": 1000,
        **fields,
    }


def health_drained(name: str, at: int = 100) -> dict[str, Any]:
    return node(
        name,
        state=("IDLE", "DRAIN"),
        reason="health: mounts: /home not mounted",
        reason_set_by_user="root",
        reason_changed_at={"set": True, "number": at},
    )


def failing(*checks: str) -> Any:
    return hc.Outcome(problems=[hc.Problem(c, "/home not mounted") for c in checks])


# The checks, over faked files.


def fake_root(tmp_path: Path, mounts: tuple[str, ...] = ()) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    lines = [f"{20 + i} 1 0:{i} / {m} rw - nfs server:{m} rw" for i, m in enumerate(mounts)]
    (tmp_path / "proc/self/mountinfo").write_text(
        "\n".join(["1 0 8:1 / / rw - ext4 x rw", *lines])
    )
    for mount in mounts:
        (tmp_path / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal:        2048000 kB\nMemFree: 10 kB\n")
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1\n")
    (tmp_path / "dev").mkdir()
    return tmp_path


def test_a_required_mount_that_is_not_mounted_fails_with_its_path(tmp_path: Path) -> None:
    root = fake_root(tmp_path, mounts=("/home",))

    problems = hc.check_mounts(root, ["/home", "/scratch"], timeout=2)

    assert [p.reason for p in problems] == ["health: mounts: /scratch not mounted"]


def test_a_mount_point_with_an_escaped_blank_is_read_as_its_path(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    (root / "proc/self/mountinfo").write_text("30 1 0:5 / /data\\040set rw - nfs s:/d rw\n")
    (root / "data set").mkdir()

    assert hc.check_mounts(root, ["/data set"], timeout=2) == []


def test_a_mount_that_does_not_answer_fails_in_time_and_never_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_root(tmp_path, mounts=("/home",))
    release = threading.Event()
    monkeypatch.setattr(hc.os, "statvfs", lambda _: release.wait(8))
    started = time.monotonic()

    problems = hc.check_mounts(root, ["/home"], timeout=0.2)

    release.set()
    assert time.monotonic() - started < 5
    assert [p.reason for p in problems] == ["health: mounts: /home does not answer"]


def test_free_space_below_a_percentage_or_a_size_fails(tmp_path: Path) -> None:
    assert hc.check_free_space(tmp_path, {"/": "0%"}) == []
    assert hc.check_free_space(tmp_path, {"/": "1"}) == []
    problems = hc.check_free_space(tmp_path, {"/": "100%", "/.": str(2**40)})

    assert [p.seen for p in problems] == ["/ below 100% free", f"/. below {2**40} free"]


def test_fewer_cpus_or_less_memory_than_registered_fails(tmp_path: Path) -> None:
    root = fake_root(tmp_path)

    assert hc.check_resources(root, node(cpus=2, real_memory=2000)) == []
    problems = hc.check_resources(root, node(cpus=4, real_memory=4000))

    assert [p.reason for p in problems] == [
        "health: cpus: 2 CPUs online, registered 4",
        "health: memory: 2000 MiB, registered 4000",
    ]


def test_unknown_registered_resources_cannot_decide(tmp_path: Path) -> None:
    with pytest.raises(hc.UndecidedError):
        hc.check_resources(fake_root(tmp_path), node(cpus=None))


def test_missing_gpus_the_gres_expects_fail(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    (root / "dev/nvidia0").touch()
    (root / "dev/nvidiactl").touch()

    assert hc.check_gpus(root, node(gres=""), timeout=2) == []
    assert hc.check_gpus(root, node(gres="gpu:tesla:1(S:0)"), timeout=2) == []
    problems = hc.check_gpus(root, node(gres="gpu:tesla:1,gpu:a100:2(S:0-1)"), timeout=2)

    assert [p.reason for p in problems] == ["health: gpus: 1 GPU devices, gres expects 3"]


def test_a_failing_nvidia_smi_fails_the_gpus(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    (root / "dev/nvidia0").touch()
    (root / "usr/bin").mkdir(parents=True)
    smi = root / "usr/bin/nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 9\n")
    smi.chmod(0o755)

    problems = hc.check_gpus(root, node(gres="gpu:1"), timeout=5)

    assert [p.seen for p in problems] == ["nvidia-smi failed (exit 9)"]


@pytest.mark.parametrize(
    ("answer", "expected"), [("yes", []), ("no", ["health: time-sync: clock not synchronised"])]
)
def test_the_clock_must_be_synchronised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, expected: list[str]
) -> None:
    stub = tmp_path / "timedatectl"
    stub.write_text(f"#!/bin/sh\necho {answer}\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    assert [p.reason for p in hc.check_time_sync(timeout=5)] == expected


def test_a_missing_or_linked_slurmd_directory_fails_or_cannot_decide(tmp_path: Path) -> None:
    (tmp_path / "spool").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "log").symlink_to(tmp_path / "elsewhere")

    assert hc.check_writable(["/spool"], tmp_path) == []
    assert list((tmp_path / "spool").iterdir()) == []  # the probe is gone
    assert [p.seen for p in hc.check_writable(["/gone"], tmp_path)] == ["/gone missing"]
    with pytest.raises(hc.UndecidedError):  # a link is never followed
        hc.check_writable(["/log"], tmp_path)


def test_a_hanging_check_cannot_decide_and_never_blocks_slurmd() -> None:
    release = threading.Event()
    done: list[Any] = []

    def hanging() -> list[Any]:
        release.wait(60)
        return [hc.Problem("mounts", "late")]

    runner = threading.Thread(
        target=lambda: done.append(hc.run_checks({"mounts": hanging, "cpus": list}, 0.2)),
        daemon=True,
    )
    runner.start()
    runner.join(5)
    release.set()

    assert done, "the checks did not return within their deadline"
    assert done[0].problems == []
    assert done[0].undecided == ["mounts"]


# Drain and resume.


def test_a_failed_check_drains_the_node_with_the_checks_reason() -> None:
    decision = hc.decide(failing("mounts"), node(), lambda: [node(), node("compute-1")], 50)

    assert (decision.action, decision.reason) == ("drain", "health: mounts: /home not mounted")


def test_a_node_it_drained_is_resumed_when_every_check_passes() -> None:
    decision = hc.decide(hc.Outcome(), health_drained(NAME), list, 50)

    assert decision.action == "resume"


def test_a_node_it_drained_stays_drained_while_a_check_cannot_decide() -> None:
    decision = hc.decide(hc.Outcome(undecided=["mounts"]), health_drained(NAME), list, 50)

    assert decision.action is None


@pytest.mark.parametrize(
    ("reason", "setter"),
    [
        ("maintenance", "root"),  # an operator, as root
        ("health: mounts: /home not mounted", "alice"),  # the prefix, but not root's drain
        ("rebuild: apt-get upgrade failed", "root"),  # the rebuild's
        ("Kill task failed", "slurm"),  # Slurm's own
    ],
)
def test_a_drain_set_by_anyone_else_is_never_resumed_nor_replaced(
    reason: str, setter: str
) -> None:
    drained = node(state=("IDLE", "DRAIN"), reason=reason, reason_set_by_user=setter)

    healthy = hc.decide(hc.Outcome(), drained, list, 50)
    unhealthy = hc.decide(failing("mounts"), drained, list, 50)

    assert (healthy.action, unhealthy.action) == (None, None)


def test_a_failing_node_is_not_drained_past_the_partitions_share() -> None:
    partition = [node(), health_drained("compute-1"), node("compute-2"), node("compute-3")]

    within = hc.decide(failing("mounts"), node(), lambda: partition, 50)
    past = hc.decide(failing("mounts"), node(), lambda: partition[:2], 50)
    single = hc.decide(failing("mounts"), node(), lambda: [node()], 50)

    assert within.action == "drain"
    assert (past.action, past.report) == (None, "not drained: health-max-drain reached")
    assert single.action is None  # 50% of one node is no node


def test_of_two_nodes_drained_at_once_past_the_share_the_later_resumes_itself() -> None:
    both = [health_drained(NAME, at=101), health_drained("compute-1", at=100)]

    assert not hc.keeps_its_drain(both, NAME, 50)
    assert hc.keeps_its_drain(both, "compute-1", 50)
    assert hc.keeps_its_drain(both, NAME, 100)


def test_a_drain_stamped_in_the_same_second_is_read_before_the_node_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI: compute-1 drained, then compute-0 28 ms later in the same second; compute-1 read
    the records between the two drains, saw itself alone and kept its drain, and compute-0,
    first by name in that second, kept its own: both drained past the share. A node now
    reads only once its reason's second is over."""
    ours = "compute-1"
    records = [node(), node(ours)]
    calls: list[tuple[str, ...]] = []

    def scontrol(*arguments: str) -> str:
        calls.append(arguments)
        if arguments[:2] == ("update", f"nodename={ours}") and "state=drain" in arguments:
            records[1] = health_drained(ours, at=100)
        return json.dumps({"meta": META, "nodes": records})

    def sleep(seconds: float) -> None:
        assert seconds >= 1  # past the second
        records[0] = health_drained(NAME, at=100)  # compute-0's drain, in that second

    monkeypatch.setattr(hc, "scontrol", scontrol)
    monkeypatch.setattr(hc, "squeue", lambda *_: "")
    monkeypatch.setattr(hc.time, "sleep", sleep)

    decision = hc.act(failing("mounts"), node(ours), "compute", 50)

    assert decision.report == "not drained: health-max-drain reached"
    assert calls[-1] == ("update", f"nodename={ours}", "state=resume")


def test_a_drain_past_the_share_left_by_a_failed_resume_is_undone_by_the_next_check() -> None:
    both = [health_drained(NAME, at=100), health_drained("compute-1", at=100)]

    later = hc.decide(failing("mounts"), both[1], lambda: both, 50)
    first = hc.decide(failing("mounts"), both[0], lambda: both, 50)

    assert (later.action, later.report) == ("resume", "not drained: health-max-drain reached")
    assert (first.action, first.report) == (None, "drained")


def test_a_node_failing_after_a_rebuild_is_drained_whatever_the_share() -> None:
    partition = [node(), health_drained("compute-1")]

    decision = hc.decide(failing("mounts"), node(), lambda: partition, 50, rebuilt=True)

    assert (decision.action, decision.report) == ("drain", "drained, rollout stopped")


ROLLOUT = "rebuild:compute:1795618800:"


@pytest.mark.parametrize(
    ("comments", "expected"),
    [
        (f"{ROLLOUT}reboot:{NAME}\n", ROLLOUT),
        (f"{ROLLOUT}upgrade:{NAME}\n", ROLLOUT),
        (f"{ROLLOUT}reboot:compute-1\n", None),  # another node's job
        (f"{ROLLOUT}reboot:{NAME}\n{ROLLOUT}reboot:{NAME}\n", None),  # not one job
        ("", None),
    ],
)
def test_the_rebuild_job_of_this_node_names_its_rollout(
    monkeypatch: pytest.MonkeyPatch, comments: str, expected: str | None
) -> None:
    monkeypatch.setattr(hc, "squeue", lambda *_: comments)

    assert hc.rebuild_rollout(NAME) == expected


def test_the_gate_holds_the_rollouts_pending_jobs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    pending = (
        f"41|{ROLLOUT}reboot:compute-1\n"
        "42|rebuild:compute:1795610000:reboot:compute-2\n"  # an earlier rollout's
        f"4x|{ROLLOUT}reboot:compute-3\n"
        f"43|{ROLLOUT}upgrade:compute-4\n"
    )
    held: list[tuple[str, ...]] = []
    monkeypatch.setattr(hc, "squeue", lambda *_: pending)
    monkeypatch.setattr(hc, "scontrol", lambda *a: held.append(a) or "")

    assert hc.hold_rollout(ROLLOUT) == ["41", "43"]
    assert held == [("hold", "41,43")]


# The program's run: settings, Slurm, the state file.


def test_the_program_drains_through_scontrol_and_writes_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"node": NAME, "partition": "compute", "mounts": ["/no-such-mount-here"]}
    monkeypatch.setattr(hc, "SETTINGS", tmp_path / "settings.json")
    monkeypatch.setattr(hc, "STATE", tmp_path / "state.json")
    hc.SETTINGS.write_text(json.dumps(settings))
    records = [node(cpus=1, real_memory=1), node("compute-1", cpus=1, real_memory=1)]
    calls: list[tuple[str, ...]] = []

    def scontrol(*arguments: str) -> str:
        calls.append(arguments)
        if arguments[0] == "update":
            records[0] = health_drained(NAME)
        return json.dumps({"meta": META, "nodes": records[:1] if NAME in arguments else records})

    monkeypatch.setattr(hc, "scontrol", scontrol)
    monkeypatch.setattr(hc, "squeue", lambda *_: "")

    assert hc.main() == 0

    assert (
        "update",
        f"nodename={NAME}",
        "state=drain",
        "reason=health: mounts: /no-such-mount-here not mounted",
    ) in calls
    state = json.loads(hc.STATE.read_text())
    assert state["problems"] == [{"check": "mounts", "seen": "/no-such-mount-here not mounted"}]
    assert state["report"] == "drained"


def test_a_node_failing_the_gate_is_drained_and_its_rollout_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = {
        "--format=%k": f"{ROLLOUT}reboot:{NAME}\n",
        "--format=%i|%k": f"41|{ROLLOUT}reboot:compute-1\n",
    }
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(hc, "squeue", lambda *a: answers[a[-1]])
    monkeypatch.setattr(hc, "scontrol", lambda *a: calls.append(a) or "")

    decision = hc.act(failing("mounts"), node(), "compute", 50)  # alone: 50% is no node

    assert decision.report == "drained, rollout stopped"
    assert calls == [
        ("update", f"nodename={NAME}", "state=drain", "reason=health: mounts: /home not mounted"),
        ("hold", "41"),
    ]


def test_a_bug_in_the_program_still_exits_0_so_slurmd_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """slurmd runs the program at its start until it exits 0, and registers only then."""

    def broken() -> int:
        raise KeyError("bug")

    monkeypatch.setattr(hc, "check_node", broken)

    assert hc.main() == 0


# The version of the node records (`--json` answers in its release's default).


@pytest.mark.parametrize(
    ("release", "name", "records"),
    [("24.11", "node-drained-duplicate-jobid.json", 1), ("26.05", "nodes.json", 2)],
)
def test_recorded_node_records_of_both_releases_are_read(
    monkeypatch: pytest.MonkeyPatch, release: str, name: str, records: int
) -> None:
    answer = (VECTORS / f"slurm-{release}" / name).read_text()
    monkeypatch.setattr(hc, "scontrol", lambda *_: answer)

    assert len(hc.show_nodes()) == records


def test_node_records_in_a_newer_data_parser_leave_the_check_undecided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release whose default moved on: no field read as if it meant what it did."""
    recorded = (VECTORS / "slurm-26.05" / "nodes.json").read_text()
    newer = recorded.replace(r"data_parser\/v0.0.45", r"data_parser\/v0.0.46")
    assert newer != recorded
    monkeypatch.setattr(hc, "scontrol", lambda *_: newer)

    with pytest.raises(hc.UndecidedError) as error:
        hc.show_nodes(NAME)

    assert str(error.value) == (
        "scontrol show node answers in data_parser v0.0.46, which this program does not read "
        "(v0.0.40 to v0.0.45)"
    )


def test_the_program_reads_the_versions_hpc_libs_reads() -> None:
    """The program runs without hpc_libs: its own list must not drift from the library's."""
    from hpc_libs.slurm import data_parser

    assert data_parser.KNOWN == hc.DATA_PARSERS
