"""Lab networking: a bridge in a namespace of its own, one namespace per machine.

Nothing here touches the host's network namespace: the bridge lives in the lab namespace, each
veth pair is created directly between the lab namespace and a machine namespace, and addresses
are only ever assigned inside those namespaces. No namespace gets a default route, so lab
machines reach each other and nothing else.
"""

from __future__ import annotations

from pathlib import Path

from slurm_lab.errors import LabError
from slurm_lab.proc import run

NETNS_DIR = Path("/run/netns")
BRIDGE = "br0"
MACHINE_IFACE = "eth0"
PREFIX_LEN = 24


def netns_exists(name: str) -> bool:
    """Whether the named network namespace (ip netns) exists."""
    return (NETNS_DIR / name).exists()


def netns_path(name: str) -> Path:
    """Return the bind-mount path nspawn joins with --network-namespace-path."""
    return NETNS_DIR / name


def list_netns(prefix: str) -> list[str]:
    """Named network namespaces whose name starts with prefix."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def _add_netns(name: str) -> None:
    if not netns_exists(name):
        run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def ensure_bridge(lab_ns: str) -> None:
    """Create the lab namespace with its bridge, if missing."""
    _add_netns(lab_ns)
    links = run(["ip", "-n", lab_ns, "-o", "link", "show"]).stdout
    if f" {BRIDGE}:" not in links:
        run(["ip", "-n", lab_ns, "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "-n", lab_ns, "link", "set", BRIDGE, "up"])


def attach(lab_ns: str, machine_ns: str, veth: str, address: str) -> None:
    """Create a machine's namespace and join it to the lab bridge with address/24 on eth0."""
    _add_netns(machine_ns)
    run(["ip", "-n", lab_ns, "link", "del", veth], check=False)
    run(
        [
            *("ip", "-n", lab_ns, "link", "add", veth, "type", "veth"),
            *("peer", "name", MACHINE_IFACE, "netns", machine_ns),
        ]
    )
    run(["ip", "-n", lab_ns, "link", "set", veth, "master", BRIDGE, "up"])
    run(["ip", "-n", machine_ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", MACHINE_IFACE])
    run(["ip", "-n", machine_ns, "link", "set", MACHINE_IFACE, "up"])


def ensure_address(name: str, cidr: str, device: str = BRIDGE) -> None:
    """Give `device` in namespace `name` the address `cidr`, if it does not have it yet."""
    shown = run(["ip", "-n", name, "-o", "addr", "show", "dev", device]).stdout
    if f" {cidr} " not in shown:
        run(["ip", "-n", name, "addr", "add", cidr, "dev", device])


def pids_in(name: str) -> list[int]:
    """Return the processes in the named network namespace (servers the lab runs there)."""
    if not netns_exists(name):
        return []
    wanted = netns_path(name).stat()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            current = (entry / "ns/net").stat()
        except OSError:
            continue
        if (current.st_dev, current.st_ino) == (wanted.st_dev, wanted.st_ino):
            found.append(int(entry.name))
    return found


def set_link(lab_ns: str, veth: str, *, up: bool) -> None:
    """Set a machine's veth (its end in the lab namespace) up or down: cut or restore its cable."""
    run(["ip", "-n", lab_ns, "link", "set", veth, "up" if up else "down"])


def link_is_up(lab_ns: str, veth: str) -> bool:
    """Whether a machine's veth in the lab namespace is administratively up."""
    out = run(["ip", "-n", lab_ns, "-o", "link", "show", veth], check=False).stdout
    flags = out.split("<", 1)[1].split(">", 1)[0].split(",") if "<" in out else []
    return "UP" in flags


def detach(lab_ns: str, machine_ns: str, veth: str) -> None:
    """Remove a machine's veth and namespace; missing pieces are fine."""
    if netns_exists(lab_ns):
        run(["ip", "-n", lab_ns, "link", "del", veth], check=False)
    delete_netns(machine_ns)


def delete_netns(name: str) -> None:
    """Delete a named namespace if it exists."""
    if netns_exists(name):
        result = run(["ip", "netns", "delete", name], check=False)
        if result.returncode != 0 and netns_exists(name):
            raise LabError(f"cannot delete network namespace {name}: {result.stderr.strip()}")


def lab_links(lab_ns: str) -> list[str]:
    """Interface names inside the lab namespace (for teardown checks)."""
    if not netns_exists(lab_ns):
        return []
    out = run(["ip", "-n", lab_ns, "-o", "link", "show"]).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
