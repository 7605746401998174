"""Helpers for test_accounting_and_rest.py: shell on units, sacct, and an HTTP client for the
REST API that runs on a unit's machine (python3's standard library only, so any machine with
python3 runs it; the lab's base has curl too, for people). test_ha.py uses the same client to
watch the API across a controller failover (`start_watch`, `stop_watch`, `summarize_watch`).

Only the jubilant API is used, so the helpers work on real Juju and on the lab.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import time
from collections.abc import Callable
from typing import Any, TypeVar

import jubilant
from hpc_libs.slurm import data_parser

T = TypeVar("T")

CONTROLLER = "slurmctld/0"
LOGIN = "login/0"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
RECONFIGURE_LINE = "Processing Reconfiguration Request"
STARTED_LINE = "slurmctld version .* started on cluster"
CLIENT_PATH = "/root/rest_client.py"
WATCH_UNIT = "rest-watch"
"""The transient systemd unit the failover watch runs as on the client machine."""
WATCH_OUT = "/root/rest-watch.json"
WATCH_STOP = "/root/rest-watch.stop"


def poll(probe: Callable[[], T | None], *, timeout: float, interval: float = 2.0, what: str) -> T:
    """Call `probe` until it returns something other than None/False, within `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def sh(juju: jubilant.Juju, command: str, *, unit: str = CONTROLLER, wait: float = 120) -> str:
    """Run a shell command on a unit; return its stdout (TaskError if it fails)."""
    return juju.exec(command, unit=unit, wait=wait).stdout


def try_sh(juju: jubilant.Juju, command: str, *, unit: str = CONTROLLER) -> str | None:
    """Run a shell command on a unit; None if it fails."""
    try:
        return sh(juju, command, unit=unit)
    except jubilant.TaskError:
        return None


KEY_IDS = (
    "python3 -c '"
    'import json; print(" ".join(k["kid"] + ("*" if k.get("use") else "") '
    'for k in json.load(open("/etc/slurm/slurm.jwks"))["keys"]))'
    "'"
)
"""Print the key ids of /etc/slurm/slurm.jwks, `*` marking the signing one (never a key)."""


def key_ids(juju: jubilant.Juju, unit: str) -> str:
    """The auth key ids a unit holds (`slurm-1*`: one key, signing); `none` before any rotation."""
    return (
        try_sh(juju, f"test -f /etc/slurm/slurm.jwks && {KEY_IDS} || echo none", unit=unit) or ""
    ).strip()


def count_log_lines(juju: jubilant.Juju, pattern: str) -> int:
    """How many lines of slurmctld's log match the extended regex `pattern`."""
    out = sh(juju, f"grep -cE {shlex.quote(pattern)} {SLURMCTLD_LOG} || true")
    return int(out.strip() or 0)


def invocation(juju: jubilant.Juju, service: str, unit: str) -> str:
    """systemd's InvocationID of `service`: a new one for every start or restart."""
    return sh(juju, f"systemctl show -p InvocationID --value {service}", unit=unit).strip()


def slurm_config(juju: jubilant.Juju, key: str, *, unit: str = CONTROLLER) -> str | None:
    """One value of `scontrol show config` (what the running slurmctld uses)."""
    for line in sh(juju, "scontrol show config", unit=unit).splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    return None


def sbatch(juju: jubilant.Juju, script: str, *, unit: str = LOGIN, partition: str) -> str:
    """Submit `--wrap script` from `unit`; return the job id."""
    options = f"--parsable -p {partition} -N1 --mem=1 -o /dev/null"
    out = sh(juju, f"sbatch {options} --wrap {shlex.quote(script)}", unit=unit)
    return out.strip().split(";")[0]


def sacct_job(juju: jubilant.Juju, job_id: str, *, unit: str = LOGIN) -> dict[str, str] | None:
    """The job's allocation record in accounting (`sacct -X`), None while there is none."""
    out = try_sh(juju, f"sacct -X -n -P -j {job_id} -o JobID,State,ExitCode,User", unit=unit)
    for line in (out or "").splitlines():
        fields = line.strip().split("|")
        if len(fields) == 4 and fields[0] == job_id:
            return dict(zip(("job_id", "state", "exit_code", "user"), fields, strict=True))
    return None


def wait_sacct(
    juju: jubilant.Juju, job_id: str, *, timeout: float = 120, unit: str = LOGIN
) -> dict[str, str]:
    """Wait until sacct shows job `job_id` finished; return its record."""

    def finished() -> dict[str, str] | None:
        record = sacct_job(juju, job_id, unit=unit)
        done = record is not None and record["state"] not in ("PENDING", "RUNNING")
        return record if done else None

    return poll(finished, timeout=timeout, what=f"job {job_id} finished in sacct")


def job_state(juju: jubilant.Juju, job_id: str) -> str | None:
    """The job's state as slurmctld knows it (no accounting involved)."""
    out = try_sh(juju, f"scontrol show job {job_id} --oneliner")
    found = re.search(r"\bJobState=(\S+)", out or "")
    return found.group(1) if found else None


# The REST API, over HTTP from a lab machine.

CLIENT = r'''
"""A bounded HTTP client for the REST API tests (runs on a lab machine, stdlib only)."""
import ipaddress, json, os, sys, threading, time, urllib.error, urllib.parse, urllib.request

MAX_REQUESTS, MAX_WORKERS, MAX_SECONDS, MAX_WATCH_SECONDS = 5000, 64, 300, 900


def check(url):
    host = urllib.parse.urlsplit(url).hostname or ""
    if not ipaddress.ip_address(host).is_private:
        sys.exit(f"refusing {host}: not a lab address")


def request(url, body=None, timeout=30):
    """One request; an empty SLURM_USER or SLURM_TOKEN leaves its header out."""
    headers = {
        name: value
        for name, value in (
            ("X-SLURM-USER-NAME", os.environ.get("SLURM_USER", "")),
            ("X-SLURM-USER-TOKEN", os.environ.get("SLURM_TOKEN", "")),
        )
        if value
    }
    data = None
    if body is not None:
        data = body.encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, repr(e)


def load(url, total, workers, seconds):
    total, workers = min(total, MAX_REQUESTS), min(workers, MAX_WORKERS)
    deadline = time.monotonic() + min(seconds, MAX_SECONDS)
    lock, results, issued = threading.Lock(), [], [0]

    def work():
        while time.monotonic() < deadline:
            with lock:
                if issued[0] >= total:
                    return
                issued[0] += 1
            start = time.monotonic()
            status, _ = request(url)
            with lock:
                results.append((status, time.monotonic() - start))

    began = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    latencies = sorted(latency for _, latency in results)
    statuses = {}
    for status, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1

    def rank(p):  # nearest rank
        return latencies[max(0, -(-len(latencies) * p // 100) - 1)] * 1000 if latencies else None

    return {
        "requests": len(results), "statuses": statuses, "seconds": elapsed,
        "p50_ms": rank(50), "p99_ms": rank(99), "max_ms": rank(100),
    }


def watch(url, rate, seconds, out, stop):
    """GET url one request at a time, at most `rate` per second, until `stop` exists.

    Writes [start, end, status, detail] per request (wall-clock seconds) to `out`, at the end.
    """
    interval = 1 / min(max(rate, 0.1), 10)
    deadline = time.monotonic() + min(seconds, MAX_WATCH_SECONDS)
    records = []
    while time.monotonic() < deadline and not os.path.exists(stop):
        began, start = time.monotonic(), time.time()
        status, text = request(url, timeout=20)
        records.append([start, time.time(), status, "" if status == 200 else text[:300]])
        time.sleep(max(0.0, interval - (time.monotonic() - began)))
    with open(out + ".tmp", "w") as f:
        json.dump(records, f)
    os.replace(out + ".tmp", out)


mode, url = sys.argv[1], sys.argv[2]
check(url)
if mode == "load":
    print(json.dumps(load(url, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))))
elif mode == "watch":
    watch(url, float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6])
else:
    status, text = request(url, sys.stdin.read() if mode == "post" else None)
    print(json.dumps({"status": status, "body": text}))
'''


def install_client(juju: jubilant.Juju, unit: str = LOGIN) -> None:
    """Put the HTTP client on `unit` (python3 is in the base; nothing is installed)."""
    sh(juju, f"cat > {CLIENT_PATH} <<'EOF'\n{CLIENT}\nEOF\nchmod 0700 {CLIENT_PATH}", unit=unit)


def http(
    juju: jubilant.Juju,
    url: str,
    token: str,
    *,
    user: str = "root",
    body: dict[str, Any] | None = None,
    unit: str = LOGIN,
) -> tuple[int, Any]:
    """GET (or POST `body`) `url` from `unit` with the token headers; return status and body.

    The body is parsed as JSON when it is JSON.
    """
    mode = "post" if body is not None else "get"
    stdin = f" <<'EOF'\n{json.dumps(body)}\nEOF" if body is not None else ""
    command = (
        f"SLURM_USER={shlex.quote(user)} SLURM_TOKEN={shlex.quote(token)} "
        f"python3 {CLIENT_PATH} {mode} {shlex.quote(url)}{stdin}"
    )
    answer = json.loads(sh(juju, command, unit=unit))
    try:
        return answer["status"], json.loads(answer["body"])
    except ValueError:
        return answer["status"], answer["body"]


def load_test(
    juju: jubilant.Juju,
    url: str,
    token: str,
    *,
    total: int,
    workers: int,
    seconds: float,
    user: str = "root",
    unit: str = LOGIN,
) -> dict[str, Any]:
    """`total` GETs of `url` at concurrency `workers` (at most `seconds`); the latencies."""
    command = (
        f"SLURM_USER={shlex.quote(user)} SLURM_TOKEN={shlex.quote(token)} "
        f"python3 {CLIENT_PATH} load {shlex.quote(url)} {total} {workers} {seconds}"
    )
    return json.loads(sh(juju, command, unit=unit, wait=seconds + 60))


def api_version(openapi: dict[str, Any]) -> str:
    """The data_parser version to speak: the newest the spec offers that the product reads.

    $SLURM_REST_API_VERSION overrides it (it must be offered and known). An offer with no
    known version fails the test, naming both (`hpc_libs.slurm.data_parser`).
    """
    offered = data_parser.offered_by_openapi(openapi)
    return data_parser.choose(offered, os.environ.get("SLURM_REST_API_VERSION") or None)


def start_watch(
    juju: jubilant.Juju,
    url: str,
    token: str,
    *,
    rate: float,
    seconds: float,
    user: str = "root",
    unit: str = LOGIN,
) -> None:
    """Start GETting `url` from `unit` at most `rate` per second, in the background.

    It runs as a transient systemd unit until `stop_watch` (or `seconds`, at most 900).
    """
    argv = ["python3", CLIENT_PATH, "watch", url, str(rate), str(seconds), WATCH_OUT, WATCH_STOP]
    command = (
        f"rm -f {WATCH_OUT} {WATCH_STOP} && systemd-run --quiet --collect --unit {WATCH_UNIT} "
        f"-E SLURM_USER={shlex.quote(user)} -E SLURM_TOKEN={shlex.quote(token)} "
        f"{shlex.join(argv)}"
    )
    sh(juju, command, unit=unit)


def stop_watch(
    juju: jubilant.Juju, *, unit: str = LOGIN, timeout: float = 60
) -> list[tuple[float, float, int, str]]:
    """Stop the watch; its records: (start, end, HTTP status or 0, body if not 200)."""
    sh(juju, f"touch {WATCH_STOP}", unit=unit)
    text = poll(
        lambda: try_sh(juju, f"cat {WATCH_OUT}", unit=unit),
        timeout=timeout,
        interval=1,
        what="the REST watch to write its records",
    )
    return [(float(a), float(b), int(c), str(d)) for a, b, c, d in json.loads(text)]


def summarize_watch(
    records: list[tuple[float, float, int, str]], since: float, until: float | None = None
) -> dict[str, Any]:
    """What a client saw of the requests that ended from `since` (a fault) to `until`.

    Times are wall clock, as in the records. `errors`: answers other than 200 (0: no
    answer). `answered_again_s`: from `since` to the first success after the window's last
    failure (after `since` if none failed); None if none. `longest_gap_s`: the longest time
    between two successful answers, the later one in the window; `gap_began_s`: its start,
    from `since`. `slow`: (start from `since`, seconds, status) of each failed request or one
    longer than 2 s.
    """
    end = float("inf") if until is None else until
    window = [r for r in records if since <= r[1] < end]
    statuses: dict[str, int] = {}
    for _, _, status, _ in window:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    successes = [stop for _, stop, status, _ in records if status == 200]
    gap, gap_began = 0.0, since
    for before, after in itertools.pairwise(successes):
        if since <= after < end and after - before > gap:
            gap, gap_began = after - before, before
    failed = [stop for _, stop, status, _ in window if status != 200]
    again = next((s for s in successes if max(failed, default=since) < s < end), None)
    return {
        "requests": len(window),
        "statuses": statuses,
        "errors": len(failed),
        "answered_again_s": None if again is None else round(again - since, 1),
        "longest_gap_s": round(gap, 1),
        "gap_began_s": round(gap_began - since, 1),
        "slow": [
            (round(start - since, 1), round(stop - start, 1), status)
            for start, stop, status, _ in window
            if status != 200 or stop - start > 2
        ],
        "error_bodies": sorted({d[:160] for *_, status, d in window if status != 200})[:3],
    }
