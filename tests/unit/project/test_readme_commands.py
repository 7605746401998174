"""The README's two commands are real: each is a recipe of the justfile after the bootstrap,
and CI (`.ci/run`) runs exactly the test command, so what a new user types is what CI proves.
"""

import re
from pathlib import Path

REPO = Path(__file__).parents[3]
COMMANDS = ("bash tools/bootstrap.sh && just lab", "bash tools/bootstrap.sh && just test")


def recipes(justfile: str) -> set[str]:
    """The names of the justfile's recipes: a name at the start of a line, its parameters, `:`."""
    return set(re.findall(r"^([a-z][\w-]*)\b[^\n:]*:(?!=)", justfile, re.MULTILINE))


def ci_commands(script: str) -> list[str]:
    """The commands of a shell script: its lines without comments, blanks and `set`/`cd`."""
    lines = (line.split("#", 1)[0].strip() for line in script.split("\n"))
    return [line for line in lines if line]


def test_the_readme_shows_both_commands():
    readme = (REPO / "README.md").read_text()
    for command in COMMANDS:
        assert f"\n{command}\n" in readme, command


def test_each_command_is_a_recipe():
    names = recipes((REPO / "justfile").read_text())
    for command in COMMANDS:
        assert command.rsplit(" ", 1)[1] in names, command


def test_ci_bootstraps_then_runs_the_test_command():
    commands = ci_commands((REPO / ".ci" / "run").read_text())
    bootstrap, test = COMMANDS[1].split(" && ")
    assert commands.index(bootstrap) < commands.index(test)
    assert commands[-1] == test
