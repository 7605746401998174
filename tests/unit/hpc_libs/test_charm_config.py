"""The config every Slurm charm shares, and how a bad option reaches the operator."""

import logging

import ops
import pydantic
import pytest
from hpc_libs.charm.config import (
    SlurmCharmConfig,
    config_problem,
    describe_validation_error,
    load_valid_config,
)
from ops import testing


class ExampleConfig(SlurmCharmConfig):
    max_node_count: int = pydantic.Field(default=1024, ge=1)


class ExampleCharm(ops.CharmBase):
    """Acts on valid config only and blocks naming the bad option."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.seen: list[ExampleConfig | None] = []
        framework.observe(self.on.config_changed, self._on_config_changed)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _on_config_changed(self, _: ops.EventBase) -> None:
        self.seen.append(load_valid_config(self, ExampleConfig))

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, ExampleConfig):
            event.add_status(ops.BlockedStatus(problem))
        event.add_status(ops.ActiveStatus())


OPTIONS = {
    "slurm-package-source": {"type": "string", "default": "auto"},
    "max-node-count": {"type": "int", "default": 1024},
}


@pytest.fixture
def ctx() -> testing.Context[ExampleCharm]:
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
        "invalid config option 'slurm-package-source': Input should be 'auto', 'ppa' or 'archive'"
    )


def test_an_error_about_no_single_option_names_the_config():
    error = pydantic.ValidationError.from_exception_data(
        "ExampleConfig", [{"type": "missing", "loc": (), "input": {}}]
    )

    assert describe_validation_error(error) == "invalid config option 'config': Field required"


def test_valid_config_is_loaded_and_leaves_the_status_alone(ctx: testing.Context[ExampleCharm]):
    with ctx(ctx.on.config_changed(), testing.State(config={"max-node-count": 8})) as manager:
        state = manager.run()
        seen = manager.charm.seen

    assert seen == [ExampleConfig(max_node_count=8)]
    assert state.unit_status == ops.ActiveStatus()


def test_an_invalid_option_is_not_acted_on_and_blocks_naming_it(
    ctx: testing.Context[ExampleCharm], caplog: pytest.LogCaptureFixture
):
    with (
        caplog.at_level(logging.WARNING),
        ctx(ctx.on.config_changed(), testing.State(config={"max-node-count": 0})) as manager,
    ):
        state = manager.run()
        seen = manager.charm.seen

    assert seen == [None]
    assert "'max-node-count'" in caplog.text
    assert state.unit_status == ops.BlockedStatus(
        "invalid config option 'max-node-count': Input should be greater than or equal to 1"
    )
