"""Scenarios: the `set-node-state` action (and `resume`, its alias), every parameter checked."""

import charm
import pytest
from ops import testing
from test_charm_slurmctld import running


@pytest.fixture
def slurmctld_actions():
    """The charm's `actions` module, as the charm imported it."""
    return charm.actions


def run_action(ctx, params):
    return ctx.run(ctx.on.action("set-node-state", params=params), running())


@pytest.mark.parametrize(
    ("state", "reason", "argv_tail"),
    [
        ("drain", "disk errors on sdb", ["state=drain", "reason=disk errors on sdb"]),
        ("down", "fan", ["state=down", "reason=fan"]),
        ("resume", None, ["state=resume"]),
        ("idle", None, ["state=idle"]),
        ("undrain", None, ["state=undrain"]),
        ("resume", "back from repair", ["state=resume"]),  # Slurm keeps no reason for it
        ("DRAIN", "upper case", ["state=drain", "reason=upper case"]),
    ],
)
def test_sets_the_state_with_one_scontrol_call(ctx, machine, state, reason, argv_tail):
    params = {"nodes": "compute-[0-3]", "state": state}
    if reason is not None:
        params["reason"] = reason

    run_action(ctx, params)

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "nodename=compute-[0-3]", *argv_tail]
    ]
    assert ctx.action_results == {"nodes": "compute-[0-3]", "state": state.lower()}


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"nodes": "compute-0", "state": "drain"}, "state drain needs a reason"),
        ({"nodes": "compute-0", "state": "down", "reason": ""}, "state down needs a reason"),
        ({"nodes": "compute-0 state=resume", "state": "drain", "reason": "x"}, "host list"),
        ({"nodes": "a=b", "state": "resume"}, "host list"),
        ({"nodes": "-h", "state": "resume"}, "starts with '-'"),
        ({"nodes": "", "state": "resume"}, "host list"),
        ({"nodes": "compute-0", "state": "fail", "reason": "x"}, "state 'fail' is not one of"),
        ({"nodes": "compute-0", "state": "resume;reboot"}, "is not one of"),
        ({"nodes": "compute-0", "state": "drain", "reason": 'say "hi"'}, "is not allowed"),
        ({"nodes": "compute-0", "state": "drain", "reason": "two\nlines"}, "is not allowed"),
        ({"nodes": "compute-0", "state": "drain", "reason": " padded"}, "leading or trailing"),
        ({"nodes": "compute-0", "state": "drain", "reason": "x" * 1025}, "at most 1024"),
    ],
)
def test_bad_input_fails_and_runs_nothing(ctx, machine, params, complaint):
    with pytest.raises(testing.ActionFailed) as failure:
        run_action(ctx, params)

    assert failure.value.message.startswith("invalid set-node-state request")
    assert complaint in failure.value.message
    assert machine.ran("scontrol", "update") == []


def test_a_reason_with_an_equals_sign_stays_one_argument(ctx, machine):
    """Slurm reads `reason=a b=c` as one value when it is one argv element: no new key."""
    run_action(ctx, {"nodes": "compute-0", "state": "drain", "reason": "ticket=42 bad dimm"})

    assert machine.ran("scontrol", "update")[0][-1] == "reason=ticket=42 bad dimm"
    assert len(machine.ran("scontrol", "update")[0]) == 5


@pytest.mark.parametrize(
    ("nodes", "state", "reason"),
    [(None, "drain", "x"), (3, "drain", "x"), ("compute-0", None, None), ("c", "drain", 7)],
)
def test_node_state_request_refuses_values_of_the_wrong_type(
    slurmctld_actions, nodes, state, reason
):
    with pytest.raises(ValueError):
        slurmctld_actions.node_state_request(nodes, state, reason)


def test_slurms_refusal_fails_the_action_with_slurms_words(ctx, machine):
    machine.fail("scontrol", "update", stderr="Invalid node name specified")

    with pytest.raises(testing.ActionFailed) as failure:
        run_action(ctx, {"nodes": "nosuch-0", "state": "drain", "reason": "x"})

    assert failure.value.message == "cannot set nosuch-0 drain: Invalid node name specified"


def test_resume_stays_an_alias(ctx, machine):
    ctx.run(ctx.on.action("resume", params={"nodename": "compute-1"}), running())

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "nodename=compute-1", "state=resume"]
    ]


def test_a_later_reconcile_never_touches_node_states(ctx, machine, tmp_path):
    """After an operator's drain, reconciling (config change, relation data) runs no update."""
    state = running()
    out = ctx.run(
        ctx.on.action(
            "set-node-state", params={"nodes": "compute-0", "state": "drain", "reason": "x"}
        ),
        state,
    )
    machine.commands.clear()

    ctx.run(ctx.on.config_changed(), out)

    assert machine.ran("scontrol", "update") == []
