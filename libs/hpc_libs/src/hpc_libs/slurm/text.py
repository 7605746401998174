"""Fix-ups of Slurm configuration text at the boundary with slurmutils.

slurmutils 1.3 types a few slurm.conf parameters as booleans but reads and writes them
with its default callback (a Python literal): it cannot read `Default=YES` ("'YES' is not
of type 'boolean'") and renders `True` as `default=True`. slurm.conf(5) documents these
parameters as `YES`/`NO`. So text going into slurmutils gets Slurm's boolean spellings
turned into Python literals, and text coming out gets them turned back into `YES`/`NO`.

Both directions work on `key=value` tokens found the way Slurm and slurmutils find them:
split at whitespace outside quotes, ignoring everything after `#`. Only the keys in
`YES_NO_KEYS` are touched, so quoted text and other parameters pass through unchanged.
"""

from collections.abc import Callable, Iterator

YES_NO_KEYS = frozenset(
    {
        # Partition parameters.
        "default",
        "disablerootjobs",
        "exclusivetopo",
        "exclusiveuser",
        "hidden",
        "lln",
        "powerdownonidle",
        "reqresv",
        "rootonly",
        # Global parameters (DisableRootJobs is both).
        "allowspecresourcesusage",
    }
)
"""slurm.conf parameters (lower case) that slurmutils types as booleans without a YES/NO
callback. A unit test checks this set against slurmutils' models."""

# The spellings Slurm's own boolean parser (s_p_handle_boolean) accepts, any case.
_TRUE_WORDS = frozenset({"yes", "up", "true", "1"})
_FALSE_WORDS = frozenset({"no", "down", "false", "0"})

KeyValueChange = Callable[[str, str], str]
"""Given a token's key and value, return the value to write in its place."""


def yes_no_as_literals(text: str) -> str:
    """Rewrite `Key=YES`/`Key=no`/... as `Key=True`/`Key=False` so slurmutils can parse it.

    Values Slurm would not accept are left as they are, for slurmutils to reject.
    """

    def change(key: str, value: str) -> str:
        if key.lower() not in YES_NO_KEYS:
            return value
        if value.lower() in _TRUE_WORDS:
            return "True"
        if value.lower() in _FALSE_WORDS:
            return "False"
        return value

    return change_values(text, change)


def literals_as_yes_no(text: str) -> str:
    """Rewrite slurmutils' `key=True`/`key=False` as `key=YES`/`key=NO`, as Slurm documents."""

    def change(key: str, value: str) -> str:
        if key.lower() in YES_NO_KEYS and value in ("True", "False"):
            return "YES" if value == "True" else "NO"
        return value

    return change_values(text, change)


def change_values(text: str, change: KeyValueChange) -> str:
    """Replace the value of every `key=value` token with `change(key, value)`."""
    return _rewrite(text, lambda key, value: f"{key}={change(key, value)}")


def _rewrite(text: str, token: Callable[[str, str], str]) -> str:
    """Rebuild `text` with each `key=value` token replaced; all other text is kept."""
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        pieces: list[str] = []
        done = 0
        for start, end in _token_spans(line):
            key, sep, value = line[start:end].partition("=")
            if sep:
                pieces += [line[done:start], token(key, value)]
                done = end
        lines.append("".join(pieces) + line[done:])
    return "".join(lines)


def _token_spans(line: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each whitespace-separated token before any `#`, quotes kept whole."""
    content = line.partition("#")[0]
    start: int | None = None
    quote = ""
    for index, char in enumerate(content):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
            start = index if start is None else start
        elif char.isspace():
            if start is not None:
                yield start, index
            start = None
        elif start is None:
            start = index
    if start is not None:
        yield start, len(content)
