"""The operator toolkit's actions (issue 11) end to end, against real Slurm.

One deployment for the module: slurmctld, a slurmd application `compute` (one unit), a sackd
login node, slurmdbd with MySQL (on the lab: the stand-in) and slurmrestd: every daemon that
holds the auth key. Each test builds on the cluster the previous ones left.

Run with `-s` to see the measurements.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jubilant
import pytest
from accounting_rest_helpers import (
    CONTROLLER,
    LOGIN,
    SLURMCTLD_LOG,
    key_ids,
    poll,
    sh,
    try_sh,
)
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm, wait_for_active

RELEASES = ("trixie", "forky")
"""The actions parse Slurm's own output (scontrol, sinfo, sacct) of 24.11 and 26.05."""

SETTLE = 10 * 60
REACT = 3 * 60
APPS = ("slurmctld", "compute", "login", "mysql", "slurmdbd", "slurmrestd")
KEY_HOLDERS = (CONTROLLER, "compute/0", LOGIN, "slurmdbd/0", "slurmrestd/0")
"""Every unit whose daemon holds the auth key (slurmrestd through its sackd)."""
NODE = "compute-0"
REFUSED_LINE = "decode_jwt"
"""What slurmctld logs when it refuses a message's auth/slurm signature."""


def say(text: str) -> None:
    print(f"\n[operator-toolkit] {text}", flush=True)


wait_active = partial(wait_for_active, timeout=SETTLE, apps=APPS)


def controller_status(juju: jubilant.Juju) -> str:
    return juju.status().apps["slurmctld"].units[CONTROLLER].workload_status.message


def node_record(juju: jubilant.Juju) -> dict[str, Any]:
    return json.loads(sh(juju, f"scontrol show node {NODE} --json"))["nodes"][0]


def job_record(juju: jubilant.Juju, job_id: str) -> dict[str, Any] | None:
    out = try_sh(juju, f"scontrol show job {job_id} --json")
    return json.loads(out)["jobs"][0] if out else None


def refusals(juju: jubilant.Juju) -> int:
    return int(sh(juju, f"grep -c {REFUSED_LINE} {SLURMCTLD_LOG} || true").strip() or 0)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    began = time.monotonic()
    deploy_slurm(juju, charm_path)
    deploy_rest_api(juju, charm_path)
    deploy_accounting(juju, charm_path)
    wait_active(juju)
    poll(lambda: "accounting" in controller_status(juju), timeout=REACT, what="accounting")
    say(f"deployed in {time.monotonic() - began:.0f} s")
    return juju


def test_show_current_config_returns_the_served_files_and_no_secret(cluster: jubilant.Juju):
    results = cluster.run(CONTROLLER, "show-current-config").results

    assert {"slurm-conf", "cgroup-conf"} <= set(results)
    assert "authtype=auth/slurm" in results["slurm-conf"].lower()
    assert "jwt_key=/etc/slurm/jwt_hs256.key" in results["slurm-conf"].lower()
    shown = "\n".join(str(v) for v in results.values())
    for path in ("/etc/slurm/slurm.key", "/etc/slurm/jwt_hs256.key"):
        secret_b64 = sh(cluster, f"base64 -w0 {path}").strip()
        assert secret_b64[:40] not in shown
    assert "storagepass" not in shown.lower()  # slurmdbd.conf is never shown
    say(
        f"show-current-config: {sorted(results)}; {len(results['slurm-conf'])} chars of slurm.conf"
    )


def max_time(juju: jubilant.Juju) -> str:
    out = sh(juju, "scontrol show partition compute | grep -o 'MaxTime=[^ ]*'")
    return out.strip().removeprefix("MaxTime=")


def reregister_with_less_memory(juju: jubilant.Juju) -> int:
    """Give compute/0 a smaller RealMemory (a hardware field: the node registers again).

    Returns the new RealMemory once the node has registered with it and the transient unit
    that re-registers it is gone.
    """
    memory = int(node_record(juju)["real_memory"]) - 16
    juju.run("compute/0", "node-config", {"parameters": f"RealMemory={memory}"})

    def registered_again() -> bool:
        out = try_sh(juju, f"scontrol show node {NODE} --json")
        nodes = json.loads(out)["nodes"] if out else []
        transient = sh(
            juju, f"systemctl is-active slurmd-reregister-{NODE} || true", unit="compute/0"
        )
        return (
            bool(nodes) and nodes[0].get("real_memory") == memory and transient.strip() != "active"
        )

    poll(registered_again, timeout=REACT, what=f"{NODE} to register again with less memory")
    return memory


def test_an_operators_drain_and_resume_stick_across_config_changes(cluster: jubilant.Juju):
    cluster.run(
        CONTROLLER,
        "set-node-state",
        {"nodes": NODE, "state": "drain", "reason": "operator check"},
    )
    assert "DRAIN" in node_record(cluster)["state"]

    cluster.config("compute", {"partition-config": "MaxTime=60"})
    wait_active(cluster, timeout=REACT)
    poll(
        lambda: max_time(cluster) == "01:00:00",
        timeout=REACT,
        what="the partition to take MaxTime=60",
    )
    record = node_record(cluster)
    assert "DRAIN" in record["state"], record["state"]
    assert record["reason"] == "operator check"

    began = time.monotonic()
    memory = reregister_with_less_memory(cluster)
    record = node_record(cluster)
    assert "DRAIN" in record["state"], record["state"]
    assert record["reason"] == "operator check"
    say(
        f"drain kept across a re-registration (RealMemory={memory}): {record['state']}, "
        f"{time.monotonic() - began:.0f} s"
    )

    cluster.run(CONTROLLER, "set-node-state", {"nodes": NODE, "state": "resume"})
    cluster.config("compute", {"partition-config": "MaxTime=120"})
    wait_active(cluster, timeout=REACT)
    poll(
        lambda: (
            "2:00:00" in sh(cluster, "scontrol show partition compute | grep -o 'MaxTime=[^ ]*'")
        ),
        timeout=REACT,
        what="the partition to take MaxTime=120",
    )
    record = node_record(cluster)
    assert "DRAIN" not in record["state"] and "DOWN" not in record["state"], record["state"]
    say(f"drain kept across a partition change, resume kept too: {record['state']}")


def jwt_works(juju: jubilant.Juju, token: str, command: str) -> bool:
    return try_sh(juju, f"SLURM_JWT={token} {command}", unit=LOGIN) is not None


def test_rotate_jwt_key_refuses_tokens_issued_before(cluster: jubilant.Juju):
    old = cluster.run(CONTROLLER, "token", {"username": "root"}).results["token"]
    assert jwt_works(cluster, old, "squeue")

    began = time.monotonic()
    cluster.run(CONTROLLER, "rotate-jwt-key")
    wait_active(cluster, timeout=REACT)
    new = cluster.run(CONTROLLER, "token", {"username": "root"}).results["token"]

    assert poll(lambda: jwt_works(cluster, new, "squeue"), timeout=60, what="the new token")
    assert not jwt_works(cluster, old, "squeue")
    # slurmdbd checks tokens with the same key (sacct goes to slurmdbd).
    assert poll(lambda: jwt_works(cluster, new, "sacct -n -X"), timeout=60, what="sacct")
    assert not jwt_works(cluster, old, "sacct -n -X")
    say(
        "rotate-jwt-key: old token refused by slurmctld and slurmdbd after "
        f"{time.monotonic() - began:.0f} s"
    )


def test_rotate_auth_key_keeps_a_running_job_and_refuses_the_old_key(cluster: jubilant.Juju):
    sh(cluster, "cp /etc/slurm/slurm.key /root/old-slurm.key", unit=LOGIN)
    job_id = sh(
        cluster, "sbatch --parsable -N1 --mem=1 -o /dev/null --wrap 'sleep 90'", unit=LOGIN
    ).strip()
    poll(
        lambda: (r := job_record(cluster, job_id)) and "RUNNING" in r["job_state"],
        timeout=60,
        what=f"job {job_id} running",
    )

    began = time.monotonic()
    results = cluster.run(CONTROLLER, "rotate-auth-key").results
    assert results["new-key-id"] == "slurm-1"
    seen: list[str] = []

    def rotated() -> bool:
        on_login = key_ids(cluster, LOGIN)
        if on_login not in seen:
            seen.append(on_login)
        return all(key_ids(cluster, unit) == "slurm-1*" for unit in KEY_HOLDERS)

    poll(rotated, timeout=REACT, interval=3, what="every daemon on the new key alone")
    took = time.monotonic() - began
    wait_active(cluster, timeout=REACT)
    say(f"rotate-auth-key done on {len(KEY_HOLDERS)} units in {took:.0f} s; login saw {seen}")
    assert seen[-1] == "slurm-1*"
    steps = [line for line in cluster.debug_log().splitlines() if "auth key rotation" in line]
    say("the leader's steps:\n" + "\n".join(steps))
    assert len(steps) == 3, steps  # started, new key signing, new key alone

    # Juju runs secret-remove once no unit tracks an old revision: the former keys go.
    def removed() -> list[str]:
        lines = cluster.debug_log().splitlines()
        return [line for line in lines if "of secret slurm-auth-key: no unit tracks it" in line]

    poll(lambda: len(removed()) >= 3, timeout=REACT, interval=3, what="old key revisions gone")
    say("revisions removed:\n" + "\n".join(removed()))

    def completed() -> dict[str, Any] | None:
        record = job_record(cluster, job_id)
        return record if record is not None and "COMPLETED" in record["job_state"] else None

    finished = poll(
        completed,
        timeout=150,
        interval=3,
        what=f"job {job_id} completed",
    )
    assert finished["exit_code"]["return_code"]["number"] == 0
    assert sh(cluster, "srun -N1 hostname", unit=LOGIN).strip()
    assert sh(cluster, f"sacct -n -X -j {job_id} -o state", unit=LOGIN).split()[0] == "COMPLETED"
    rest = cluster.status().apps["slurmrestd"].units["slurmrestd/0"].workload_status.message
    assert "controller answers" in rest

    # The proof: a sackd with the old key is refused; the same steps with the current key work.
    def sackd_with(key_file: str) -> bool:
        before = refusals(cluster)
        sh(
            cluster,
            "systemctl stop sackd; mkdir -p /root/keys; "
            "cp -p /etc/slurm/slurm.key /etc/slurm/slurm.jwks /root/keys/; "
            "rm /etc/slurm/slurm.jwks; "
            f"install -m600 -o slurm -g slurm {key_file} /etc/slurm/slurm.key; "
            "systemctl start --no-block sackd; sleep 8",
            unit=LOGIN,
        )
        works = try_sh(cluster, "timeout 10 sinfo -h", unit=LOGIN) is not None
        sh(
            cluster,
            "systemctl stop sackd; cp -p /root/keys/slurm.key /root/keys/slurm.jwks /etc/slurm/; "
            "systemctl start sackd",
            unit=LOGIN,
        )
        refused = refusals(cluster) - before
        if refused:
            lines = sh(cluster, f"grep {REFUSED_LINE} {SLURMCTLD_LOG} | tail -{refused}")
            say(f"slurmctld logged: {lines.strip()}")
        say(
            f"sackd with {key_file}: sinfo {'works' if works else 'fails'}; "
            f"{refused} refusals logged"
        )
        return works and refused == 0

    current = "/root/current.key"  # The signing key's raw bytes, from the key set.
    sh(
        cluster,
        "python3 -c 'import json, base64, sys; "
        'd = json.load(open("/etc/slurm/slurm.jwks")); '
        'sys.stdout.buffer.write(base64.b64decode(d["keys"][0]["k"]))'
        f"' > {current}",
        unit=LOGIN,
    )
    assert not sackd_with("/root/old-slurm.key")
    assert sackd_with(current)
    assert poll(lambda: try_sh(cluster, "sinfo -h", unit=LOGIN), timeout=60, what="sinfo again")


HANG_SOURCE = Path(__file__).resolve().parents[1] / "slurm/hang_forked_exit.c"
HANG_LIBRARY = "/usr/local/lib/hang-forked-exit.so"
HANG_DROP_IN = "/etc/systemd/system/slurmd.service.d/99-test-hang-forked-exit.conf"


def slurmd_processes(juju: jubilant.Juju) -> list[str]:
    out = sh(juju, "pgrep -u root -f '^/usr/sbin/slurmd ' || true", unit="compute/0")
    return out.split()


def slurmd_main_pid(juju: jubilant.Juju) -> str:
    return sh(juju, "systemctl show --value -p MainPID slurmd", unit="compute/0").strip()


def test_a_reregistration_after_a_reconfigure_that_lost_slurmd_restarts_it(
    cluster: jubilant.Juju, tmp_path: Path
):
    """CI5's failure, on the deployed charm: a reconfigure's old slurmd waited forever for its
    fork child, hung on its way out (here a preloaded fault, tests/slurm/hang_forked_exit.c),
    so systemd never learnt the new slurmd's pid; the re-registration's restart then stopped
    the old one alone and slurmd could not bind 6818 again. The charm's drop-in reaps it."""
    library = tmp_path / "hang.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-s", "-o", str(library), str(HANG_SOURCE)],
        check=True,
    )
    encoded = base64.b64encode(library.read_bytes()).decode()
    sh(
        cluster,
        f"echo {encoded} | base64 -d > {HANG_LIBRARY} && "
        f"printf '[Service]\\nEnvironment=LD_PRELOAD={HANG_LIBRARY}\\n' > {HANG_DROP_IN} && "
        "systemctl daemon-reload && systemctl restart slurmd",
        unit="compute/0",
    )
    poll(
        lambda: "IDLE" in node_record(cluster)["state"],
        timeout=REACT,
        what=f"{NODE} idle under the fault",
    )
    held = slurmd_main_pid(cluster)
    sh(cluster, "scontrol reconfigure")
    poll(
        lambda: len(slurmd_processes(cluster)) >= 3,
        timeout=REACT,
        what="a new slurmd beside the old one and its hung fork child",
    )
    time.sleep(2)  # the old slurmd would have named the new one by now
    assert slurmd_main_pid(cluster) == held, "the fault did not hold the old slurmd"
    sh(cluster, f"rm -f {HANG_DROP_IN} && systemctl daemon-reload", unit="compute/0")

    memory = reregister_with_less_memory(cluster)

    assert slurmd_processes(cluster) == [slurmd_main_pid(cluster)]
    journal = sh(cluster, "journalctl -u slurmd --no-pager", unit="compute/0")
    reaped = [line for line in journal.splitlines() if "killed /usr/sbin/slurmd process" in line]
    assert len(reaped) == 2, journal  # the new slurmd and the old one's hung fork child
    say(f"re-registered (RealMemory={memory}) after a lost slurmd; reap lines: {len(reaped)}")
