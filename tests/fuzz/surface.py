"""One fuzzed surface: its seeds run first, then hypothesis draws; the checks every example gets.

`Surface.check` applies the suite's properties to one example's outcome:

1. no hook error (harness.run fails the example on an uncaught exception);
2. no injection: every rendered Slurm file keeps within the baseline's keys plus the keys the
   input names (`oracle.unintended`), and the daemons' command lines keep the baseline's shape
   (`oracle.command_line_problems`);
3. the rendered slurm.conf, slurmdbd.conf, gres.conf and cgroup.conf go to the batch that the
   real Slurm judges once the examples ran (`Surface.finish`).

A failure that matches a finding of issue 20 another branch is fixing (`known.KNOWN`) is
recorded, not raised, and the exploration goes on; the test then ends as xfail naming them,
and passes by itself once the fixes are merged. Any other failure fails the test.
`FUZZ_STRICT=1` raises the known ones too.
"""

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import oracle
import pytest
from harness import Outcome, short
from hypothesis import given
from hypothesis import strategies as st
from known import Finding, match
from real_slurm import Batch, RealSlurm

SURFACE_COUNTS: Counter[str] = Counter()
"""Examples each surface ran (seeds included), by surface name."""
SEED_COUNTS: dict[str, int] = {}
KNOWN_SEEN: dict[str, set[str]] = {}
"""The known findings each surface hit (by finding id)."""
STRICT = os.environ.get("FUZZ_STRICT") == "1"
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
"""The deep profile also runs every value of a surface's grammar corpus one by one."""


@dataclass
class Surface:
    """A surface's name, its baseline outcome (benign input), and the batch for real Slurm."""

    name: str
    baseline: Outcome | None = None
    batch: Batch = field(default_factory=Batch)
    known: dict[str, tuple[Finding, str]] = field(default_factory=dict)

    def check(
        self,
        outcome: Outcome,
        example: object,
        extra_keys: Iterable[str] = (),
        servers: int | None = None,
    ) -> None:
        """Apply the no-injection properties to `outcome`; queue its files for real Slurm."""
        assert self.baseline is not None
        base = oracle.conf_files(self.baseline.files)
        extra = list(extra_keys)
        rendered = oracle.conf_files(outcome.files)
        for name, text in rendered.items():
            beyond = oracle.unintended(text, base.get(name, ""), extra)
            assert not beyond, (
                f"injection: input {short(example)} put unintended keys {dict(beyond)} in "
                f"{name}:\n{text}"
            )
        problems = oracle.command_line_problems(outcome.files, self.baseline.files, servers)
        assert not problems, f"injection: input {short(example)}: {problems}"
        if rendered:
            self.batch.add(rendered, example)

    def guarded(self, example: Callable[[Any], None]) -> Callable[[Any], None]:
        """`example`, counting runs and recording (not raising) failures of known findings."""

        def run(value: Any) -> None:
            SURFACE_COUNTS[self.name] += 1
            try:
                example(value)
            except (AssertionError, pytest.fail.Exception) as e:
                self._known_or_raise(str(e), value)

        return run

    def run(
        self,
        seeds: Sequence[Any],
        strategy: st.SearchStrategy[Any],
        example: Callable[[Any], None],
        corpus: Sequence[Any] = (),
    ) -> None:
        """Run `example` on every seed, then on hypothesis' draws from `strategy`.

        `corpus` (values from Slurm's grammar, which `strategy` draws from too) is run one
        by one only in the deep profile.
        """
        SEED_COUNTS[self.name] = len(seeds) + len(corpus)
        guarded = self.guarded(example)
        for seed in [*seeds, *(corpus if DEEP else ())]:
            guarded(seed)
        given(strategy)(guarded)()

    def finish(self, real_slurm: RealSlurm | None = None) -> None:
        """Have real Slurm judge the batch; end as xfail if only known findings were hit."""
        if real_slurm is not None:
            unknown = []
            for example, words in real_slurm.judge(self.batch):
                try:
                    self._known_or_raise(
                        f"slurm refused: {words}\n  input: {short(example, 400)}", example
                    )
                except (AssertionError, pytest.fail.Exception) as e:
                    unknown.append(str(e))
            assert not unknown, f"{self.name}: Slurm refused accepted input:\n" + "\n".join(
                unknown[:10]
            )
        if self.known:
            KNOWN_SEEN[self.name] = set(self.known)
            pytest.xfail(
                "known findings, fixed on other branches: "
                + "; ".join(f"{f.id} ({f.owner}) e.g. {ex}" for f, ex in self.known.values())
            )

    def _known_or_raise(self, message: str, example: object) -> None:
        finding = match(self.name, message)
        if finding is None or STRICT:
            raise AssertionError(f"{self.name}: {message}")
        self.known.setdefault(finding.id, (finding, short(example, 80)))
