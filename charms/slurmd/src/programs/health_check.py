#!/usr/bin/python3 -I
"""HealthCheckProgram of the slurmd charm (slurm.conf's, written by the slurmctld charm).

slurmd runs it on this node, as root, every `HealthCheckInterval` seconds and when it starts.
It checks the node with built-in checks only, parameterised by the settings file the charm
writes (root-owned JSON, `SETTINGS`): no operator-supplied command ever runs here. Then:

- a failed check drains the node, reason `health: <check>: <what it saw>`;
- a node drained by this program (the reason's prefix AND root as its setter: the program runs
  as root) is resumed once every check passes; any other drain is never touched;
- it never drains more than `max_drain` percent of the node's partition (rounded down),
  counting the nodes this program drained: beyond that it only reports. Two nodes draining
  at once both look again after their drain, and the later one (by the time its reason was
  set, then by name) resumes itself.

Each check has a deadline and runs in its own thread: a check that does not answer in time
cannot decide (a mount that does not answer is a failure of that mount), and a check that
cannot decide neither drains nor lets the node resume. What slurmctld says about nodes is
read with `--json` only (reasons are users' text). The outcome is written for the charm's
status to `STATE` (root-owned); this program runs only on the Python standard library.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

SETTINGS = Path("/etc/default/slurmd-charm-health.json")
STATE = Path("/run/slurmd-charm-health.json")
REASON_PREFIX = "health: "
SETTER = "root"
"""Who sets this program's drains: it runs as root (slurmd's HealthCheckProgram)."""
DEFAULT_TIMEOUT = 10.0
"""Seconds one check may take (slurmd itself kills the program after 60 s)."""
COMMAND_TIMEOUT = 5.0
SAME_SECOND_S = 1.1
"""The wait between a node's drain and its read of the partition's drains: past the second
Slurm stamped its reason with, so any drain stamped in that second is in the answer. Seen in
CI: two nodes drained 28 ms apart; the first read the records before the second's drain and
kept its own, and the second, first by name in that second, kept its own too."""
"""Seconds one Slurm command may take: the node's record, the checks (12 s), then at most
five commands on any path, 42 s in all, within the 60 s slurmd allows the program."""
_GPU_DEVICE = re.compile(r"nvidia[0-9]+")
_JOB_ID = re.compile(r"[0-9]{1,10}")
REBUILD_PARTITION = "rebuild"
DATA_PARSERS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
"""The data_parser versions of node records this program reads (`hpc_libs.slurm.data_parser`'s
KNOWN: this program runs without hpc_libs). `--json` answers in its release's default."""
"""The slurmctld charm's hidden partition of rebuild jobs (`hpc_libs.slurm.base`)."""


class UndecidedError(Exception):
    """A check could not tell (a command missing or failing, a file unreadable)."""


@dataclass(frozen=True)
class Problem:
    """A failed check: its name and what it saw (the charm's own words, paths and numbers)."""

    check: str
    seen: str

    @property
    def reason(self) -> str:
        """The drain reason: `health: <check>: <what it saw>`."""
        return f"{REASON_PREFIX}{self.check}: {self.seen}"


@dataclass
class Outcome:
    """What the checks found: problems, and the checks that could not decide."""

    problems: list[Problem] = field(default_factory=list[Problem])
    undecided: list[str] = field(default_factory=list[str])

    @property
    def healthy(self) -> bool:
        """Whether every check passed."""
        return not self.problems and not self.undecided


Check = Callable[[], list[Problem]]
NodeRecord = dict[str, Any]
"""A node of `scontrol show node --json`, or the settings file's JSON."""


def statvfs_all(paths: list[Path], timeout: float) -> dict[Path, object]:
    """Ask every path for `statvfs` at once; return each answer (or OSError) got in time.

    A path missing from the result did not answer within `timeout` s: its thread, stuck in
    the kernel (a hard NFS mount), is left behind, and the program exits without it.
    """
    answers: dict[Path, object] = {}

    def ask(path: Path) -> None:
        try:
            answers[path] = os.statvfs(path)
        except OSError as e:
            answers[path] = e

    threads = [threading.Thread(target=ask, args=(p,), daemon=True) for p in paths]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return dict(answers)


def run_checks(checks: dict[str, Check], timeout: float) -> Outcome:
    """Run every check at once, all within `timeout` s; return what they found.

    A check still running at the deadline cannot decide: it is left behind, never waited for.
    """
    results: dict[str, object] = {}

    def run(name: str, check: Check) -> None:
        try:
            results[name] = check()
        except Exception as e:  # an undecided check, or a bug in one: it cannot decide
            results[name] = e

    threads = [
        threading.Thread(target=run, args=(name, check), daemon=True)
        for name, check in checks.items()
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    outcome = Outcome()
    for name in checks:
        result = results.get(name)
        if isinstance(result, list):
            outcome.problems.extend(cast(list[Problem], result))
        else:
            outcome.undecided.append(name)
    return outcome


# The checks. `root` is "/" on a node; tests give a directory of faked files.


def mount_points(root: Path) -> set[str]:
    """Return the mount points of /proc/self/mountinfo (field 5, octal escapes undone)."""
    try:
        text = (root / "proc/self/mountinfo").read_text()
    except OSError as e:
        raise UndecidedError(str(e)) from e
    points: set[str] = set()
    for line in text.split("\n"):
        fields = line.split(" ")
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def check_mounts(root: Path, mounts: list[str], timeout: float) -> list[Problem]:
    """Check each required mount is mounted and answers `statvfs` within `timeout` s."""
    present = mount_points(root)
    problems = [Problem("mounts", f"{m} not mounted") for m in mounts if m not in present]
    mounted = [m for m in mounts if m in present]
    answers = statvfs_all([root / m.lstrip("/") for m in mounted], timeout)
    for mount in mounted:
        answer = answers.get(root / mount.lstrip("/"))
        if answer is None:
            problems.append(Problem("mounts", f"{mount} does not answer"))
        elif isinstance(answer, OSError):
            problems.append(Problem("mounts", f"{mount} fails ({answer.strerror})"))
    return problems


def check_free_space(root: Path, minimums: dict[str, str]) -> list[Problem]:
    """Check each path has its minimum free: `<n>%` of its size, or `<n>` MiB."""
    problems: list[Problem] = []
    for path, minimum in minimums.items():
        try:
            info = os.statvfs(root / path.lstrip("/"))
        except OSError as e:
            raise UndecidedError(f"{path}: {e.strerror}") from e
        free = info.f_bavail * info.f_frsize
        if minimum.endswith("%"):
            low = free * 100 < int(minimum[:-1]) * info.f_blocks * info.f_frsize
        else:
            low = free < int(minimum) * 1024 * 1024
        if low:
            problems.append(Problem("free-space", f"{path} below {minimum} free"))
    return problems


def online_cpus(root: Path) -> int:
    """Count the CPUs of /sys/devices/system/cpu/online (`0-3,6`)."""
    try:
        text = (root / "sys/devices/system/cpu/online").read_text().strip()
        count = 0
        for part in text.split(","):
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
    except (OSError, ValueError) as e:
        raise UndecidedError(f"online CPUs: {e}") from e
    return count


def memory_mib(root: Path) -> int:
    """Return MemTotal of /proc/meminfo in MiB."""
    try:
        for line in (root / "proc/meminfo").read_text().split("\n"):
            name, _, value = line.partition(":")
            if name == "MemTotal":
                return int(value.split()[0]) // 1024
    except (OSError, ValueError, IndexError) as e:
        raise UndecidedError(f"meminfo: {e}") from e
    raise UndecidedError("meminfo: no MemTotal")


def check_resources(root: Path, node: NodeRecord) -> list[Problem]:
    """Check that the CPUs and memory are at least what the node registered with."""
    cpus, memory = node.get("cpus"), node.get("real_memory")
    if not isinstance(cpus, int) or not isinstance(memory, int):
        raise UndecidedError("the node's registered CPUs and RealMemory are unknown")
    problems: list[Problem] = []
    if (have := online_cpus(root)) < cpus:
        problems.append(Problem("cpus", f"{have} CPUs online, registered {cpus}"))
    if (have := memory_mib(root)) < memory:
        problems.append(Problem("memory", f"{have} MiB, registered {memory}"))
    return problems


def expected_gpus(gres: object) -> int:
    """Count the GPUs of the node's gres (`gpu:tesla:2(S:0),gpu:1`); 0 for none."""
    if not isinstance(gres, str):
        return 0
    count = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
            count += int(parts[-1])
    return count


def check_gpus(root: Path, node: NodeRecord, timeout: float) -> list[Problem]:
    """Check the GPUs the gres expects have device files; `nvidia-smi` answers if there."""
    wanted = expected_gpus(node.get("gres"))
    if not wanted:
        return []
    try:
        devices = [n for n in os.listdir(root / "dev") if _GPU_DEVICE.fullmatch(n)]
    except OSError as e:
        raise UndecidedError(f"/dev: {e.strerror}") from e
    if len(devices) < wanted:
        return [Problem("gpus", f"{len(devices)} GPU devices, gres expects {wanted}")]
    smi = root / "usr/bin/nvidia-smi"
    if not smi.exists():
        return []
    try:
        subprocess.run(
            [str(smi), "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired as e:
        raise UndecidedError("nvidia-smi did not answer") from e
    except subprocess.CalledProcessError as e:
        return [Problem("gpus", f"nvidia-smi failed (exit {e.returncode})")]
    return []


def check_time_sync(timeout: float) -> list[Problem]:
    """Check that systemd says the clock is synchronised (`timedatectl show`)."""
    try:
        answer = subprocess.run(
            ["timedatectl", "show", "--property=NTPSynchronized", "--value"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise UndecidedError(f"timedatectl: {e}") from e
    if answer == "no":
        return [Problem("time-sync", "clock not synchronised")]
    if answer != "yes":
        raise UndecidedError("timedatectl gave no answer")
    return []


def open_no_follow(path: Path) -> int:
    """Open directory `path` one component at a time, following no symbolic link."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.parts[1:]:
            next_fd = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = next_fd
    except OSError:
        os.close(fd)
        raise
    return fd


def check_writable(directories: list[str], root: Path) -> list[Problem]:
    """Check slurmd's spool and log directories take a new file (following no link)."""
    problems: list[Problem] = []
    probe = f".slurmd-charm-health-{os.getpid()}"
    for directory in directories:
        try:
            fd = open_no_follow(root / directory.lstrip("/"))
        except FileNotFoundError:
            problems.append(Problem("writable", f"{directory} missing"))
            continue
        except OSError as e:
            raise UndecidedError(f"{directory}: {e.strerror}") from e
        try:
            file_fd = os.open(
                probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd
            )
            try:
                os.write(file_fd, b"x")
            finally:
                os.close(file_fd)
                os.unlink(probe, dir_fd=fd)
        except OSError as e:
            problems.append(Problem("writable", f"{directory} not writable ({e.strerror})"))
        finally:
            os.close(fd)
    return problems


def node_checks(settings: NodeRecord, node: NodeRecord, root: Path) -> dict[str, Check]:
    """Return the checks `settings` asks for, by name."""
    timeout = float(settings.get("timeout", DEFAULT_TIMEOUT))
    checks: dict[str, Check] = {
        "resources": lambda: check_resources(root, node),
        "gpus": lambda: check_gpus(root, node, timeout),
        "writable": lambda: check_writable(list(settings.get("writable", [])), root),
    }
    if mounts := settings.get("mounts"):
        checks["mounts"] = lambda: check_mounts(root, list(mounts), timeout)
    if free := settings.get("free_space"):
        checks["free-space"] = lambda: check_free_space(root, dict(free))
    if settings.get("time_sync"):
        checks["time-sync"] = lambda: check_time_sync(timeout)
    return checks


# Drain and resume.


def drained_by_health(node: NodeRecord) -> bool:
    """Whether this program drained `node`: its reason's prefix, set by root."""
    states = node.get("state")
    return (
        isinstance(states, list)
        and "DRAIN" in states
        and str(node.get("reason", "")).startswith(REASON_PREFIX)
        and node.get("reason_set_by_user") == SETTER
    )


def reason_time(node: NodeRecord) -> int:
    """When the node's reason was set (data_parser's number, or `{"number": n}`)."""
    value = node.get("reason_changed_at")
    if isinstance(value, dict):
        value = value.get("number")
    return value if isinstance(value, int) else 0


def partition_members(nodes: list[NodeRecord], partition: str) -> list[NodeRecord]:
    """Return the nodes of `partition`."""
    return [n for n in nodes if partition in (n.get("partitions") or [])]


def drain_allowed(members: list[NodeRecord], name: str, max_drain: int) -> bool:
    """Whether draining `name` keeps the partition's health drains within `max_drain` %."""
    limit = len(members) * max_drain // 100
    others = [n for n in members if n.get("name") != name and drained_by_health(n)]
    return len(others) + 1 <= limit


def keeps_its_drain(members: list[NodeRecord], name: str, max_drain: int) -> bool:
    """After draining: whether `name` is among the first health drains within the share.

    Two nodes that drained at once both see each other; the earlier drains (by the time of
    the reason, then by name) keep theirs, the others resume themselves. Slurm stamps a
    reason to the second, so a node reads the records only once that second is over
    (`SAME_SECOND_S`): a drain stamped in the same second as its own is then in the answer,
    and both nodes order the pair alike.
    """
    limit = len(members) * max_drain // 100
    drained = sorted(
        (n for n in members if drained_by_health(n)),
        key=lambda n: (reason_time(n), str(n.get("name"))),
    )
    return name in [str(n.get("name")) for n in drained[:limit]]


@dataclass(frozen=True)
class Decision:
    """What to do with the node: `drain` (with `reason`), `resume`, or nothing (None)."""

    action: str | None
    reason: str = ""
    report: str = ""


def still_failing(
    node: NodeRecord,
    reason: str,
    members: Callable[[], list[NodeRecord]],
    max_drain: int,
    *,
    rebuilt: bool,
) -> Decision:
    """Decide for a node this check drained that fails again.

    Its drain stays (with the new reason) within the share. A drain past the share that its
    own check could not undo (the resume failed) is undone now.
    """
    name = str(node.get("name"))
    if not rebuilt and not keeps_its_drain(members(), name, max_drain):
        return Decision("resume", reason, report="not drained: health-max-drain reached")
    same = node.get("reason") == reason
    return Decision(None if same else "drain", reason, report="drained")


def decide(
    outcome: Outcome,
    node: NodeRecord,
    members: Callable[[], list[NodeRecord]],
    max_drain: int,
    *,
    rebuilt: bool = False,
) -> Decision:
    """Decide the node's drain or resume from what the checks found.

    A node `rebuilt` (back from a rebuild's reboot, its rebuild job not ended) is the gate:
    it is drained whatever the share, and the rollout stops.
    """
    ours = drained_by_health(node)
    states: list[str] = node.get("state") or []
    if not outcome.problems:
        if ours and outcome.healthy:
            return Decision("resume", report="healthy again")
        return Decision(None, report="healthy" if outcome.healthy else "undecided")
    reason = outcome.problems[0].reason
    if ours:
        return still_failing(node, reason, members, max_drain, rebuilt=rebuilt)
    if "DRAIN" in states:
        return Decision(None, reason, report="drained by someone else")
    if not rebuilt and not drain_allowed(members(), str(node.get("name")), max_drain):
        return Decision(None, reason, report="not drained: health-max-drain reached")
    return Decision("drain", reason, report="drained, rollout stopped" if rebuilt else "drained")


# Slurm.


def scontrol(*arguments: str) -> str:
    """Run scontrol; raise UndecidedError on any failure."""
    return slurm_command("scontrol", *arguments)


def squeue(*arguments: str) -> str:
    """Run squeue on the rebuild partition's jobs of root; raise UndecidedError on failure."""
    return slurm_command(
        "squeue",
        "--noheader",
        "--all",
        f"--partition={REBUILD_PARTITION}",
        "--user=root",
        *arguments,
    )


def slurm_command(*argv: str) -> str:
    """Run a Slurm command; raise UndecidedError on any failure."""
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise UndecidedError(f"{argv[0]} {argv[1]}: {e}") from e


def rebuild_rollout(name: str) -> str | None:
    """Return `rebuild:<partition>:<start>:` of this node's rebuild job; None without one.

    The slurmctld charm submits the rebuild jobs as root, with this comment (its
    `rebuild.comment`); the job waits for the node while it reboots (CONFIGURING) and runs
    once it registered. Only root's jobs are read, so no line is a user's. A failing squeue
    reads as no rebuild.
    """
    try:
        output = squeue(f"--nodelist={name}", "--states=CONFIGURING,RUNNING", "--format=%k")
    except UndecidedError as e:  # the share decides, as for a node not rebuilt
        log(f"cannot ask about a rebuild: {e}")
        return None
    lines = [line for line in output.split("\n") if line]
    if len(lines) != 1:
        return None
    match = re.fullmatch(
        rf"(rebuild:[a-z][a-z0-9-]*:[0-9]+:)(?:upgrade|reboot):{re.escape(name)}", lines[0]
    )
    return match[1] if match else None


def hold_rollout(prefix: str) -> list[str]:
    """Hold the rollout's jobs not started yet (as the RebootProgram does on its failure).

    Its next node must not reboot before the slurmctld charm sees this one failed the gate.
    """
    held: list[str] = []
    for line in squeue("--states=PENDING", "--format=%i|%k").split("\n"):
        job, separator, comment = line.partition("|")
        if separator and _JOB_ID.fullmatch(job) and comment.startswith(prefix):
            held.append(job)
    if held:
        scontrol("hold", ",".join(held))
    return held


def show_nodes(name: str | None = None) -> list[NodeRecord]:
    """Return node records from `scontrol show node[s] --json` (one node, or all)."""
    arguments = ["show", "node", name] if name else ["show", "nodes"]
    try:
        document = json.loads(scontrol(*arguments, "--json"))
        version = data_parser(document)
        nodes = document.get("nodes", [])
    except (ValueError, AttributeError) as e:
        raise UndecidedError(f"scontrol show node: {e}") from e
    if version not in DATA_PARSERS:
        raise UndecidedError(
            f"scontrol show node answers in data_parser {version or '(none named)'}, which this "
            f"program does not read ({DATA_PARSERS[0]} to {DATA_PARSERS[-1]})"
        )
    return [n for n in nodes if isinstance(n, dict)]


def data_parser(document: dict[str, Any]) -> str:
    """Return the version an answer names (`meta.plugin.data_parser`), empty if none."""
    plugin = document.get("meta", {}).get("plugin", {}).get("data_parser", "")
    name = plugin if isinstance(plugin, str) else ""
    return name.removeprefix("data_parser/") if name.startswith("data_parser/") else ""


def write_state(path: Path, state: NodeRecord) -> None:
    """Write the outcome for the charm's status (a root-owned file, replaced atomically)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(state))
    os.replace(temporary, path)


def log(message: str) -> None:
    """Write to stderr (slurmd logs it)."""
    print(f"slurmd-charm-health: {message}", file=sys.stderr)


def act(outcome: Outcome, node: NodeRecord, partition: str, max_drain: int) -> Decision:
    """Decide, then drain or resume the node; a failing Slurm command is the report."""
    name = str(node.get("name"))
    try:
        rollout = rebuild_rollout(name) if outcome.problems else None
        members = lambda: partition_members(show_nodes(), partition)  # noqa: E731
        decision = decide(outcome, node, members, max_drain, rebuilt=rollout is not None)
        if decision.action == "drain":
            scontrol("update", f"nodename={name}", "state=drain", f"reason={decision.reason}")
            if rollout is not None:
                hold_rollout(rollout)
                return decision
            time.sleep(SAME_SECOND_S)
            if not keeps_its_drain(members(), name, max_drain):
                scontrol("update", f"nodename={name}", "state=resume")
                return Decision(None, decision.reason, "not drained: health-max-drain reached")
        elif decision.action == "resume":
            scontrol("update", f"nodename={name}", "state=resume")
    except UndecidedError as e:
        log(f"cannot drain or resume: {e}")
        return Decision(None, report=f"cannot drain or resume: {e}")
    return decision


def main() -> int:
    """Run the check; exit 0 whatever happens.

    At its start slurmd runs the program again and again until it exits 0, and registers
    only then: no failure of this program may keep the node from registering.
    """
    try:
        return check_node()
    except Exception as e:  # any bug: logged, never a node kept from registering
        log(f"failed: {type(e).__name__}: {e}")
        return 0


def check_node() -> int:
    """Check the node, drain or resume it, write the outcome."""
    started = time.monotonic()
    try:
        settings = json.loads(SETTINGS.read_text())
        name = str(settings["node"])
        found = [n for n in show_nodes(name) if n.get("name") == name]
    except (OSError, ValueError, KeyError, UndecidedError) as e:
        log(f"cannot check: {e}")
        return 0
    if not found:
        log(f"node {name} not registered yet")
        return 0
    node = found[0]
    timeout = float(settings.get("timeout", DEFAULT_TIMEOUT))
    outcome = run_checks(node_checks(settings, node, Path("/")), timeout + 2)
    decision = act(
        outcome, node, str(settings.get("partition", "")), int(settings.get("max_drain", 50))
    )
    state = {
        "problems": [{"check": p.check, "seen": p.seen} for p in outcome.problems],
        "undecided": outcome.undecided,
        "report": decision.report,
        "seconds": round(time.monotonic() - started, 3),
    }
    try:
        write_state(STATE, state)
    except OSError as e:
        log(f"cannot write {STATE}: {e}")
    for problem in outcome.problems:
        log(f"{problem.reason} ({decision.report})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
