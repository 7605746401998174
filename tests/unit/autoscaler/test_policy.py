"""The policy file: its schema, and errors that name the key."""

from __future__ import annotations

import datetime as dt

import pytest
from slurm_autoscale.policy import PolicyError, parse

GOOD = """
[compute]
min = 0
max = 3
idle-timeout = "10m"
step = 2
cooldown = "1m30s"

[[compute.schedule]]
days = ["mon", "tue", "wed", "thu", "fri"]
start = "08:00"
end = "18:00"
min = 2
timezone = "Europe/London"
"""


def test_a_good_policy_parses_with_durations_and_a_schedule():
    rule = parse(GOOD)["compute"]
    assert (rule.min, rule.max, rule.idle_timeout, rule.step, rule.cooldown) == (0, 3, 600, 2, 90)
    monday_noon = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    assert rule.minimum_at(monday_noon) == 2
    assert rule.minimum_at(monday_noon.replace(hour=20)) == 0
    assert rule.minimum_at(monday_noon + dt.timedelta(days=5)) == 0  # Saturday.


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[compute]\nmin = 4\nmax = 3\n", "[compute]: min (4) > max (3)"),
        ('[compute]\nmax = 3\nidle-timeout = "soon"\n', "idle-timeout: not a duration"),
        ("[compute]\nmax = 3\nstep = 0\n", "step: Input should be greater than or equal to 1"),
        ("[compute]\nmax = 3\nburst = 2\n", "burst: Extra inputs are not permitted"),
        ("[compute]\nmin = 0\n", "max: Field required"),
        ("compute = 3\n", "[compute] must be a table"),
        ("[compute\n", "not valid TOML"),
        ("", "no application in the policy"),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\nstart = "18:00"\nend = "18:00"\nmin = 1\n',
            "start and end are both 18:00: an empty window",
        ),
        ("[compute]\nmax = true\n", "[compute]: max: Input should be a valid integer"),
        ("[compute]\nmax = 3.0\n", "[compute]: max: Input should be a valid integer"),
        ('[compute]\nmax = "3"\n', "[compute]: max: Input should be a valid integer"),
        ("[compute]\nmax = 3\nstep = true\n", "step: Input should be a valid integer"),
        ("[compute]\nmax = 3\ncpus = 2.5\n", "cpus: Input should be a valid integer"),
        ("[compute]\nmax = 3\ncooldown = 1.5\n", "cooldown: Input should be a valid integer"),
        ("[compute]\nmax = 10001\n", "max: Input should be less than or equal to 10000"),
        ("[compute]\nmax = 3\nstep = 10001\n", "step: Input should be less than or equal to"),
        (
            "[compute]\nmax = 3\nidle-timeout = 99999999999\n",
            "idle-timeout: Input should be less than or equal to",
        ),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\nstart = "08:00"\nend = "09:00"\n'
            "min = false\n",
            "schedule.0.min: Input should be a valid integer",
        ),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\nstart = "25:00"\nend = "26:00"\nmin = 1\n',
            "not a time of day HH:MM",
        ),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\ndays = ["monday"]\n'
            'start = "08:00"\nend = "09:00"\nmin = 1\n',
            "unknown day(s) ['monday']",
        ),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\nstart = "08:00"\nend = "09:00"\nmin = 4\n',
            "schedule min (4) > max (3)",
        ),
        (
            '[compute]\nmax = 3\n[[compute.schedule]]\nstart = "08:00"\nend = "09:00"\n'
            'min = 1\ntimezone = "Mars/Olympus"\n',
            "unknown timezone 'Mars/Olympus'",
        ),
    ],
)
def test_bad_policy_is_a_clear_error(text, message):
    with pytest.raises(PolicyError) as caught:
        parse(text, "policy.toml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("policy.toml: ")


def test_a_window_whose_end_is_before_its_start_crosses_midnight():
    text = (
        '[compute]\nmax = 3\n[[compute.schedule]]\ndays = ["fri"]\n'
        'start = "22:00"\nend = "06:00"\nmin = 2\n'
    )
    rule = parse(text)["compute"]
    friday = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    assert [rule.minimum_at(friday.replace(hour=h)) for h in (5, 21, 22, 23)] == [0, 0, 2, 2]
    saturday = friday + dt.timedelta(days=1)
    assert [rule.minimum_at(saturday.replace(hour=h)) for h in (0, 5, 6, 22)] == [2, 2, 0, 0]
