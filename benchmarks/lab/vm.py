"""Figure 11 (`--vm` only): what a VM machine costs here, and enlistment on one.

A slurmd application `compute-vm` on VMs (`virt-type=virtual-machine`: qemu under software
emulation, 2 vCPUs, 1 GiB; lab/README.md) joins the benchmark's slurmctld. Its one unit,
from `add_unit`, gives:

- the VM's boot: `add_unit` to the start of the unit's first hook (the hook log's one-second
  stamps), and the lab's own boot time (qemu's start to the guest's systemd up);
- enlistment: `add_unit` to the node idle in slurmctld's view (the benchmark's watcher);
- its cost on the host once idle: qemu's resident memory and CPU over `IDLE_SECONDS`.

Its comparator is a bare `slurmd -Z` on the same kind of VM (`Lab.create(name, "vm")`, the
key copied, slurmd started by hand with the charm unit's own options under another node
name), timed as figure 1's floor: boot, key copy, slurmd start to idle.

The controller runs `process-isolation=none` (the benchmark's), so these VMs run slurmd
without the cgroup plugins: enlistment, not confinement (tests/integration/test_vm_defaults.py).
Both VMs are removed at the end (each takes a host core).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from slurm_lab.machines import Machine

from .cluster import CHARMS, CONTROLLER, LAB_OPTIONS, SETTLE, Bench, slurmd_options
from .figures import ENLIST_TIMEOUT, SLURM_KEY, node_of
from .watch import ControllerWatch

APP = "compute-vm"
BARE = "bench-bare-vm"
IDLE_SECONDS = 30.0
"""How long qemu's idle CPU is sampled."""
CLOCK_TICKS = 100
"""/proc/<pid>/stat's utime and stime unit (USER_HZ)."""


def qemu_cost(machine: Machine, seconds: float = IDLE_SECONDS) -> dict[str, float]:
    """A VM's qemu on the host: resident memory and CPU over `seconds` (percent of a core)."""
    pid = machine.init_pid
    if not pid:
        raise RuntimeError(f"{machine.name}: no qemu runs")

    def cpu_ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    first, started = cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    used, elapsed = cpu_ticks() - first, time.monotonic() - started
    status = Path(f"/proc/{pid}/status").read_text().split("\n")
    rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "qemu_rss_mib": round(rss_kib / 1024, 1),
        "qemu_cpu_percent_of_one_core": round(100 * used / CLOCK_TICKS / elapsed, 1),
        "sampled_s": round(elapsed, 1),
    }


def charm_on_vm(bench: Bench, watch: ControllerWatch) -> dict[str, Any]:
    """`compute-vm` deployed and related, then one `add_unit`: boot, first hook, idle."""
    juju = bench.juju
    juju.deploy(
        CHARMS / "slurmd",
        APP,
        config=LAB_OPTIONS,
        constraints={"virt-type": "virtual-machine"},
        num_units=0,
    )
    juju.integrate("slurmctld:slurmd", f"{APP}:slurmctld")
    bench.wait_active()
    started, wall = time.monotonic(), time.time()
    juju.add_unit(APP)
    (unit,) = juju.state.apps[APP].units
    node = node_of(unit)
    watch.until(
        ControllerWatch.idle(node), timeout=ENLIST_TIMEOUT, what=f"{node} idle", tick=bench.tick
    )
    idle = watch.seen(node).first_idle
    assert idle is not None
    bench.wait_active()
    machine = bench.machine(unit)
    hooks = sorted(bench.hook_runs(unit), key=lambda r: r.ended)
    first_hook = hooks[0].ended - hooks[0].seconds - wall if hooks else None
    return {
        "unit": unit,
        "machine": machine.name,
        "boot_s": _rounded(bench.boots.boots.get(machine.name)),
        "to_first_hook_s": round(first_hook, 1) if first_hook is not None else None,
        "first_hook": hooks[0].hook if hooks else None,
        "enlistment_s": round(idle - started, 2),
        "idle": qemu_cost(machine),
    }


def bare_on_vm(bench: Bench, watch: ControllerWatch, unit: str) -> dict[str, Any]:
    """A bare VM, the key copied, `slurmd -Z` with `unit`'s options: figure 1's floor."""
    options = slurmd_options(bench, unit)
    node_conf = options["SLURMD_CONF"]
    conf_server = options["SLURMD_OPTIONS"].split("--conf-server", 1)[1].split()[0]
    key = bench.lab.host_path(bench.machine(CONTROLLER).name, SLURM_KEY).read_bytes()
    node = "bare-vm"
    started = time.monotonic()
    machine = bench.lab.create(BARE, "vm")
    booted = time.monotonic()
    machine.write_file(SLURM_KEY, key, 0o600)
    machine.exec(["chown", "slurm:slurm", SLURM_KEY], check=True)
    ready = time.monotonic()
    argv = ["slurmd", "-Z", "-N", node, "--conf-server", conf_server, "--conf", node_conf]
    slurmd_start = time.monotonic()
    machine.exec(argv, check=True)
    watch.until(ControllerWatch.idle(node), timeout=ENLIST_TIMEOUT, what=f"{node} idle")
    idle = watch.seen(node).first_idle
    assert idle is not None
    return {
        "node": node,
        "boot_s": round(booted - started, 2),
        "key_copy_s": round(ready - booted, 2),
        "slurm_s": round(idle - slurmd_start, 2),
        "total_s": round(ready - started + idle - slurmd_start, 2),
        "command": f"slurmd -Z -N {node} --conf-server {conf_server} --conf '<{unit}'s>'",
    }


def remove(bench: Bench, unit: str, node: str) -> None:
    """Both VMs gone (each takes a host core); the bare node deleted from slurmctld."""
    bench.lab.destroy(BARE)
    bench.sh(CONTROLLER, f"scontrol delete nodename={node} || true")
    bench.juju.remove_unit(unit)
    bench.juju.wait(lambda status: not status.apps[APP].units, timeout=SETTLE)
    bench.wait_active()


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def vm_figure(bench: Bench, watch: ControllerWatch) -> dict[str, Any]:
    """Figure 11: the charm's unit on a VM beside a bare `slurmd -Z` on a VM."""
    charm = charm_on_vm(bench, watch)
    try:
        bare = bare_on_vm(bench, watch, charm["unit"])
    finally:
        remove(bench, charm["unit"], "bare-vm")
    charm["enlistment_over_bare"] = (
        round(charm["enlistment_s"] / bare["total_s"], 2) if bare["total_s"] else None
    )
    return {"charm": charm, "bare": bare}
