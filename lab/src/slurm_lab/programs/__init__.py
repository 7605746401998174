"""The lab's programs: shell scripts, unit files and Python run in machines, shipped as files.

Each program is a file beside this module, read with `importlib.resources` (package data of
`slurm_lab`), never text assembled in Python: values reach a shell program as its arguments
(`sh -c <program> <name> <arguments>`), so no value is ever read as shell syntax.
`tools/shellcheck_programs.py` (`just lint`) checks every `*.sh` here, as the charms' own.
"""

from __future__ import annotations

from importlib import resources


def text(name: str) -> str:
    """Return the text of the program file `name`."""
    return resources.files(__name__).joinpath(name).read_text()


def sh(name: str, *args: str) -> list[str]:
    """Return the argv that runs shell program `name` with `args` ($0 is its name)."""
    return ["sh", "-c", text(name), name, *args]
