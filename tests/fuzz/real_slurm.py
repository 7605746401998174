"""Collect rendered files during a hypothesis run; let the real Slurm judge them in one batch.

A test adds each example's files (`add`) with the input that produced them, and calls
`judge` once its examples ran: one chroot into the lab's cached base per batch
(`slurm_lab.slurmcheck`), so hundreds of files cost about a second. Identical cases are
judged once.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from slurm_lab import rootfs, slurmcheck


@dataclass
class RealSlurm:
    """The lab base's Slurm, or why it cannot be asked on this host (`missing`)."""

    base: Path | None
    missing: str | None
    checked: int = 0
    """Distinct cases judged so far (for the suite's counts)."""
    _required: bool = field(default=False)

    @classmethod
    def from_environment(cls) -> "RealSlurm":
        required = os.environ.get("FUZZ_REQUIRE_SLURM") == "1"
        missing = slurmcheck.available()
        base = None
        if missing is None:
            base = rootfs.cache_dir() / f"base-{rootfs.recipe_hash(rootfs.DEFAULT_SUITE)}"
            if not base.is_dir():
                if required:
                    base = rootfs.ensure_base()
                else:
                    missing = f"no cached lab base at {base} (`just lab-test` builds it)"
                    base = None
        return cls(base, missing, _required=required)

    def judge(self, batch: "Batch") -> list[tuple[object, str]]:
        """Return (input, Slurm's words) for every case Slurm refused; skip if Slurm is absent."""
        if not batch.cases:
            return []
        if self.base is None:
            if self._required:
                pytest.fail(f"the real-Slurm check cannot run: {self.missing}")
            pytest.skip(f"real-Slurm check skipped: {self.missing}")
        verdicts = slurmcheck.judge([dict(c) for c in batch.cases], self.base)
        self.checked += len(batch.cases)
        return [
            (batch.inputs[case], verdict.messages)
            for case, verdict in zip(batch.cases, verdicts, strict=True)
            if not verdict.accepted
        ]


@dataclass
class Batch:
    """Rendered cases (file name -> text) with the first input that produced each."""

    cases: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    inputs: dict[tuple[tuple[str, str], ...], object] = field(default_factory=dict)

    def add(self, files: Mapping[str, str], example: object) -> None:
        case = tuple(sorted(files.items()))
        if case not in self.inputs:
            self.inputs[case] = example
            self.cases.append(case)
