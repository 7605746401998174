"""One fuzzed surface: its seeds run first, then hypothesis draws; the checks every example gets.

`Surface.check` applies the suite's properties to one example's outcome:

1. no hook error (harness.run fails the example on an uncaught exception);
2. no injection: every rendered Slurm file keeps within the baseline's keys plus the keys the
   input names (`oracle.unintended`), and the daemons' command lines keep the baseline's shape
   (`oracle.command_line_problems`);
3. the rendered slurm.conf, slurmdbd.conf, gres.conf and cgroup.conf go to the batch that the
   real Slurm judges once the examples ran (`Surface.finish`).

Any failure fails the test, naming the surface.
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
from real_slurm import Batch, RealSlurm

SURFACE_COUNTS: Counter[str] = Counter()
"""Examples each surface ran (seeds included), by surface name."""
SEED_COUNTS: dict[str, int] = {}
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
"""The deep profile also runs every value of a surface's grammar corpus one by one."""


@dataclass
class Surface:
    """A surface's name, its baseline outcome (benign input), and the batch for real Slurm."""

    name: str
    baseline: Outcome | None = None
    batch: Batch = field(default_factory=Batch)

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
        """`example`, counting runs; a failure names the surface."""

        def run(value: Any) -> None:
            SURFACE_COUNTS[self.name] += 1
            try:
                example(value)
            except (AssertionError, pytest.fail.Exception) as e:
                raise AssertionError(f"{self.name}: {e}") from e

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
        """Have real Slurm judge the batch: every rendered file it refuses fails the test."""
        if real_slurm is None:
            return
        refused = [
            f"slurm refused: {words}\n  input: {short(example, 400)}"
            for example, words in real_slurm.judge(self.batch)
        ]
        assert not refused, f"{self.name}: Slurm refused accepted input:\n" + "\n".join(
            refused[:10]
        )
