"""The lab checks `juju run` parameters as Juju 3.6 does, before the charm sees them."""

from __future__ import annotations

import pytest
from slurm_lab.juju.actionparams import ParamsError, validate

DECLARED = {"params": {"partition": {"type": "string"}, "max": {"type": "integer", "default": 1}}}


def test_an_unknown_parameter_reaches_the_charm_unless_the_action_refuses_additional_ones():
    assert validate(DECLARED, {"partitions": "batch"}) == {"max": 1, "partitions": "batch"}
    assert validate({**DECLARED, "additionalProperties": True}, {"x": 1}) == {"max": 1, "x": 1}

    with pytest.raises(ParamsError, match="Additional property partitions is not allowed"):
        validate({**DECLARED, "additionalProperties": False}, {"partitions": "batch"})


def test_an_action_refusing_additional_parameters_takes_its_declared_ones():
    declared = {**DECLARED, "additionalProperties": False}

    assert validate(declared, {"partition": "batch"}) == {"partition": "batch", "max": 1}
