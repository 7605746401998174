"""hpc_libs.charm.ports: a unit's ports, ranges included, through Juju's hook tools.

The fake machine answers the tools as the lab does (`slurm_lab.juju.hooktools`).
"""

import pytest
from charm_testing import FakeMachine
from hpc_libs.charm.ports import PortRange, opened_ports, set_opened_ports
from hpc_libs.errors import SlurmOpsError

SRUN = PortRange(60001, 63000)
SLURMD = PortRange.single(6818)


def test_ports_and_ranges_open_once_in_juju_notation(machine: FakeMachine):
    assert set_opened_ports([SLURMD, SRUN]) is True
    assert set_opened_ports([SLURMD, SRUN]) is False

    assert machine.opened_ports == ["6818/tcp", "60001-63000/tcp"]
    assert machine.ran("open-port") == [
        ["open-port", "6818/tcp"],
        ["open-port", "60001-63000/tcp"],
    ]
    assert opened_ports() == {SLURMD, SRUN}


def test_a_moved_range_is_closed_before_the_new_one_opens(machine: FakeMachine):
    set_opened_ports([SLURMD, SRUN])

    set_opened_ports([SLURMD, PortRange(62000, 64000)])

    assert machine.opened_ports == ["6818/tcp", "62000-64000/tcp"]
    assert machine.ran("close-port") == [["close-port", "60001-63000/tcp"]]


def test_an_entry_overlapping_an_earlier_one_is_left_out(machine: FakeMachine):
    set_opened_ports([SLURMD, PortRange(6000, 7000), PortRange(6818, 6818, "udp")])

    assert machine.opened_ports == ["6818/tcp", "6818/udp"]


def test_what_others_opened_that_is_no_tcp_or_udp_is_left_alone(machine: FakeMachine):
    machine.opened_ports = ["icmp", "8080/tcp"]

    set_opened_ports([SLURMD])

    assert set(machine.opened_ports) == {"6818/tcp", "icmp"}


def test_a_refused_tool_raises_with_its_stderr(machine: FakeMachine):
    machine.fail("open-port", stderr="ERROR port range conflicts\n")

    with pytest.raises(SlurmOpsError) as refused:
        set_opened_ports([SRUN])

    assert refused.value.message == "cannot open port 60001-63000/tcp"
    assert refused.value.status_message() == (
        "cannot open port 60001-63000/tcp: ERROR port range conflicts"
    )
    assert refused.value.command == ["open-port", "60001-63000/tcp"]


def test_a_tool_that_hangs_is_a_timeout(machine: FakeMachine):
    machine.time_out("opened-ports")

    with pytest.raises(SlurmOpsError) as hung:
        set_opened_ports([SRUN])

    assert hung.value.timed_out


@pytest.mark.parametrize("printed", ["not json", '{"6818/tcp": 1}', '"6818/tcp"'])
def test_opened_ports_that_print_no_list_are_an_error(machine: FakeMachine, printed: str):
    machine.responses[("opened-ports",)] = printed

    with pytest.raises(SlurmOpsError, match="opened-ports printed no JSON list"):
        opened_ports()


@pytest.mark.parametrize(
    ("first", "last", "protocol"),
    [(0, 1, "tcp"), (2, 1, "tcp"), (1, 65536, "tcp"), (1, 2, "icmp")],
)
def test_a_range_juju_cannot_hold_cannot_be_built(first: int, last: int, protocol: str):
    with pytest.raises(ValueError, match="not a port range"):
        PortRange(first, last, protocol)
