"""Slurm's data_parser versions: which one a client speaks, and refusing answers in another.

slurmrestd serves several data_parser versions side by side (`/slurm/v0.0.42/nodes/`), and
`scontrol ... --json=v0.0.42` prints any its Slurm has. Each release adds one and drops old
ones, so a client that pins one breaks on the next release but one:

| Slurm | offered             | used here | how known                                   |
|-------|---------------------|-----------|---------------------------------------------|
| 24.11 | v0.0.40 to v0.0.42  | v0.0.42   | the lab's slurmrestd and scontrol (trixie)  |
| 25.11 | v0.0.41 to v0.0.44  | v0.0.44   | SchedMD's release notes (not run on the lab)|
| 26.05 | v0.0.42 to v0.0.45  | v0.0.45   | the lab's slurmrestd and scontrol (forky)   |

A client reads the offer once (the paths of `/openapi/v3`, or `--json=list`) and uses the
newest version in KNOWN (`choose`); an override must be offered and known too. An answer that
names another version than the one asked for is refused (`check_answer`), and so is an offer
with no known version: the fields of an unknown version may mean something else, and a wrong
number must never reach a decision.
"""

import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

KNOWN = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
"""The versions whose answers the product's parsers were checked against, oldest first."""

_VERSION = re.compile(r"v0\.0\.(\d{1,4})")
_OPENAPI_PATH = re.compile(r"/slurm(?:db)?/(v0\.0\.\d{1,4})/")
_PLUGIN = re.compile(r"data_parser/(v0\.0\.\d{1,4})")


class DataParserError(ValueError):
    """No usable version is offered, or an answer is in another version than asked for."""


def _number(version: str) -> int:
    found = _VERSION.fullmatch(version)
    if found is None:
        raise DataParserError(f"{version[:32]!r} is not a data_parser version such as v0.0.45")
    return int(found.group(1))


def _ordered(versions: Iterable[str]) -> list[str]:
    return sorted(set(versions), key=_number)


def offered_by_openapi(spec: Mapping[str, Any]) -> list[str]:
    """Return the versions slurmrestd's `/openapi/v3` document serves, oldest first."""
    paths = spec.get("paths")
    if not isinstance(paths, Mapping):
        raise DataParserError("the /openapi/v3 document has no paths")
    keys = cast(Mapping[object, Any], paths).keys()
    return _ordered(
        m.group(1) for path in keys if isinstance(path, str) and (m := _OPENAPI_PATH.match(path))
    )


def offered_by_list(text: str) -> list[str]:
    """Return the versions in `scontrol ... --json=list` output (`data_parser/v0.0.43` lines)."""
    return _ordered(
        m.group(1) for line in text.split("\n") if (m := _PLUGIN.fullmatch(line.strip()))
    )


def choose(offered: Iterable[str], override: str | None = None) -> str:
    """Return the version to speak: the override, else the newest offered one in KNOWN.

    Raises:
        DataParserError: The override is not offered or not known, or no offered one is known.

    """
    versions = _ordered(offered)
    if override:
        if override not in versions:
            raise DataParserError(
                f"data_parser {override} is not offered (Slurm offers {_listed(versions)})"
            )
        if override not in KNOWN:
            raise DataParserError(
                f"data_parser {override} is not one this client reads ({_known()})"
            )
        return override
    usable = [v for v in versions if v in KNOWN]
    if not versions:
        raise DataParserError(
            f"Slurm offers no data_parser version (this client reads {_known()})"
        )
    if not usable:
        raise DataParserError(
            f"Slurm offers data_parser {_listed(versions)}, none of which this client reads "
            f"({_known()})"
        )
    return usable[-1]


def answer_version(document: Mapping[str, Any]) -> str | None:
    """Return the version an answer names in `meta.plugin.data_parser`, None if it names none."""
    meta = document.get("meta")
    plugin = cast(Mapping[str, Any], meta).get("plugin") if isinstance(meta, Mapping) else None
    name = (
        cast(Mapping[str, Any], plugin).get("data_parser") if isinstance(plugin, Mapping) else None
    )
    if not isinstance(name, str) or (found := _PLUGIN.fullmatch(name)) is None:
        return None
    return found.group(1)


def check_answer(document: Mapping[str, Any], asked: str) -> None:
    """Refuse an answer that is not in the version `asked` for.

    Raises:
        DataParserError: The answer names another version, or none; the message names both.

    """
    version = answer_version(document)
    if version != asked:
        raise DataParserError(
            f"the answer is in data_parser {version or '(none named)'}, not the {asked} "
            "this client asked for and reads"
        )


def _listed(versions: list[str]) -> str:
    return ", ".join(versions) or "none"


def _known() -> str:
    return f"{KNOWN[0]} to {KNOWN[-1]}"
