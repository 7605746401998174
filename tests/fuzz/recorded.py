"""Slurm's answers recorded on the lab while users' jobs forged lines: the parsers' seeds.

`tests/slurm/test_hostile_output.py` has an unprivileged user submit jobs whose comment, name
and account hold new lines (and U+2028, `|`) forging records that name root's job, then runs
the product's queries on real Slurm 24.11; `SLURM_OUTPUT_RECORD=tests/fuzz/slurm_output`
keeps each answer here, as Slurm printed it (it lowercases accounts and drops a CR).
"""

from pathlib import Path

FOLDER = Path(__file__).parent / "slurm_output"


def lines(name: str) -> tuple[str, ...]:
    """The non-empty lines of one recorded answer, split on new lines only."""
    text = (FOLDER / f"{name}.txt").read_text()
    return tuple(line for line in text.split("\n") if line)
