"""The RebootProgram this unit's node runs for a rebuild (see reboot-program.sh).

slurmctld's charm names `REBOOT_PROGRAM` in slurm.conf; this charm installs the program
shipped with it there, root-owned (slurmd runs it as root, so no less trusted user may
write it or its directory), with the node's Slurm name beside it: slurmd passes the program
no argument, and the program asks Slurm about the rebuild job of this node.
"""

from pathlib import Path

from hpc_libs.machine import files
from hpc_libs.slurm.base import REBOOT_PROGRAM

SOURCE = Path(__file__).parent / "programs/reboot-program.sh"
SETTINGS = "etc/default/slurmd-charm-reboot"  # under the machine's root; read by the program


def install(root: Path, node_name: str) -> bool:
    """Install the program and the node's name; return whether either changed."""
    program = files.write_if_changed(
        root / REBOOT_PROGRAM.lstrip("/"), SOURCE.read_bytes(), mode=0o755
    )
    settings = files.write_if_changed(root / SETTINGS, f"NODE_NAME={node_name}\n", mode=0o644)
    return program or settings
