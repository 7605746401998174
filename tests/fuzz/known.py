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


KNOWN: tuple[Finding, ...] = ()
"""Empty since h-grammar and h-inputs were merged: the suite found issue 20's findings 3, 4, 5,
6, 7, 9 and 13 on ebe3e40 (each test ended xfail naming them) and passes with their fixes."""


def match(surface: str, message: str) -> Finding | None:
    """The known finding a failure on `surface` is, or None."""
    for finding in KNOWN:
        if re.search(finding.surface, surface) and re.search(finding.message, message, re.S):
            return finding
    return None
