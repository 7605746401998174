"""slurmrestd's answers in every data_parser version it serves: checked, and recorded on request.

One machine of the lab's suite (trixie: Slurm 24.11; `SLURM_LAB_SUITE=forky`: 26.05) runs
slurmctld, slurmd (node compute-0, 2 CPUs) and slurmrestd (JWT). A queue of a known shape is
made: job 1 runs on both CPUs, job 2 waits for them (Resources), job 3 is held, job 4 begins
in an hour, and reservation `maint` holds compute-0 from an hour on. Then for every version
`/openapi/v3` offers, the nodes, jobs and reservations are read and checked as the unit tests
check the recordings (tests/unit/autoscaler/test_recorded_versions.py): the negotiated
version, each answer's version, and the scaling view (the queue above) of every version alike.

Re-record (both suites; the files are trimmed and anonymised, see `trimmed`):

    sudo RECORD_REST=1 uv run pytest tests/slurm/test_rest_recordings.py
    sudo RECORD_REST=1 SLURM_LAB_SUITE=forky uv run pytest tests/slurm/test_rest_recordings.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hpc_libs.slurm import data_parser
from slurm_lab.machines import Lab, Machine

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests/unit/autoscaler/recorded"
MACHINE = "rest-rec"
HOST = "host-0"
"""What the machine's name becomes in the recordings."""
ADDRESS = "192.0.2.10"
"""What the machine's address becomes in the recordings (TEST-NET-1)."""
ENDPOINTS = ("nodes", "jobs", "reservations")

SETUP = r"""
set -eu
host=$(hostname)
install -d -o slurm -g slurm -m 0755 /var/lib/slurm/slurmctld /var/spool/slurmd /var/log/slurm
head -c 32 /dev/urandom > /etc/slurm/slurm.key
head -c 32 /dev/urandom > /etc/slurm/jwt.key
chown slurm:slurm /etc/slurm/slurm.key /etc/slurm/jwt.key
chmod 0600 /etc/slurm/slurm.key /etc/slurm/jwt.key
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=rec
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt.key
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SelectType=select/cons_tres
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
NodeName=compute-0 NodeHostname=$host CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=compute Nodes=compute-0 Default=YES MaxTime=INFINITE State=UP
CONF
echo CgroupPlugin=disabled > /etc/slurm/cgroup.conf
id slurmrestd >/dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin slurmrestd
systemctl start slurmctld slurmd
systemd-run --quiet --unit rec-slurmrestd --uid slurmrestd -E SLURM_JWT=daemon \
    /usr/sbin/slurmrestd -a rest_auth/jwt -s openapi/slurmctld 127.0.0.1:6820
"""

QUEUE = """
set -eu
cd /tmp
sbatch -J hold-both -c 2 -t 30 --wrap 'sleep 1800'
sbatch -J waits -c 2 -t 30 --wrap true
sbatch -J held -H --wrap true
sbatch -J later --begin=now+3600 --wrap true
scontrol create reservation ReservationName=maint StartTime=now+3600 Duration=60 \
    Nodes=compute-0 Users=root Flags=ignore_jobs
"""

GET = """
import json, sys, urllib.request
request = urllib.request.Request(
    "http://127.0.0.1:6820" + sys.argv[1],
    headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": sys.argv[2]},
)
with urllib.request.urlopen(request, timeout=30) as answer:
    sys.stdout.write(answer.read().decode())
"""


def scaling_view() -> Any:
    """The slurmctld charm's `scaling_view` module (the path the autoscaler's reading takes)."""
    name = "slurmctld_scaling_view"
    if name not in sys.modules:
        path = REPO / "charms/slurmctld/src/scaling_view.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def wait_for(what: str, probe: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


class Rest:
    """GETs on the machine's slurmrestd, as root with a fresh token."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        token = machine.exec(["scontrol", "token", "username=root", "lifespan=3600"], check=True)
        self.token = token.stdout.strip().partition("=")[2]

    def get(self, path: str) -> dict[str, Any]:
        answer = self.machine.exec(["python3", "-c", GET, path, self.token], check=True)
        return json.loads(answer.stdout)


@pytest.fixture(scope="module")
def rest(lab: Lab) -> Iterator[Rest]:
    """The machine, Slurm up, the queue made, slurmrestd answering."""
    machine = lab.create(MACHINE)
    try:
        machine.exec(["bash", "-c", SETUP], check=True, timeout=120)
        wait_for("compute-0 to register", lambda: _idle(machine))
        machine.exec(["bash", "-c", QUEUE], check=True)
        wait_for("job 1 to run and job 2 to wait for it", lambda: _queued(machine))
        yield wait_for("slurmrestd", lambda: _answering(machine))
    finally:
        lab.destroy(MACHINE)


def _idle(machine: Machine) -> bool | None:
    out = machine.exec(["sinfo", "-h", "-n", "compute-0", "-o", "%t"]).stdout.strip()
    return True if out == "idle" else None


def _queued(machine: Machine) -> bool | None:
    out = machine.exec(["squeue", "-h", "-j", "1,2", "-o", "%i %T %r"]).stdout.split("\n")
    return True if sorted(out[:2]) == ["1 RUNNING None", "2 PENDING Resources"] else None


def _answering(machine: Machine) -> Rest | None:
    try:
        rest = Rest(machine)
        rest.get("/openapi/v3")
    except Exception:
        return None
    return rest


def trimmed(document: dict[str, Any], endpoint: str, machine: Machine) -> dict[str, Any]:
    """The recording: the records and the meta that names the version; no host's details."""
    meta = document["meta"]
    kept = {
        "meta": {"plugin": meta["plugin"], "slurm": meta["slurm"]},
        "errors": document["errors"],
        "warnings": document.get("warnings", []),
        endpoint: document[endpoint],
    }
    text = json.dumps(kept, indent=1, sort_keys=True)
    text = text.replace(machine.address, ADDRESS).replace(machine.name, HOST)
    recorded = json.loads(text)
    for node in recorded.get("nodes", []):
        node["os"] = "Linux"
    return recorded


def test_every_offered_version_reads_as_the_same_queue(rest: Rest) -> None:
    spec = rest.get("/openapi/v3")
    offered = data_parser.offered_by_openapi(spec)
    chosen = data_parser.choose(offered)
    module = scaling_view()
    release = ""
    views: dict[str, Any] = {}
    recordings: dict[str, dict[str, Any]] = {}
    for version in offered:
        answers = {what: rest.get(f"/slurm/{version}/{what}/") for what in ENDPOINTS}
        release = answers["nodes"]["meta"]["slurm"]["release"]
        texts = [json.dumps(answers[what]) for what in ENDPOINTS]
        views[version] = module.view(*texts, ["compute"], int(time.time()), version=version)
        recordings |= {
            f"{version}-{what}.json": trimmed(answers[what], what, rest.machine)
            for what in ENDPOINTS
        }
    major = ".".join(release.split(".")[:2])
    expected = {"24.11": ("v0.0.40", "v0.0.42"), "26.05": ("v0.0.42", "v0.0.45")}[major]
    assert (offered[0], offered[-1]) == expected
    assert chosen == expected[1]
    first = views[offered[0]]
    for version, view in views.items():
        assert view["nodes"] == first["nodes"] or _same_but_time(view, first), version
        assert view["pending"] == first["pending"], version
        assert view["reserved"] == ["compute-0"], version
    assert {(s["example"], s["reason"]) for s in first["pending"]} == {
        (2, "Resources"),
        (3, "JobHeldUser"),
        (4, "BeginTime"),
    }
    if os.environ.get("RECORD_REST"):
        directory = RECORDED / major
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        paths = {"paths": {path: {} for path in sorted(spec["paths"])}}
        (directory / "openapi-paths.json").write_text(json.dumps(paths, indent=1) + "\n")
        for name, document in recordings.items():
            (directory / name).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def _same_but_time(view: dict[str, Any], other: dict[str, Any]) -> bool:
    """The nodes alike but for `last_busy`, which moves while the versions are read."""

    def without(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in node.items() if k != "last_busy"} for node in nodes]

    return without(view["nodes"]) == without(other["nodes"])
