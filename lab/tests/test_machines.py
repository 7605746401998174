"""Lab machines on this host: boot, exec, files, network, teardown that leaves nothing behind.

Needs root, debootstrap and systemd-nspawn (`slurm-lab host-requirements`); CI installs them.
The base root filesystem is built (or taken from the cache) once per session.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_lab import cli, network, rootfs
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab, Machine

pytestmark = pytest.mark.lab

TIMES: dict[str, float] = {}


def _report_time(what: str, seconds: float) -> None:
    TIMES[what] = seconds
    print(f"\n[lab timing] {what}: {seconds:.1f}s")


def _nspawn_pids(state_dir: Path) -> list[int]:
    """Live (non-zombie) systemd-nspawn processes of the lab under state_dir."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    pids = []
    for line in out.splitlines():
        pid, stat, args = line.split(None, 2)
        if "systemd-nspawn" in args and str(state_dir) in args and not stat.startswith("Z"):
            pids.append(int(pid))
    return pids


def _host_links() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=False
    ).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def assert_nothing_left(lab: Lab, host_links_before: set[str]) -> None:
    assert rootfs.mounts_under(lab.state_dir) == []
    netns = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    assert lab.netns_prefix not in netns
    assert not network.netns_exists(lab.lab_netns)
    assert _host_links() <= host_links_before, "a link appeared in the host namespace"
    assert _nspawn_pids(lab.state_dir) == []


@pytest.fixture(scope="session")
def base() -> Path:
    started = time.monotonic()
    cached = (rootfs.cache_dir() / f"base-{rootfs.recipe_hash()}").is_dir()
    path = rootfs.ensure_base()
    _report_time(
        "base build (cached)" if cached else "base build (cold)", time.monotonic() - started
    )
    started = time.monotonic()
    assert rootfs.ensure_base() == path
    _report_time("base build (cached)", time.monotonic() - started)
    return path


@pytest.fixture(scope="session")
def lab(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    del base
    lab = Lab(tmp_path_factory.mktemp("lab") / "state")
    links = _host_links()
    try:
        yield lab
    finally:
        lab.down()
    assert_nothing_left(lab, links)


@pytest.fixture(scope="session")
def pair(lab: Lab) -> tuple[Machine, Machine]:
    started = time.monotonic()
    first = lab.create("node-a")
    _report_time("machine boot (one)", time.monotonic() - started)
    started = time.monotonic()
    second = lab.create("node-b")
    _report_time("machine boot (another)", time.monotonic() - started)
    return first, second


def test_machines_boot_with_their_own_hostname_and_systemd(pair: tuple[Machine, Machine]):
    for machine in pair:
        assert machine.exec(["hostname"], check=True).stdout.strip() == machine.name
        state = machine.exec(["systemctl", "is-system-running"]).stdout.strip()
        assert state in ("running", "degraded"), machine.journal(lines=100)
        assert machine.exec(["cat", "/etc/hostname"]).stdout.strip() == machine.name


def test_machines_reach_each_other_by_name_through_the_bridge(pair: tuple[Machine, Machine]):
    first, second = pair
    result = first.exec(["ping", "-c", "1", "-W", "2", second.name])
    assert result.returncode == 0, result.stdout + result.stderr
    assert second.address in result.stdout
    result = second.exec(["ping", "-c", "1", "-W", "2", first.name])
    assert result.returncode == 0, result.stdout + result.stderr


def test_machines_have_no_route_out(pair: tuple[Machine, Machine]):
    routes = pair[0].exec(["ip", "route", "show"], check=True).stdout
    assert "default" not in routes
    assert pair[0].address in pair[0].exec(["ip", "-4", "-o", "addr"], check=True).stdout


def test_slurm_24_11_is_installed_and_left_stopped(pair: tuple[Machine, Machine]):
    machine = pair[0]
    assert " 24.11." in machine.exec(["slurmd", "-V"], check=True).stdout
    for unit in ("slurmctld", "slurmd", "sackd", "slurmrestd", "slurmdbd", "mariadb", "munge"):
        enabled = machine.exec(["systemctl", "is-enabled", unit]).stdout.strip()
        assert enabled == "disabled", unit
        assert machine.exec(["systemctl", "is-active", unit]).stdout.strip() == "inactive"


def test_machines_get_distinct_machine_ids(pair: tuple[Machine, Machine]):
    ids = {m.exec(["cat", "/etc/machine-id"], check=True).stdout.strip() for m in pair}
    assert len(ids) == 2 and "" not in ids


def test_exec_passes_input_env_and_reports_failure(pair: tuple[Machine, Machine]):
    machine = pair[0]
    assert machine.exec(["cat"], input="hello").stdout == "hello"
    assert machine.exec(["sh", "-c", "echo $GREETING"], env={"GREETING": "hi"}).stdout == "hi\n"
    assert machine.exec(["pwd"]).stdout.strip() == "/"
    assert machine.exec(["id", "-u"]).stdout.strip() == "0"
    assert machine.exec(["false"]).returncode == 1
    with pytest.raises(LabError, match="exited 3"):
        machine.exec(["sh", "-c", "exit 3"], check=True)
    with pytest.raises(LabError, match="timed out"):
        machine.exec(["sleep", "10"], timeout=0.5)


def test_write_file_and_push(pair: tuple[Machine, Machine], tmp_path: Path):
    machine = pair[0]
    machine.write_file("/etc/lab-test/conf", "a=1\n", mode=0o600)
    assert machine.exec(["cat", "/etc/lab-test/conf"]).stdout == "a=1\n"
    assert machine.exec(["stat", "-c", "%a %U", "/etc/lab-test/conf"]).stdout.strip() == "600 root"
    machine.write_file("/tmp/blob", b"\x00\x01")
    assert machine.exec(["stat", "-c", "%s", "/tmp/blob"]).stdout.strip() == "2"

    (tmp_path / "tree/sub").mkdir(parents=True)
    (tmp_path / "tree/sub/file.txt").write_text("pushed\n")
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "script.sh").chmod(0o755)
    machine.push(tmp_path / "tree", "/opt/tree")
    machine.push(tmp_path / "script.sh", "/usr/local/bin/lab-script")
    assert machine.exec(["cat", "/opt/tree/sub/file.txt"]).stdout == "pushed\n"
    assert machine.exec(["lab-script"]).stdout == "ran\n"
    assert pair[1].exec(["test", "-e", "/opt/tree"]).returncode == 1, "overlays are per machine"


def test_shared_dir_is_shared_and_charms_dir_read_only(lab: Lab, pair: tuple[Machine, Machine]):
    first, second = pair
    first.write_file("/lab/shared/from-a", "a\n")
    assert (lab.shared_dir / "from-a").read_text() == "a\n"
    assert second.exec(["cat", "/lab/shared/from-a"]).stdout == "a\n"
    (lab.charms_dir / "charm.txt").write_text("code\n")
    assert first.exec(["cat", "/lab/charms/charm.txt"]).stdout == "code\n"
    assert first.exec(["touch", "/lab/charms/x"]).returncode != 0


def test_journal_returns_the_machine_log(pair: tuple[Machine, Machine]):
    machine = pair[0]
    machine.exec(["systemd-cat", "-t", "labtest"], input="journal-marker\n", check=True)
    deadline = time.monotonic() + 10
    while "journal-marker" not in machine.journal(lines=200) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "journal-marker" in machine.journal(lines=200)
    assert "systemd-journald" in machine.journal("systemd-journald.service")


def test_lab_sees_machines_from_another_process(lab: Lab, pair: tuple[Machine, Machine]):
    code = (
        "import sys; from pathlib import Path; from slurm_lab.machines import Lab; "
        "lab = Lab(Path(sys.argv[1])); "
        "print(*(m.name for m in lab.machines())); "
        "print(lab.get('node-b').exec(['hostname']).stdout.strip())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(lab.state_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.stdout.split("\n")[:2] == ["node-a node-b", "node-b"], out.stderr
    assert [m.name for m in lab.machines()] == ["node-a", "node-b"]
    assert lab.get("node-a") == pair[0]
    with pytest.raises(LabError):
        lab.get("nope")
    with pytest.raises(LabError, match="already exists"):
        lab.create("node-a")


def test_a_process_given_an_ended_inits_pid_is_not_taken_for_the_machine(
    lab: Lab, pair: tuple[Machine, Machine]
):
    """The host hands PIDs out again (32768 of them here, a few minutes of CI): once a machine's
    init ends (a reboot, a power cut), its PID may name any host process. Commands must not
    run in that process's namespaces, and the machine's new init must still be found."""
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        state_file = lab.state_dir / "lab.json"
        state = json.loads(state_file.read_text())
        state["machines"]["node-a"]["init_pid"] = stranger.pid  # the init's PID, handed out again
        state_file.write_text(json.dumps(state))

        assert lab.get("node-a") == pair[0]
        assert lab.get("node-a").exec(["hostname"]).stdout.strip() == "node-a"
        with pytest.raises(LabError, match="not running"):
            dataclasses.replace(pair[0], init_pid=stranger.pid).exec(["hostname"])
    finally:
        stranger.kill()
        stranger.wait()


def test_destroy_removes_the_machine_and_updates_hosts(lab: Lab, pair: tuple[Machine, Machine]):
    third = lab.create("node-c")
    assert "node-c" in pair[0].exec(["cat", "/etc/hosts"]).stdout
    assert pair[0].exec(["ping", "-c", "1", "-W", "2", "node-c"]).returncode == 0
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(third.exec, ["sleep", "60"])
        time.sleep(1)
        os.kill(third.init_pid, signal.SIGKILL)  # a power cut under a running command
        # Not the command's failure: the lab's (nsenter's) plumbing must not show either.
        with pytest.raises(LabError, match="went down during the command"):
            running.result(timeout=30)
    lab.destroy("node-c")
    assert "node-c" not in pair[0].exec(["cat", "/etc/hosts"]).stdout
    assert [m.name for m in lab.machines()] == ["node-a", "node-b"]
    assert not network.netns_exists(f"{lab.netns_prefix}node-c")
    assert rootfs.mounts_under(lab.state_dir / "machines/node-c") == []
    assert not Path(f"/proc/{third.init_pid}").exists() or not third.init_pid
    with pytest.raises(LabError, match="not running"):
        third.exec(["true"])


def test_cli_up_exec_status_down_leaves_nothing(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    del base
    state = tmp_path / "cli-state"
    links = _host_links()
    lab = Lab(state)
    try:
        assert cli.main(["--state-dir", str(state), "up", "cli-0"]) == 0
        assert "cli-0" in capsys.readouterr().out
        assert cli.main(["--state-dir", str(state), "exec", "cli-0", "--", "hostname"]) == 0
        assert capsys.readouterr().out.strip() == "cli-0"
        assert cli.main(["--state-dir", str(state), "exec", "cli-0", "--", "false"]) == 1
        assert cli.main(["--state-dir", str(state), "status"]) == 0
        assert "cli-0" in capsys.readouterr().out
        assert cli.main(["--state-dir", str(state), "exec", "nope", "--", "true"]) == 1
    finally:
        assert cli.main(["--state-dir", str(state), "down"]) == 0
    assert_nothing_left(lab, links)
    assert lab.machines() == []


def test_the_mirror_serves_the_newer_slurm_on_the_lab_network_only_until_down(
    base: Path, tmp_path: Path
):
    """`serve_mirror`: a machine's apt sees forky's slurmd as the candidate; `down` stops it."""
    del base
    lab = Lab(tmp_path / "state")
    links = _host_links()
    servers: list[int] = []
    try:
        machine = lab.create("mirror-user")
        source = lab.serve_mirror()
        assert lab.serve_mirror() == source  # idempotent: the running server is kept
        servers = network.pids_in(lab.lab_netns)
        assert len(servers) == 1
        machine.write_file("/etc/apt/sources.list.d/slurm-newer.list", source + "\n")
        machine.exec(["apt-get", "-q", "update"], check=True, timeout=120)
        policy = machine.exec(["apt-cache", "policy", "slurmd"], check=True).stdout
        candidate = policy.split("Candidate:", 1)[1].split()[0]
        assert not candidate.startswith("24.11"), policy
        assert "http://10.151.0.1/debian forky/main" in policy
    finally:
        lab.down()
    assert_nothing_left(lab, links)
    assert not any(Path(f"/proc/{pid}").exists() for pid in servers)
