"""The config every Slurm charm shares, and how a bad option reaches the operator."""

import logging
from collections.abc import Iterable
from typing import Annotated, Any

import ops
import pydantic
import pytest
from charm_testing import FakeMachine, already_installed
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.charm.config import (
    Parameters,
    SlurmCharmConfig,
    describe_validation_error,
    parsed_parameters,
    refused_parameters,
)
from hpc_libs.errors import ConfigError
from hpc_libs.slurm.sackd import SackdManager
from ops import testing

PARSED: list[str] = []


def _parse(text: str) -> dict[str, Any]:
    PARSED.append(text)
    key, _, value = text.partition("=")
    if key == "bad":
        raise ConfigError("bad is refused", key="bad")
    return {key: value} if text else {}


class ExampleConfig(SlurmCharmConfig):
    max_node_count: int = pydantic.Field(default=1024, ge=1)
    strict_parameters: Annotated[dict[str, Any], refused_parameters(_parse)] = pydantic.Field(
        default_factory=dict[str, Any]
    )
    lenient_parameters: Annotated[Parameters, parsed_parameters(_parse)] = Parameters()


class ExampleCharm(SlurmCharm[ExampleConfig]):
    """Acts on valid config only and blocks naming the bad option."""

    def __init__(self, framework: ops.Framework) -> None:
        self.sackd = SackdManager()
        super().__init__(framework, config_type=ExampleConfig, manager=self.sackd)
        self.seen: list[ExampleConfig] = []

    def reconcile(self, config: ExampleConfig) -> None:
        self.seen.append(config)

    def statuses(self, config: ExampleConfig) -> Iterable[ops.StatusBase]:
        try:
            config.lenient_parameters.get()
        except ConfigError as e:
            yield ops.BlockedStatus(f"lenient-parameters: {e.message}")


OPTIONS = {
    "slurm-package-source": {"type": "string", "default": "auto"},
    "max-node-count": {"type": "int", "default": 1024},
    "strict-parameters": {"type": "string", "default": ""},
    "lenient-parameters": {"type": "string", "default": ""},
}
INSTALLED = testing.State(stored_states={already_installed("ExampleCharm")})


@pytest.fixture
def ctx(machine: FakeMachine) -> testing.Context[ExampleCharm]:
    del machine
    return testing.Context(ExampleCharm, meta={"name": "example"}, config={"options": OPTIONS})


def test_every_charm_config_defaults_to_auto_and_is_frozen():
    config = ExampleConfig()

    assert config.slurm_package_source == "auto"
    with pytest.raises(pydantic.ValidationError):
        config.slurm_package_source = "archive"  # pyright: ignore[reportAttributeAccessIssue]


def test_the_message_names_the_option_as_the_operator_spells_it():
    with pytest.raises(pydantic.ValidationError) as error:
        ExampleConfig(slurm_package_source="snap")  # pyright: ignore[reportArgumentType]

    assert describe_validation_error(error.value) == (
        "invalid config option 'slurm-package-source': expected auto, ppa, archive, "
        "ppa:owner/name or a one-line 'deb [signed-by=/etc/apt/keyrings/KEY] URI SUITE "
        "COMPONENT...' source"
    )


def test_an_error_about_no_single_option_names_the_config():
    error = pydantic.ValidationError.from_exception_data(
        "ExampleConfig", [{"type": "missing", "loc": (), "input": {}}]
    )

    assert describe_validation_error(error) == "invalid config option 'config': Field required"


def test_valid_config_is_loaded_and_leaves_the_status_alone(ctx: testing.Context[ExampleCharm]):
    state_in = testing.State(config={"max-node-count": 8}, stored_states=INSTALLED.stored_states)
    with ctx(ctx.on.config_changed(), state_in) as manager:
        state = manager.run()
        seen = manager.charm.seen

    assert seen == [ExampleConfig(max_node_count=8)]
    assert state.unit_status == ops.ActiveStatus()


def test_an_invalid_option_is_not_acted_on_and_blocks_naming_it(
    ctx: testing.Context[ExampleCharm], caplog: pytest.LogCaptureFixture
):
    with (
        caplog.at_level(logging.WARNING),
        ctx(
            ctx.on.config_changed(),
            testing.State(config={"max-node-count": 0}, stored_states=INSTALLED.stored_states),
        ) as manager,
    ):
        state = manager.run()
        seen = manager.charm.seen

    assert seen == []
    assert "'max-node-count'" in caplog.text
    assert state.unit_status == ops.BlockedStatus(
        "invalid config option 'max-node-count': Input should be greater than or equal to 1"
    )


def test_parameters_are_parsed_once_per_dispatch_into_fields(ctx: testing.Context[ExampleCharm]):
    PARSED.clear()
    config = {"strict-parameters": "a=1", "lenient-parameters": "b=2"}
    state_in = testing.State(config=config, stored_states=INSTALLED.stored_states)
    with ctx(ctx.on.config_changed(), state_in) as manager:
        state = manager.run()
        seen = manager.charm.seen

    assert sorted(PARSED) == ["a=1", "b=2"]
    assert seen[0].strict_parameters == {"a": "1"}
    assert seen[0].lenient_parameters.get() == {"b": "2"}
    assert state.unit_status == ops.ActiveStatus()


def test_refused_strict_parameters_make_the_config_invalid(ctx: testing.Context[ExampleCharm]):
    state_in = testing.State(
        config={"strict-parameters": "bad=1"}, stored_states=INSTALLED.stored_states
    )
    state = ctx.run(ctx.on.config_changed(), state_in)

    assert state.unit_status == ops.BlockedStatus(
        "invalid config option 'strict-parameters': bad is refused"
    )


def test_refused_lenient_parameters_leave_the_other_options_applied(
    ctx: testing.Context[ExampleCharm],
):
    state_in = testing.State(
        config={"lenient-parameters": "bad=1", "max-node-count": 8},
        stored_states=INSTALLED.stored_states,
    )
    with ctx(ctx.on.config_changed(), state_in) as manager:
        state = manager.run()
        seen = manager.charm.seen

    assert seen[0].max_node_count == 8
    assert state.unit_status == ops.BlockedStatus("lenient-parameters: bad is refused")
