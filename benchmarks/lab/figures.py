"""The measurements, each beside its comparator; every function returns a JSON-able dict.

Times are host monotonic seconds; Slurm's own job times are epoch seconds (1 s resolution).
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
from typing import Any

from slurm_lab.errors import LabError

from .cluster import (
    CHARMS,
    COMPUTE,
    CONTROLLER,
    LAB_OPTIONS,
    LOGIN,
    Bench,
    HookRun,
    host_memory_available_mib,
    machine_footprint,
    slurmd_options,
    slurmd_started,
    summary,
    timed,
)
from .watch import SLURM_CONF, ControllerWatch

ENLIST_TIMEOUT = 600
SLURM_KEY = "/etc/slurm/slurm.key"
CHARMS_OF_APPS = {
    "slurmctld": "slurmctld",
    "login": "sackd",
    "slurmdbd": "slurmdbd",
    "mysql": "mysql",
}
"""Applications that are not slurmd (every other application in the benchmark is)."""
COMPUTE_ENDPOINT = "slurmd"
"""The controller's endpoint the compute applications integrate with."""


def node_of(unit: str) -> str:
    """The Slurm node of a slurmd unit (`compute/3` -> `compute-3`)."""
    return unit.replace("/", "-")


# 1. Enlistment latency --------------------------------------------------------------------------


def bare_enlistment(bench: Bench, watch: ControllerWatch, index: int) -> dict[str, Any]:
    """The floor: a plain lab machine, slurm.key copied, `slurmd -Z` started by hand.

    Uses compute/0's own start options (controllers, hardware, partition feature), under
    the node name `bare-<index>`. The machine stays for `bare_departure`.
    """
    options = slurmd_options(bench, f"{COMPUTE}/0")
    key = bench.lab.host_path(bench.machine(CONTROLLER).name, SLURM_KEY).read_bytes()
    node = f"bare-{index}"
    started = time.monotonic()
    machine = bench.lab.create(f"bench-bare-{index}")
    booted = time.monotonic()
    machine.write_file(SLURM_KEY, key, 0o600)
    machine.exec(["chown", "slurm:slurm", SLURM_KEY], check=True)
    ready = time.monotonic()
    conf_server = options["SLURMD_OPTIONS"].split("--conf-server", 1)[1].split()[0]
    idle_footprint = machine_footprint(machine)  # not counted: the machine before slurmd
    slurmd_start, slurmd_start_wall = time.monotonic(), time.time()
    machine.exec(
        [
            "slurmd",
            "-Z",
            "-N",
            node,
            "--conf-server",
            conf_server,
            "--conf",
            options["SLURMD_CONF"],
        ],
        check=True,
    )
    watch.until(ControllerWatch.idle(node), timeout=ENLIST_TIMEOUT, what=f"{node} idle")
    idle = watch.seen(node).first_idle
    assert idle is not None
    return {
        "node": node,
        "machine": machine.name,
        "boot_s": round(booted - started, 2),
        "key_copy_s": round(ready - booted, 2),
        "slurm_s": round(idle - slurmd_start, 2),
        "total_s": round(ready - started + idle - slurmd_start, 2),
        "before_slurmd_s": ready - started,
        "slurmd_start_wall": slurmd_start_wall,
        "idle_machine": idle_footprint,
        "command": f"slurmd -Z -N {node} --conf-server {conf_server} --conf '<compute/0's>'",
    }


def charm_enlistment(bench: Bench, watch: ControllerWatch) -> dict[str, Any]:
    """`add_unit` on slurmd until the new node is idle in sinfo, split into its parts."""
    before = set(bench.juju.state.apps[COMPUTE].units)
    writes, reconfigures = watch.snapshot()
    started, wall = time.monotonic(), time.time()
    bench.juju.add_unit(COMPUTE)
    returned = time.monotonic()
    (unit,) = set(bench.juju.state.apps[COMPUTE].units) - before
    node = node_of(unit)
    watch.until(
        ControllerWatch.idle(node), timeout=ENLIST_TIMEOUT, what=f"{node} idle", tick=bench.tick
    )
    idle = watch.seen(node).first_idle
    assert idle is not None
    bench.wait_active()
    machine = bench.machine(unit)
    slurmd_start = slurmd_started(machine)
    if slurmd_start is not None and not started < slurmd_start < idle:
        slurmd_start = None  # restarted after registering: no clean split
    boot = bench.boots.boots.get(machine.name)
    hooks = [r for r in bench.hook_runs(unit) if r.ended <= wall + (idle - started) + 1]
    after_writes, after_reconfigures = watch.snapshot()
    return {
        "unit": unit,
        "total_s": round(idle - started, 2),
        "add_unit_returned_s": round(returned - started, 2),
        "boot_s": boot,
        "charm_until_slurmd_start_s": (
            round(slurmd_start - started - (boot or 0.0), 2) if slurmd_start else None
        ),
        "slurm_s": round(idle - slurmd_start, 2) if slurmd_start else None,
        "hooks_s": round(sum(r.seconds for r in hooks), 2),
        "hooks": [f"{r.hook} {r.seconds:.2f}" for r in hooks],
        "conf_writes": after_writes - writes,
        "reconfigures": after_reconfigures - reconfigures,
    }


def departure_floor(bench: Bench, watch: ControllerWatch, bare: dict[str, Any]) -> float:
    """By hand on the bare node: drain, stop slurmd, delete the node; seconds until gone."""
    node, machine = bare["node"], bench.lab.get(bare["machine"])
    started = time.monotonic()
    bench.sh(CONTROLLER, f"scontrol update nodename={node} state=drain reason=bench-lab")
    pid = machine.exec(["pidof", "slurmd"]).stdout.split()
    if pid:
        machine.exec(["kill", pid[0]])
    bench.sh(
        CONTROLLER,
        f"for i in $(seq 50); do scontrol delete nodename={node} && exit 0; sleep 0.2; done; "
        "exit 1",
    )
    watch.until(ControllerWatch.gone(node), timeout=120, what=f"{node} gone")
    gone = watch.seen(node).gone
    assert gone is not None
    bench.lab.destroy(machine.name)
    return round(gone - started, 2)


# 2. Controller work: the static-node method, by hand ---------------------------------------------


def _reconfigure(bench: Bench) -> tuple[float, float]:
    """`scontrol reconfigure`: seconds until it returns, and until slurmctld answers again."""
    started = time.monotonic()
    bench.sh(CONTROLLER, "scontrol reconfigure")
    returned = time.monotonic()
    bench.sh(
        CONTROLLER,
        "for i in $(seq 300); do scontrol ping | grep -q UP && sinfo >/dev/null 2>&1 && exit 0; "
        "sleep 0.1; done; exit 1",
    )
    return returned - started, time.monotonic() - started


def static_method(bench: Bench, watch: ControllerWatch, count: int) -> dict[str, Any]:
    """The older charms' way for `count` nodes: a NodeName line, then a reconfigure, per node.

    The lines name the slurmd units' own machines (NodeAddr) with their hardware, State=FUTURE
    so slurmctld leaves the running dynamic nodes alone. slurm.conf is restored byte for byte
    (and mtime) at the end, with one more reconfigure, which is not counted.
    """
    hardware = " ".join(
        word
        for word in slurmd_options(bench, f"{COMPUTE}/0")["SLURMD_CONF"].split()
        if not word.lower().startswith("feature")
    )
    units = sorted(bench.juju.state.apps[COMPUTE].units, key=lambda u: int(u.split("/")[1]))
    addresses = [bench.juju.state.units[u].address for u in units][:count]
    original = bench.sh(CONTROLLER, f"sha256sum {SLURM_CONF}").split()[0]
    at_start = _reconfigure(bench)  # the dynamic cluster as it is: nothing changed
    bench.sh(CONTROLLER, f"cp -p {SLURM_CONF} /root/slurm.conf.bench-lab")
    writes, reconfigures = watch.snapshot()
    returns: list[float] = []
    answers: list[float] = []
    try:
        for index, address in enumerate(addresses):
            line = f"NodeName=static-{index} NodeAddr={address} {hardware} State=FUTURE"
            bench.sh(CONTROLLER, f"echo {shlex.quote(line)} >> {SLURM_CONF}")
            returned, answered = _reconfigure(bench)
            returns.append(returned)
            answers.append(answered)
            time.sleep(1.5)  # let the watcher see this write apart from the next one
        after_writes, after_reconfigures = watch.snapshot()
    finally:
        bench.sh(CONTROLLER, f"cp -p /root/slurm.conf.bench-lab {SLURM_CONF}")
        _reconfigure(bench)
    restored = bench.sh(CONTROLLER, f"sha256sum {SLURM_CONF}").split()[0]
    return {
        "nodes": len(addresses),
        "conf_writes": after_writes - writes,
        "reconfigures": after_reconfigures - reconfigures,
        "reconfigure_return_s": summary(returns),
        "reconfigure_until_answering_s": summary(answers),
        "controller_seconds_total": round(sum(answers), 2),
        "reconfigure_dynamic_cluster_s": {
            "returns": round(at_start[0], 2),
            "answering": round(at_start[1], 2),
        },
        "restored": restored == original,
    }


# 3. Scale-in -----------------------------------------------------------------------------------


def _job(bench: Bench, job_id: str) -> dict[str, Any]:
    out = bench.sh(CONTROLLER, f"scontrol show job {job_id} --json")
    return json.loads(out)["jobs"][0]


def _slurmd_journal(bench: Bench, machine: str) -> str:
    """slurmd's last journal lines on a machine ("" once the machine is gone)."""
    try:
        return (
            bench.lab.get(machine)
            .exec(
                ["journalctl", "-u", "slurmd", "-n", "6", "--no-pager", "-o", "short-precise"],
                timeout=10,
            )
            .stdout
        )
    except LabError:
        return ""


def scale_in(bench: Bench, watch: ControllerWatch, unit: str, job_seconds: int) -> dict[str, Any]:
    """`remove_unit` until the node is gone from sinfo; with a job of `job_seconds` if > 0."""
    node = node_of(unit)
    job_id = None
    if job_seconds:
        job_id = bench.sh(
            CONTROLLER,
            f"sbatch --parsable -p {COMPUTE} -w {node} -N1 --mem=1 -o /dev/null "
            f"--wrap 'sleep {job_seconds}'",
        ).strip()
        bench.sh(
            CONTROLLER,
            f'for i in $(seq 300); do [ "$(squeue -h -j {job_id} -o %T)" = RUNNING ] && exit 0;'
            " sleep 0.2; done; exit 1",
        )
    machine = bench.juju.state.units[unit].machine
    started, wall = time.monotonic(), time.time()
    bench.juju.remove_unit(unit)
    returned = time.monotonic()
    watch.until(
        ControllerWatch.gone(node), timeout=job_seconds + 600, what=f"{node} gone", tick=bench.tick
    )
    seen = watch.seen(node)
    assert seen.gone is not None and seen.gone_wall is not None
    deadline = time.monotonic() + 900
    journal = ""
    while machine in {m.name for m in bench.lab.machines()} and time.monotonic() < deadline:
        journal = _slurmd_journal(bench, machine) or journal  # the last before it went
        bench.tick()  # the departure hooks run on in the background; results apply here
    machine_gone = time.monotonic()
    result: dict[str, Any] = {
        "unit": unit,
        "remove_unit_returned_s": round(returned - started, 2),
        "node_gone_s": round(seen.gone - started, 2),
        "machine_gone_s": round(machine_gone - started, 2),
        "departure_hooks": [
            f"{r.hook} {r.seconds:.2f}"
            for r in bench.hook_runs()
            if r.unit == unit and r.ended >= wall - 1
        ],
        "slurmd_journal_tail": journal.splitlines(),
    }
    if job_id is not None:
        record = _job(bench, job_id)
        end = record["end_time"]["number"]
        state = record["job_state"]
        result.update(
            {
                "job_seconds": job_seconds,
                "job_state": ",".join(state) if isinstance(state, list) else str(state),
                "after_job_end_s": round(seen.gone_wall - end, 2),
            }
        )
    return result


# 5. Throughput ----------------------------------------------------------------------------------

SUBMIT_SCRIPT = """
n={jobs}; fails=0
start=$(date +%s.%N)
for i in $(seq $n); do
  sbatch --parsable -p {partition} -N1 --mem=1 -o /dev/null --wrap /bin/true >/dev/null 2>&1 \
    || fails=$((fails+1))
done
end=$(date +%s.%N)
echo $start $end $fails
"""


def throughput(bench: Bench, jobs: int) -> dict[str, Any]:
    """`jobs` sbatch calls of /bin/true from the login node, one after the other."""
    in_memory = bench.sh(CONTROLLER, "squeue -h -t all -o %i | wc -l").strip()
    out = bench.sh(LOGIN, SUBMIT_SCRIPT.format(jobs=jobs, partition=COMPUTE), timeout=3600)
    start, end, fails = out.split()
    submitted = jobs - int(fails)
    bench.sh(
        CONTROLLER,
        'for i in $(seq 12000); do out=$(squeue -h -o %i) && [ -z "$out" ] && exit 0; '
        "sleep 0.1; done; exit 1",
        timeout=1500,
    )
    done = time.time()
    states = bench.sh(CONTROLLER, "squeue -h -t all -o %T | sort | uniq -c")
    return {
        "jobs": jobs,
        "submitted": submitted,
        "submit_s": round(float(end) - float(start), 2),
        "submissions_per_s": round(submitted / (float(end) - float(start)), 1),
        "all_complete_s": round(done - float(start), 2),
        "completed_per_s": round(submitted / (done - float(start)), 1),
        "final_states": " ".join(states.split()),
        "jobs_in_memory_before": int(in_memory or 0),
        "nodes": len(bench.sh(CONTROLLER, f"sinfo -h -N -p {COMPUTE} -o %N").split()),
    }


def wait_jobs_purged(bench: Bench, limit: float = 330) -> float:
    """Wait (at most `limit` s) until slurmctld forgot ended jobs (MinJobAge, 300 s)."""
    started = time.monotonic()
    bench.sh(
        CONTROLLER,
        f'for i in $(seq {int(limit)}); do [ -z "$(squeue -h -t all -o %i)" ] && exit 0; '
        "sleep 1; done; exit 0",
        timeout=limit + 60,
    )
    return round(time.monotonic() - started, 1)


def add_accounting(bench: Bench) -> dict[str, Any]:
    """slurmdbd with the lab's MySQL stand-in, integrated with slurmctld; seconds to active."""
    started = time.monotonic()
    bench.juju.deploy("mysql", "mysql")
    bench.juju.deploy(CHARMS / "slurmdbd", "slurmdbd", config=LAB_OPTIONS)
    bench.juju.integrate("slurmdbd:database", "mysql:database")
    bench.juju.integrate("slurmctld:slurmdbd", "slurmdbd:slurmctld")
    bench.wait_active(timeout=300, blocked_for=90)
    storage = bench.sh(CONTROLLER, "scontrol show config | grep -i '^AccountingStorageType'")
    return {
        "active_s": round(time.monotonic() - started, 1),
        "accounting_storage": storage.split("=")[-1].strip(),
    }


def use_network_state(bench: Bench) -> dict[str, Any]:
    """slurmctld's state moved to the filesystem-client stand-in's share (use-network-state).

    On the lab the "shared filesystem" is a bind mount of a host directory: no network in the
    way, so this measures the charm's set-up, not NFS latency.
    """
    started = time.monotonic()
    bench.juju.deploy("filesystem-client", "state-fs")
    bench.juju.integrate("slurmctld:mount", "state-fs:mount")
    bench.juju.config("slurmctld", {"use-network-state": True})
    bench.wait_active(timeout=300, blocked_for=90)
    location = bench.sh(CONTROLLER, "scontrol show config | grep -i '^StateSaveLocation'")
    return {
        "active_s": round(time.monotonic() - started, 1),
        "state_save_location": location.split("=")[-1].strip(),
    }


def accounted_jobs(bench: Bench) -> int:
    """How many jobs slurmdbd recorded (sacct on the controller, last hour)."""
    out = bench.sh(CONTROLLER, "sacct -a -X -n -P -S now-1hours -o JobID | wc -l")
    return int(out.strip() or 0)


# 6. Hook cost ------------------------------------------------------------------------------------


def config_changed(bench: Bench, max_node_count: int) -> dict[str, Any]:
    """slurmctld's config-changed for a `max-node-count` change (slurm.conf + reconfigure)."""

    def runs() -> list[HookRun]:
        return [r for r in bench.hook_runs(CONTROLLER) if r.hook == "config-changed"]

    before = len(runs())
    call = timed(lambda: bench.juju.config("slurmctld", {"max-node-count": max_node_count}))
    bench.wait_active()
    new = runs()[before:]
    partitions = bench.sh(CONTROLLER, "sinfo -h -o %R").split()
    return {
        "partitions": len(partitions),
        "hook_s": new[-1].seconds if new else None,
        "config_call_s": round(call, 2),
    }


def add_partitions(bench: Bench, count: int) -> float:
    """`count` more slurmd applications of one unit each, integrated; seconds until active."""
    started = time.monotonic()
    for index in range(1, count + 1):
        name = f"part{index}"
        bench.juju.deploy(CHARMS / "slurmd", name, config=LAB_OPTIONS)
        bench.juju.integrate("slurmctld:slurmd", f"{name}:slurmctld")
    bench.wait_active()
    return round(time.monotonic() - started, 2)


def hook_costs(runs: list[HookRun]) -> dict[str, dict[str, dict[str, Any]]]:
    """Wall time of each hook of each charm: median, max, count."""
    grouped: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        charm = CHARMS_OF_APPS.get(run.app, "slurmd")
        grouped.setdefault(charm, {}).setdefault(run.hook, []).append(run.seconds)
    return {
        charm: {hook: summary(values) for hook, values in sorted(hooks.items())}
        for charm, hooks in sorted(grouped.items())
    }


# 6c. Hook tools: a Python process per tool call (before) or one server per hook (after) ------

#: bench-lab's before and after: `Controller.serve_tools` off, then on.
TOOL_MODES = {"per_call": False, "served": True}
#: The hooks the comparison names (every hook of the compute units is kept).
MEASURED_HOOKS = ("install", "slurmctld-relation-changed", "update-status")


def _last_update_status(bench: Bench, units: list[str]) -> list[float]:
    """Seconds of each unit's latest update-status."""
    latest: dict[str, float] = {}
    for run in bench.hook_runs():
        if run.unit in units and run.hook == "update-status":
            latest[run.unit] = run.seconds
    return list(latest.values())


def hook_tools(bench: Bench, watch: ControllerWatch, rounds: int) -> dict[str, Any]:
    """Enlistment and hook cost under each hook-tool runtime, in turns on the same cluster.

    `per_call` starts Python for every tool call (the runtime before the tool server);
    `served` answers each hook's calls from one server (`slurm_lab.juju.jujuc.serve`). Each
    round adds one slurmd unit per mode (enlistment as figure 1; every hook the new unit ran
    until all were active is that mode's) and fires update-status on every compute unit per
    mode; the modes alternate so that the cluster's growth weighs on both. One bare
    `slurmd -Z` floor runs first, on the same controller.
    """
    bare = bare_enlistment(bench, watch, 100)
    bare["departure_s"] = departure_floor(bench, watch, bare)
    modes: dict[str, dict[str, Any]] = {
        mode: {"enlistment": [], "update_status": []} for mode in TOOL_MODES
    }
    try:
        for _ in range(rounds):
            for mode, served in TOOL_MODES.items():
                bench.juju.ctl.serve_tools = served
                enlisted = charm_enlistment(bench, watch)
                enlisted["setup_hooks"] = [
                    f"{r.hook} {r.seconds:.2f}"
                    for r in bench.hook_runs()
                    if r.unit == enlisted["unit"]
                ]
                modes[mode]["enlistment"].append(enlisted)
            for mode, served in TOOL_MODES.items():
                bench.juju.ctl.serve_tools = served
                units = sorted(bench.juju.state.apps[COMPUTE].units)
                bench.juju.update_status(*units)
                bench.wait_active()
                modes[mode]["update_status"] += _last_update_status(bench, units)
    finally:
        bench.juju.ctl.serve_tools = True
    for found in modes.values():
        hooks: dict[str, list[float]] = {"update-status": found.pop("update_status")}
        for enlisted in found["enlistment"]:
            for entry in enlisted["setup_hooks"]:
                hook, seconds = entry.rsplit(" ", 1)
                hooks.setdefault(hook, []).append(float(seconds))
        found["hooks"] = {hook: summary(values) for hook, values in sorted(hooks.items())}
        total = summary([e["total_s"] for e in found["enlistment"]])
        found["enlistment_s"] = total
        found["ratio_to_bare"] = (
            round(total["median"] / bare["total_s"], 2) if total["median"] else None
        )
    return {"bare": bare, "modes": modes, "measured_hooks": list(MEASURED_HOOKS)}


# 7. Scale ----------------------------------------------------------------------------------------


def controller_load(bench: Bench) -> dict[str, Any]:
    """slurmctld's RSS and `sinfo` latency (median of 5, timed in the controller)."""
    rss = bench.sh(CONTROLLER, "ps -C slurmctld -o rss= | awk '{r+=$1} END {print r}'")
    latencies = bench.sh(
        CONTROLLER,
        "for i in 1 2 3 4 5; do s=$(date +%s%N); sinfo >/dev/null; e=$(date +%s%N); "
        "echo $(( (e-s)/1000 )); done",
    )
    return {
        "slurmctld_rss_mib": round(int(rss.strip() or 0) / 1024, 1),
        "sinfo_ms": round(statistics.median(int(x) / 1000 for x in latencies.split()), 1),
    }


def controller_hooks(
    runs: list[HookRun], since: float, until: float, added: int
) -> dict[str, Any]:
    """The controller's hooks (`runs`, its log's) that ended between two epoch times, per node
    added then.

    The units' logs stamp a hook's end to the second, so a hook that ended in the second a step
    began may count in both steps. Relation hooks are the ones an added unit causes on the
    leader (`slurmd-relation-*`); the others are the controller's own (update-status...).
    """
    ended = [r for r in runs if int(since) <= r.ended <= until]
    relation = [r for r in ended if r.hook.startswith(f"{COMPUTE_ENDPOINT}-relation-")]
    per_node = max(added, 1)
    return {
        "controller_hooks": len(ended),
        "controller_hook_s_per_node": round(sum(r.seconds for r in ended) / per_node, 2),
        "controller_relation_hooks_per_node": round(len(relation) / per_node, 2),
        "controller_relation_hook_s_per_node": round(
            sum(r.seconds for r in relation) / per_node, 2
        ),
    }


def scale_step(bench: Bench, watch: ControllerWatch, count: int) -> dict[str, Any]:
    """Add `count` slurmd units at once; wait until their nodes are idle; what it cost,
    the controller's hooks in that time included (they must not grow with the node count)."""
    before = set(bench.juju.state.apps[COMPUTE].units)
    writes, reconfigures = watch.snapshot()
    started, started_epoch = time.monotonic(), time.time()
    bench.juju.add_unit(COMPUTE, num_units=count)
    new = sorted(set(bench.juju.state.apps[COMPUTE].units) - before)
    for unit in new:
        watch.until(
            ControllerWatch.idle(node_of(unit)),
            timeout=ENLIST_TIMEOUT,
            what=f"{node_of(unit)} idle",
            tick=bench.tick,
        )
    bench.wait_active()
    after_writes, after_reconfigures = watch.snapshot()
    nodes = len(watch.states)
    return {
        "nodes": nodes,
        "added": len(new),
        "step_s": round(time.monotonic() - started, 2),
        "conf_writes": after_writes - writes,
        "reconfigures": after_reconfigures - reconfigures,
        "host_mem_available_mib": host_memory_available_mib(),
        **controller_load(bench),
        **controller_hooks(bench.hook_runs(CONTROLLER), started_epoch, time.time(), len(new)),
    }
