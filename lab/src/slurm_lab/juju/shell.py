"""The command line `juju exec` hands to the machine's shell, built the way juju builds it."""

from __future__ import annotations

from collections.abc import Sequence


def command_string(words: Sequence[str]) -> str:
    r"""Build the shell command `juju exec` runs for the words after `--`.

    One word is the command as is, so it can be a whole script (`"sinfo; squeue"`). Several
    words are joined with spaces; a word holding whitespace, `"`, `$` or `\` is put in double
    quotes with those three characters escaped, so the machine's shell reads it back as one
    word. Other shell syntax in a word (`;`, `|`, `*`, `'`) is left for that shell to act on.
    """
    if len(words) == 1:
        return words[0]
    return " ".join(_quote_word(word) for word in words)


def _quote_word(word: str) -> str:
    escaped = "".join(f"\\{c}" if c in '"$\\' else c for c in word)
    if escaped != word or any(c.isspace() for c in word):
        return f'"{escaped}"'
    return word
