"""The policy file: per slurmd application, how far and how fast to scale (TOML, pydantic).

```toml
[compute]                 # a slurmd application (its partition has the same name)
min = 0
max = 3
idle-timeout = "10m"      # a node idle this long may be removed (seconds or 90s/10m/1h)
step = 2                  # at most this many units added or removed per pass
cooldown = "2m"           # no scale-in sooner than this after the last add or removal
cpus = 4                  # optional: CPUs of one machine, to judge fit while no node is up
memory = 8000             # optional: RealMemory (MB) of one machine, likewise

[[compute.schedule]]      # optional: a higher minimum at some times
days = ["mon", "tue", "wed", "thu", "fri"]
start = "08:00"
end = "18:00"             # end before start: the window crosses midnight
min = 2
timezone = "Europe/London"   # optional, default UTC
```

Numbers are strict: `max = true` or `max = 3.0` is an error, not 1 or 3.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
import zoneinfo
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
MAX_UNITS = 10_000
"""Most units a policy may name (`max`, `min`, `step`): Slurm's node table is bounded too."""
MAX_SECONDS = 366 * 24 * 3600
"""Longest idle-timeout or cooldown: a year."""


class PolicyError(ValueError):
    """The policy file cannot be used; the message names the file and the key."""


def _seconds(value: Any) -> Any:
    """Seconds from an integer or a duration such as `90s`, `10m`, `1h30m`."""
    if isinstance(value, str):
        found = _DURATION.match(value.strip())
        if not value.strip() or found is None:
            raise ValueError(f"not a duration: {value!r} (use seconds, or e.g. 90s, 10m, 1h30m)")
        hours, minutes, seconds = (int(part or 0) for part in found.groups())
        return hours * 3600 + minutes * 60 + seconds
    return value


Seconds = Annotated[int, BeforeValidator(_seconds), Field(ge=0, le=MAX_SECONDS)]
Units = Annotated[int, Field(ge=0, le=MAX_UNITS)]


def _clock(value: Any) -> Any:
    if isinstance(value, str):
        found = _CLOCK.match(value)
        if found is None:
            raise ValueError(f"not a time of day HH:MM: {value!r}")
        return dt.time(int(found.group(1)), int(found.group(2)))
    return value


Clock = Annotated[dt.time, BeforeValidator(_clock)]


class Window(BaseModel):
    """A minimum that holds on some days between `start` and `end` (end excluded).

    A window whose end is before its start crosses midnight: `22:00`-`06:00` on `fri` holds
    from Friday 22:00 to Saturday 06:00.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    days: list[str] = Field(default_factory=lambda: list(DAYS), min_length=1)
    start: Clock
    end: Clock
    min: Units
    timezone: str = "UTC"

    @model_validator(mode="after")
    def _check(self) -> Window:
        unknown = [day for day in self.days if day not in DAYS]
        if unknown:
            raise ValueError(f"unknown day(s) {unknown}; use {', '.join(DAYS)}")
        if self.start == self.end:
            raise ValueError(f"start and end are both {self.start:%H:%M}: an empty window")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"unknown timezone {self.timezone!r}") from e
        return self

    def holds_at(self, when: dt.datetime) -> bool:
        """Whether `when` (timezone-aware) falls in this window."""
        local = when.astimezone(zoneinfo.ZoneInfo(self.timezone))
        today, clock = DAYS[local.weekday()], local.time()
        if self.start < self.end:
            return today in self.days and self.start <= clock < self.end
        if clock >= self.start:
            return today in self.days
        yesterday = DAYS[(local.weekday() - 1) % 7]
        return clock < self.end and yesterday in self.days


class AppPolicy(BaseModel):
    """How one slurmd application scales."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    min: Units = 0
    max: Units
    idle_timeout: Seconds = Field(default=600, alias="idle-timeout")
    step: int = Field(default=1, ge=1, le=MAX_UNITS)
    cooldown: Seconds = 60
    cpus: int | None = Field(default=None, ge=1, le=2**20)
    memory: int | None = Field(default=None, ge=1, le=2**40)
    schedule: list[Window] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> AppPolicy:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) > max ({self.max})")
        for window in self.schedule:
            if window.min > self.max:
                raise ValueError(f"schedule min ({window.min}) > max ({self.max})")
        return self

    def minimum_at(self, when: dt.datetime) -> int:
        """Return the floor in force at `when`: `min`, or a schedule window's higher minimum."""
        return max([self.min, *(w.min for w in self.schedule if w.holds_at(when))])


def parse(text: str, source: str = "<policy>") -> dict[str, AppPolicy]:
    """Parse policy TOML: a table per application. Raises PolicyError naming the key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{source}: not valid TOML: {e}") from e
    if not raw:
        raise PolicyError(f"{source}: no application in the policy")
    policies: dict[str, AppPolicy] = {}
    for app, table in raw.items():
        if not isinstance(table, dict):
            raise PolicyError(f"{source}: [{app}] must be a table of settings")
        try:
            policies[app] = AppPolicy.model_validate(table)
        except ValidationError as e:
            raise PolicyError(f"{source}: [{app}]: {_explain(e)}") from e
    return policies


def load(path: Path) -> dict[str, AppPolicy]:
    """Read and parse a policy file."""
    try:
        text = path.read_text()
    except OSError as e:
        raise PolicyError(f"{path}: cannot read: {e.strerror}") from e
    return parse(text, str(path))


def _explain(error: ValidationError) -> str:
    """One line per problem: `key: message`."""
    parts = []
    for problem in error.errors():
        key = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        parts.append(f"{key}: {message}" if key else message)
    return "; ".join(parts)
