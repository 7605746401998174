"""Read rendered files the way Slurm and systemd do, and compare them with what was intended.

`conf_keys` splits a Slurm configuration file as Slurm's parser does: a `#` starts a comment
(Slurm has no escape for it in these files), a trailing backslash continues the line, each
line is whitespace-separated `key=value` tokens (a double-quoted value may hold spaces). The
result counts every key (lower case). A file is free of injections when its keys are within
the baseline's (the same scenario rendered from benign input) plus the keys the input itself
names; a value holding a new line, `#`, `=` or a space can only add or remove keys.

Command lines are read as systemd reads them: `/etc/default/<daemon>` variables, split at
whitespace when expanded unbraced, and the drop-ins' `ExecStart=` lines, where `%` and `$` are
specifiers unless doubled.
"""

import json
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

CONF_FILES = ("slurm.conf", "slurmdbd.conf", "cgroup.conf", "gres.conf")
_TOKEN = re.compile(r'[^\s"]*"[^"]*"[^\s"]*|\S+')

T = TypeVar("T")


def logical_lines(text: str) -> list[str]:
    """The lines Slurm's parser sees: comments cut, continuations joined, blanks dropped."""
    joined = re.sub(r"\\\n", "", text)
    lines = []
    for raw in joined.split("\n"):
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def line_keys(line: str) -> list[str]:
    """The keys of one logical line, in order (a token without `=` counts as a key)."""
    return [token.partition("=")[0].lower() for token in _TOKEN.findall(line)]


def conf_keys(text: str) -> Counter[str]:
    """Every key of a Slurm configuration file, counted."""
    keys: Counter[str] = Counter()
    for line in logical_lines(text):
        keys.update(line_keys(line))
    return keys


def unintended(rendered: str, baseline: str, extra: Iterable[str] = ()) -> Counter[str]:
    """Keys `rendered` holds beyond the baseline's plus `extra` (the keys the input names)."""
    allowed = conf_keys(baseline) + Counter(key.lower() for key in extra)
    return conf_keys(rendered) - allowed


def conf_files(files: Mapping[str, str]) -> dict[str, str]:
    """The Slurm configuration files among rendered files, by name (`slurm.conf`, ...)."""
    found: dict[str, str] = {}
    for path, text in files.items():
        name = path.rsplit("/", 1)[-1]
        if name in CONF_FILES and "etc-slurm" not in path:
            found[name] = text
    return found


def environment_files(files: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """`/etc/default/<daemon>` files: each variable and its value (quotes removed)."""
    found: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        if path.startswith("etc/default/"):
            variables: dict[str, str] = {}
            for line in text.splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                name, _, value = line.partition("=")
                variables[name] = shlex.split(value)[0] if value.strip() else ""
            found[path] = variables
    return found


def exec_starts(files: Mapping[str, str]) -> dict[str, list[str]]:
    """The non-empty `ExecStart=` lines of each systemd drop-in, by path."""
    found: dict[str, list[str]] = {}
    for path, text in files.items():
        if path.startswith("etc/systemd/"):
            lines = [
                line.removeprefix("ExecStart=")
                for line in text.splitlines()
                if line.startswith("ExecStart=") and line != "ExecStart="
            ]
            if lines:
                found[path] = lines
    return found


def unescaped_specifiers(command: str, allowed: Iterable[str] = ()) -> list[str]:
    """`%x` and `$X` that systemd would expand in an ExecStart line, beyond `allowed` ones."""
    text = command
    for word in allowed:
        text = text.replace(word, "")
    text = text.replace("%%", "").replace("$$", "")
    return re.findall(r"%.|\$\{?[A-Za-z_]*\}?", text)


def command_line_problems(
    files: Mapping[str, str],
    baseline: Mapping[str, str],
    servers: int | None = None,
) -> list[str]:
    """What differs in the daemons' command lines from the baseline's shape.

    Every environment file holds the baseline's variables, each splitting into as many words
    as the baseline's (a value with a space would add an option); `--conf-server` lists at
    most `servers` controllers; an `ExecStart=` has as many words as the baseline's and no
    systemd specifier the baseline has not.
    """
    return _environment_problems(files, baseline, servers) + _exec_start_problems(files, baseline)


def _beside_baseline(
    read: Callable[[Mapping[str, str]], dict[str, T]],
    files: Mapping[str, str],
    baseline: Mapping[str, str],
) -> Iterator[tuple[str, T, T]]:
    """Each file `read` finds in both outcomes: its path, what it holds, the baseline's."""
    expected = read(baseline)
    for path, found in read(files).items():
        if path in expected:
            yield path, found, expected[path]


def _environment_problems(
    files: Mapping[str, str], baseline: Mapping[str, str], servers: int | None
) -> list[str]:
    problems: list[str] = []
    for path, variables, expected in _beside_baseline(environment_files, files, baseline):
        if set(variables) - set(expected):
            problems.append(f"{path}: new variables {sorted(set(variables) - set(expected))}")
        for name, value in variables.items():
            if any(c in value for c in "\n\"'\\$"):
                problems.append(f"{path}: {name} holds a quote, newline, backslash or $")
            if name in expected and name.endswith("_OPTIONS"):
                problems += _options_problems(path, name, value, expected[name], servers)
    return problems


def _options_problems(
    path: str, name: str, value: str, expected: str, servers: int | None
) -> list[str]:
    words, base_words = value.split(), expected.split()
    problems = []
    if len(words) != len(base_words):
        problems.append(f"{path}: {name} has words {words}, baseline {base_words}")
    if "--conf-server" in words[:-1] and servers is not None:
        listed = words[words.index("--conf-server") + 1].split(",")
        if len(listed) > servers:
            problems.append(f"{path}: --conf-server lists {listed} for {servers} controllers")
    return problems


def _exec_start_problems(files: Mapping[str, str], baseline: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    for path, lines, expected in _beside_baseline(exec_starts, files, baseline):
        if len(lines) != len(expected):
            problems.append(f"{path}: {len(lines)} ExecStart lines, baseline {len(expected)}")
            continue
        for line, base_line in zip(lines, expected, strict=True):
            if len(line.split()) != len(base_line.split()):
                problems.append(f"{path}: ExecStart {line!r} vs baseline {base_line!r}")
            allowed = unescaped_specifiers(base_line)
            extra = [x for x in unescaped_specifiers(line) if x not in allowed]
            if extra:
                problems.append(f"{path}: ExecStart {line!r} has systemd specifiers {extra}")
    return problems


def json_keys(raw: dict[str, str]) -> list[str]:
    """The keys of every object in a databag's fields (what the sender names as keys)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            found.extend(str(k) for k in value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for text in raw.values():
        try:
            walk(json.loads(text))
        except (ValueError, RecursionError):
            continue
    return found


def option_keys(text: str) -> list[str]:
    """Keys an option's `key=value` lines name (what the operator intends to set)."""
    keys = []
    for line in text.split("\n"):
        keys += [token.partition("=")[0] for token in line.split()]
    return keys
