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
end = "18:00"
min = 2
timezone = "Europe/London"   # optional, default UTC
```
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


Seconds = Annotated[int, BeforeValidator(_seconds), Field(ge=0)]


def _clock(value: Any) -> Any:
    if isinstance(value, str):
        found = _CLOCK.match(value)
        if found is None:
            raise ValueError(f"not a time of day HH:MM: {value!r}")
        return dt.time(int(found.group(1)), int(found.group(2)))
    return value


Clock = Annotated[dt.time, BeforeValidator(_clock)]


class Window(BaseModel):
    """A minimum that holds on some days between `start` and `end` (end excluded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    days: list[str] = Field(default_factory=lambda: list(DAYS), min_length=1)
    start: Clock
    end: Clock
    min: int = Field(ge=0)
    timezone: str = "UTC"

    @model_validator(mode="after")
    def _check(self) -> Window:
        unknown = [day for day in self.days if day not in DAYS]
        if unknown:
            raise ValueError(f"unknown day(s) {unknown}; use {', '.join(DAYS)}")
        if self.start >= self.end:
            raise ValueError(f"start {self.start:%H:%M} is not before end {self.end:%H:%M}")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"unknown timezone {self.timezone!r}") from e
        return self

    def holds_at(self, when: dt.datetime) -> bool:
        """Whether `when` (timezone-aware) falls in this window."""
        local = when.astimezone(zoneinfo.ZoneInfo(self.timezone))
        return DAYS[local.weekday()] in self.days and self.start <= local.time() < self.end


class AppPolicy(BaseModel):
    """How one slurmd application scales."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    min: int = Field(default=0, ge=0)
    max: int = Field(ge=0)
    idle_timeout: Seconds = Field(default=600, alias="idle-timeout")
    step: int = Field(default=1, ge=1)
    cooldown: Seconds = 60
    cpus: int | None = Field(default=None, ge=1)
    memory: int | None = Field(default=None, ge=1)
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
