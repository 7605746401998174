"""Slurm major upgrades: the package source the operator names, the pin, and Slurm's order.

The operator names the target with `slurm-package-source`, which may carry a source with a
newer Slurm (`ppa:owner/name`, or a one-line `deb [signed-by=...] URI suite component...`),
and with `slurm-major` (`26.05`) when that source offers several. Nothing upgrades at once:
every unit pins Slurm's packages to the major it runs (`pin_text`, an apt preferences file),
so neither the charm's own apt runs nor a patch rollout's `apt-get upgrade` moves Slurm to a
new major before the unit's turn. Its turn comes in Slurm's order (Slurm's upgrade guide):

1. slurmdbd, the primary unit first (it converts the database), then the backup;
2. slurmctld, once every slurmdbd it uses runs the target; the primary controller first;
3. slurmd (through the rebuild rollout), sackd and slurmrestd, once every controller runs it.

`wait_reason` says what a unit waits for, from the versions the other daemons publish over
the existing integrations. Slurm 24.11 and later upgrade directly from the 3 previous majors
(`MAX_MAJOR_STEPS`: SchedMD's upgrade guide; 26.11 from 25.05, 25.11 or 26.05); a longer
jump, or a downgrade, is refused (`refusal`) before any package moves, naming the path
(`upgrade_path`: 24.11 -> 26.05 -> 26.11).
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from hpc_libs.slurm.version import parse

BASE_SOURCES = ("auto", "ppa", "archive")
"""The sources that name no repository of their own (see `hpc_libs.slurm.base.PackageSource`)."""
MAX_SOURCE_CHARS = 512
MAX_MAJOR_STEPS = 3
"""Slurm 24.11 and later upgrade directly from the 3 previous majors (6-month cycle)."""
SLURM_PACKAGE_PATTERNS = ("slurm*", "libslurm*", "libpmi*", "libpam-slurm*", "sackd")
"""The packages built from Slurm's source that the pin holds at one major."""

_MAJOR = re.compile(r"(\d{2})\.(\d{2})")
_PPA = re.compile(r"ppa:[a-z0-9][a-z0-9.+-]{0,63}/[a-z0-9][a-z0-9.+-]{0,63}")
_URI_PATH = re.compile(r"[A-Za-z0-9._~/+-]*")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,63}")
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEYRING = re.compile(r"/(usr/share|etc/apt)/keyrings/[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ARCH = re.compile(r"[a-z0-9-]{1,32}(,[a-z0-9-]{1,32}){0,7}")


@dataclass(frozen=True)
class DebSource:
    """A validated one-line `deb` source: its options, URI, suite and components."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None = None
    arch: str | None = None
    trusted: bool = False
    """`[trusted=yes]`: the operator's explicit choice of an unsigned repository."""

    def line(self) -> str:
        """Return the sources.list line, rebuilt from the checked parts only."""
        options = [f"signed-by={self.signed_by}"] if self.signed_by else []
        options += [f"arch={self.arch}"] if self.arch else []
        options += ["trusted=yes"] if self.trusted else []
        prefix = f"deb [{' '.join(options)}]" if options else "deb"
        return " ".join((prefix, self.uri, self.suite, *self.components))


def parse_source(text: str) -> str | DebSource:
    """Check `slurm-package-source`: a base source or a PPA (returned as is), or a `deb` line.

    The option is untrusted input that reaches an apt sources file and a command line: only
    the grammar below is accepted, and a `deb` line is rebuilt from its checked parts.

    Raises:
        ValueError: The text is none of them; the message says what is wrong.

    """
    if len(text) > MAX_SOURCE_CHARS:
        raise ValueError(f"longer than {MAX_SOURCE_CHARS} characters")
    if text in BASE_SOURCES:
        return text
    if text.startswith("ppa:"):
        if not _PPA.fullmatch(text):
            raise ValueError(f"{text!r} is not a PPA of the form ppa:owner/name")
        return text
    if text.startswith("deb ") or text.startswith("deb\t"):
        return _parse_deb(text)
    raise ValueError(
        "expected auto, ppa, archive, ppa:owner/name or a one-line "
        "'deb [signed-by=/etc/apt/keyrings/KEY] URI SUITE COMPONENT...' source"
    )


def _parse_deb(text: str) -> DebSource:
    if any(c in text for c in "\n\r#$`\\\"'"):
        raise ValueError("a deb source holds a new line, #, quote, $, ` or backslash")
    rest = text[3:].strip()
    options: dict[str, str] = {}
    if rest.startswith("["):
        inside, closed, rest = rest[1:].partition("]")
        if not closed:
            raise ValueError("a deb source's options lack the closing ']'")
        options = _deb_options(inside.split())
    words = rest.split()
    if len(words) < 3:
        raise ValueError("a deb source needs a URI, a suite and at least one component")
    uri, suite, *components = words
    _check_uri(uri)
    if not _SUITE.fullmatch(suite) or ".." in suite:
        raise ValueError(f"{suite!r} is not a suite name")
    for component in components:
        if not _COMPONENT.fullmatch(component):
            raise ValueError(f"{component!r} is not a component name")
    return DebSource(
        uri,
        suite,
        tuple(components),
        options.get("signed-by"),
        options.get("arch"),
        trusted="trusted" in options,
    )


def _deb_options(items: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or key in options:
            raise ValueError(f"deb source option {item!r} is not a single key=value")
        if key == "signed-by":
            if not _KEYRING.fullmatch(value) or ".." in value:
                raise ValueError(
                    "signed-by must name a key file in /etc/apt/keyrings or /usr/share/keyrings"
                )
        elif key == "arch":
            if not _ARCH.fullmatch(value):
                raise ValueError(f"{value!r} is not a list of architectures")
        elif key == "trusted":
            if value != "yes":
                raise ValueError("trusted takes yes only (an unsigned repository)")
        else:
            raise ValueError(
                f"deb source option {key!r} is not allowed (only signed-by, arch, trusted=yes)"
            )
        options[key] = value
    return options


def _check_uri(uri: str) -> None:
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{uri!r} is not an http:// or https:// URI")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{uri!r} holds credentials, a query or a fragment")
    host = parts.netloc.rsplit(":", 1)[0] if parts.port is not None else parts.netloc
    if not _HOST.fullmatch(host) or not _URI_PATH.fullmatch(parts.path) or ".." in parts.path:
        raise ValueError(f"{uri!r} is not a plain http(s) URI of a host and a path")


def parse_major(text: str) -> str:
    """Check `slurm-major`: empty (the source's newest) or `YY.MM`, such as `26.05`.

    Raises:
        ValueError: The text is neither.

    """
    if text and not _MAJOR.fullmatch(text):
        raise ValueError(f"{text!r} is not a Slurm major such as 26.05")
    return text


def major(version: str) -> str:
    """Return the major (`24.11`) of a Slurm version or package version (`24.11.5`, `1:24.11.5-1`).

    Raises:
        ValueError: It is not a Slurm version.

    """
    release = parse(version)
    return f"{release.major}.{release.minor:02d}"


def _key(major_text: str) -> tuple[int, int]:
    release = parse(major_text)
    return (release.major, release.minor)


def is_newer(candidate: str, than: str) -> bool:
    """Whether major `candidate` is newer than major `than` (`26.05` > `24.11`)."""
    return _key(candidate) > _key(than)


def _index(major_text: str) -> int:
    """Return the major's place in the 6-month cycle (YY.05, YY.11): one more per release."""
    year, month = _key(major_text)
    return year * 2 + (1 if month >= 11 else 0)


def _release(index: int) -> str:
    """Return the major at place `index` of the cycle (`_index`'s inverse)."""
    return f"{index // 2:02d}.{11 if index % 2 else 5:02d}"


def steps(from_major: str, to_major: str) -> int:
    """How many majors of the 6-month cycle (YY.05, YY.11) lead from one to the other."""
    return _index(to_major) - _index(from_major)


def upgrade_path(running: str, target: str, offered: Sequence[str]) -> list[str]:
    """Return the majors from `running` to `target`, each within `MAX_MAJOR_STEPS` of the last.

    Each hop goes to the newest major in reach that the source offers (the operator can
    then name it in `slurm-major`), else to the newest in reach: with no offer in the way,
    as few hops as Slurm allows.
    """
    path = [running]
    while steps(path[-1], target) > MAX_MAJOR_STEPS:
        here = _index(path[-1])
        reach = range(here + MAX_MAJOR_STEPS, here, -1)
        known = [m for m in offered if _index(m) in reach]
        path.append(max(known, key=_index) if known else _release(reach[0]))
    return [*path, target]


def offered_majors(madison: str) -> list[str]:
    """Return the Slurm majors in `apt-cache madison <daemon>` output, oldest first.

    Each line reads `pkg | version | source`; lines that are not a Slurm version are skipped.
    """
    found: set[str] = set()
    for line in madison.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 2:
            try:
                found.add(major(fields[1]))
            except ValueError:
                continue
    return sorted(found, key=_key)


def choose_target(running: str, offered: Sequence[str], wanted: str) -> str | None:
    """Return the major to move to: `wanted` (or the newest offered), if newer than `running`."""
    target = wanted or (offered[-1] if offered else "")
    if not target or not is_newer(target, running):
        return None
    return target


def refusal(running: str, offered: Sequence[str], wanted: str) -> str | None:
    """Why the named target cannot be reached from major `running`; None if it can.

    A downgrade is refused (Slurm converts state and the database only forward: roll back
    by restoring the backups), so is a major the source does not offer, and a jump of more
    than `MAX_MAJOR_STEPS` majors.
    """
    if wanted and wanted not in offered:
        offers = ", ".join(offered) or "no Slurm"
        return f"slurm-major {wanted} is not offered by slurm-package-source (it offers {offers})"
    if wanted and is_newer(running, wanted):
        return (
            f"slurm-major {wanted} is older than the running {running}: Slurm does not "
            "downgrade (restore the backups to roll back)"
        )
    target = choose_target(running, offered, wanted)
    if target is not None and steps(running, target) > MAX_MAJOR_STEPS:
        path = upgrade_path(running, target, offered)
        first = path[1]
        where = "" if first in offered else f" (from a source that offers {first})"
        return (
            f"Slurm {target} cannot upgrade {running} directly (at most {MAX_MAJOR_STEPS} "
            f"majors at once): upgrade {' -> '.join(path)}, setting slurm-major={first} "
            f"first{where}"
        )
    return None


def wait_reason(
    target: str, daemon: str, versions: Iterable[tuple[str, str | None]]
) -> str | None:
    """Say what a unit waits for before upgrading to `target`; None: its turn has come.

    `versions` holds, for each `daemon` that must run `target` first, its name (a unit or
    host, for the text) and the Slurm version it published (None: not said yet).
    """
    behind: list[str] = []
    for who, version in versions:
        runs = major_or_none(version)
        if runs is None:
            behind.append(f"{who} has not said which Slurm it runs")
        elif is_newer(target, runs):
            behind.append(f"{who} runs {runs}")
    if not behind:
        return None
    return f"{daemon} must run {target} first ({', '.join(behind)})"


def join_order_wait_reason(
    target: str,
    daemon: str,
    order: Sequence[str],
    unit: str,
    versions: Mapping[str, str | None],
) -> str | None:
    """Say what `unit` waits for: the `daemon` units before it in join `order` go first.

    The first in join order (the primary) converts the state; the others follow it. A unit
    not in `order` yet waits for all of them. `versions` maps a unit to the Slurm version it
    published (a unit missing from it has not said).
    """
    earlier = order[: order.index(unit)] if unit in order else order
    return wait_reason(target, daemon, [(u, versions.get(u)) for u in earlier])


def major_or_none(version: str | None) -> str | None:
    """Return the major of `version` (`24.11.5`: `24.11`), None when not said or not one."""
    if version is None:
        return None
    try:
        return major(version)
    except ValueError:
        return None


def pin_text(hold_major: str) -> str:
    """Return apt preferences keeping Slurm's packages at `hold_major`, whatever the sources.

    Priority 1001 at `hold_major` only: apt installs that major (and its patch releases) and
    no other, newer or older, so neither the charm's own apt runs nor a patch rollout's
    `apt-get upgrade` move Slurm to another major before the unit's turn. Other packages are
    not pinned: a named source should carry Slurm and the libraries it needs (a PPA, a
    partial mirror), not a whole newer release, whose every package `apt-get upgrade` would
    take.
    """
    return (
        f"Explanation: Written by the Slurm charms: Slurm stays at {hold_major} until its turn\n"
        f"Package: {' '.join(SLURM_PACKAGE_PATTERNS)}\n"
        f"Pin: version {hold_major}.*\n"
        "Pin-Priority: 1001\n"
    )
