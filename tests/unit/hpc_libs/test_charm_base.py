"""The shared skeleton: failures become statuses, the version check, install and upgrade."""

import gc
from collections.abc import Iterable

import ops
import pytest
from charm_testing import FakeMachine, already_installed
from hpc_libs.charm import base
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.slurm import version
from hpc_libs.slurm.sackd import SackdManager
from ops import testing


class ExampleCharm(SlurmCharm[SlurmCharmConfig]):
    def __init__(self, framework: ops.Framework) -> None:
        self.sackd = SackdManager()
        super().__init__(framework, config_type=SlurmCharmConfig, manager=self.sackd)

    def reconcile(self, config: SlurmCharmConfig) -> None:
        self.sackd.service.restart()

    def statuses(self, config: SlurmCharmConfig) -> Iterable[ops.StatusBase]:
        if not self.sackd.service.is_active():
            yield ops.BlockedStatus("sackd is not running")


OPTIONS = {"options": {"slurm-package-source": {"type": "string", "default": "archive"}}}


@pytest.fixture
def ctx() -> testing.Context[ExampleCharm]:
    return testing.Context(ExampleCharm, meta={"name": "example"}, config=OPTIONS)


INSTALLED = testing.State(stored_states={already_installed("ExampleCharm")})


def test_a_daemon_that_cannot_start_blocks_with_its_reason_and_is_retried(
    ctx: testing.Context[ExampleCharm], machine: FakeMachine
):
    machine.service_fails("sackd", "sackd: fatal: Hybrid mode is not supported")

    state = ctx.run(ctx.on.update_status(), INSTALLED)

    assert state.unit_status == ops.BlockedStatus(
        "sackd cannot restart: fatal: Hybrid mode is not supported"
    )
    machine.heal()
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus()


def test_secret_changed_tracks_the_newest_revision_then_reconciles(
    ctx: testing.Context[ExampleCharm], machine: FakeMachine
):
    key = testing.Secret({"key": "b2xk"}, latest_content={"key": "bmV3"})

    state = ctx.run(ctx.on.secret_changed(key), testing.State(
        secrets={key}, stored_states=INSTALLED.stored_states))  # fmt: skip

    assert state.get_secret(id=key.id).tracked_content == {"key": "bmV3"}
    assert machine.calls("restart") == ["sackd"]


def test_a_changed_secret_that_cannot_be_read_is_logged_and_the_reconcile_runs(
    ctx: testing.Context[ExampleCharm],
    machine: FakeMachine,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
):
    gone = testing.Secret({"key": "b2xk"})

    def removed(*args: object, **kwargs: object) -> dict[str, str]:
        raise ops.SecretNotFoundError(gone.id)

    monkeypatch.setattr(ops.Secret, "get_content", removed)
    ctx.run(ctx.on.secret_changed(gone), testing.State(
        secrets={gone}, stored_states=INSTALLED.stored_states))  # fmt: skip

    assert f"cannot track the newest revision of secret {gone.id}" in caplog.text
    assert machine.calls("restart") == ["sackd"]


def test_a_timed_out_command_waits(ctx: testing.Context[ExampleCharm], machine: FakeMachine):
    machine.active.add("sackd")
    machine.time_out("systemctl", "restart")

    state = ctx.run(ctx.on.config_changed(), INSTALLED)

    assert isinstance(state.unit_status, ops.WaitingStatus)
    assert "timed out" in state.unit_status.message


def test_a_failed_install_is_a_status_not_a_hook_error(
    ctx: testing.Context[ExampleCharm], machine: FakeMachine
):
    machine.apt_fails = True

    state = ctx.run(ctx.on.install(), testing.State())

    assert state.unit_status == ops.BlockedStatus(
        "cannot install ['sackd', 'slurm-client']: E: unable to fetch"
    )


def test_slurm_too_old_blocks_and_configures_nothing(
    ctx: testing.Context[ExampleCharm], machine: FakeMachine
):
    machine.version = "23.11.4-1.2ubuntu5"

    state = ctx.run(ctx.on.install(), testing.State())

    reason = version.unsupported_reason("23.11.4-1.2ubuntu5")
    assert reason is not None
    assert state.unit_status == ops.BlockedStatus(reason)
    assert machine.calls("restart") == []


def test_upgrade_charm_installs_again_to_refresh_the_version(
    ctx: testing.Context[ExampleCharm], machine: FakeMachine
):
    machine.installed.update({"sackd", "slurm-client"})
    machine.version = "24.11.6-1"

    state = ctx.run(ctx.on.upgrade_charm(), INSTALLED)

    assert state.workload_version == "24.11.6-1"
    assert state.unit_status == ops.ActiveStatus()


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        ("24.11.5-1", "24.11.5"),
        ("23.11.4-1.2ubuntu5", "23.11.4"),
        ("1:25.05.0-1", "25.05.0"),
        ("26.05.0~rc1-1", "26.05.0"),
    ],
)
def test_package_versions_parse(package: str, expected: str):
    assert str(version.parse(package)) == expected


def test_only_24_11_and_newer_are_supported():
    assert version.unsupported_reason("24.11.0-1") is None
    assert version.unsupported_reason("23.11.4-1.2ubuntu5") == (
        "Slurm 23.11.4 is older than 24.11: set slurm-package-source=ppa (ubuntu-hpc PPA) "
        "or use an archive with Slurm 24.11 or newer"
    )
    assert version.unsupported_reason("garbage") is not None


def test_main_dispatches_then_freezes_the_heap_for_a_quick_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dispatched: list[type[ops.CharmBase]] = []
    monkeypatch.setattr(ops, "main", dispatched.append)
    gc.unfreeze()

    try:
        base.main(ExampleCharm)
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()

    assert dispatched == [ExampleCharm]
    assert frozen > 0


def test_main_leaves_the_heap_to_the_collector_when_the_hook_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(charm_class: type[ops.CharmBase]) -> None:
        raise RuntimeError("the hook failed")

    monkeypatch.setattr(ops, "main", failing)
    gc.unfreeze()

    with pytest.raises(RuntimeError):
        base.main(ExampleCharm)

    assert gc.get_freeze_count() == 0
