"""Findings of issue 20 the suite reproduces and another branch is fixing.

A failure whose surface and message match an entry is expected until that branch is merged:
the test ends as xfail naming it (tests/fuzz/surface.py). Once the fix is on main the
failure stops and the test passes; then delete the entry (a stale entry changes nothing, but
`FUZZ_STRICT=1` shows whether it is still needed).
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """A finding: its id in issue 20, the branch fixing it, where and how it shows."""

    id: str
    owner: str
    surface: str
    """A regex the surface's name must match."""
    message: str
    """A regex the failure's message must match (searched)."""


KNOWN = (
    Finding(
        "#6 deep JSON raises RecursionError",
        "h-inputs",
        ".",
        r"RecursionError",
    ),
    Finding(
        "#7 slurm-conf-parameters values Slurm refuses",
        "h-grammar",
        r"slurmctld option slurm-conf-parameters",
        r"slurm refused: slurm\.conf: ",
    ),
    Finding(
        "#5 IPv6 scope ids accept any text; % and $ reach ExecStart unescaped",
        "h-inputs",
        r"ControllerData|slurmrestd option listen-address",
        r"_OPTIONS holds a quote, backslash, \$ or newline|systemd specifiers \['%|"
        r"--conf-server lists",
    ),
    Finding(
        "#9 garbled slurmd -C output is a hook error",
        "h-inputs",
        r"slurmd -C output",
        r"hook error",
    ),
    Finding(
        "#3 documented slurmdbd values pass the check, then error every hook",
        "h-grammar",
        r"slurmdbd option slurmdbd-conf-parameters",
        r"hook error .*ConfigError\(.invalid ",
    ),
    Finding(
        "#4 peer unit data reaches slurm.conf unchecked",
        "h-inputs",
        r"slurmctld-peer unit data",
        r"injection: .*slurmctldhost|slurm refused: slurm\.conf: .*SlurmctldHost|"
        r"slurm refused: slurm\.conf: .*(hostname|address)",
    ),
    Finding(
        "#13 partitions kept in peer memory rendered without PartitionName/Nodes",
        "h-inputs",
        r"slurmctld-peer app data",
        r"injection: .*unintended keys \{'(state|nodes|default)'|"
        r"slurm refused: slurm\.conf: .*"
        r"(unrecognized key: (state|nodes|default)|NodeSet|Partition)",
    ),
)


def match(surface: str, message: str) -> Finding | None:
    """The known finding a failure on `surface` is, or None."""
    for finding in KNOWN:
        if re.search(finding.surface, surface) and re.search(finding.message, message, re.S):
            return finding
    return None
