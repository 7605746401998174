"""GPU detection scenarios: Slurm detects (`slurmd -C`), the charm keeps the last known Gres.

Detection runs at first need (install), start, upgrade-charm and the `detect-hardware`
action only. A failure (driver loaded but no GPU found, a command error, a timeout) never
drains or re-registers the node: it keeps its Gres and the unit is blocked with the reason.
"""

import json
from pathlib import Path

import pytest
from hpc_libs.machine import apt
from ops import testing
from test_charm_slurmd import (
    again,
    auth_secret,
    controller_relation,
    installed,
    options,
    scontrol_changes,
    stored,
)

CPU_ONLY = (
    "NodeName=host0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=1000\nUpTime=0-01:00:00\n"
)
TWO_T4 = (
    "NodeName=host0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=1000 Gres=gpu:tesla_t4:2\n"
    "Found gpu:tesla_t4:2 with Autodetect=nvidia (Substring of gpu name may be used instead)\n"
    "UpTime=0-01:00:00\n"
)
SEVERAL_MODELS = TWO_T4.replace("Gres=gpu:tesla_t4:2", "Gres=gpu:tesla_t4:2,gpu:a100:1")
DRIVER_FAILED = "NVIDIA driver loaded but Slurm found no GPU"


def load_driver(root: Path) -> None:
    """The NVIDIA kernel driver is loaded on the (fake) machine."""
    (root / "proc/driver/nvidia/gpus").mkdir(parents=True, exist_ok=True)


@pytest.fixture
def gpu_node(machine, tmp_path, request: pytest.FixtureRequest) -> testing.State:
    """A unit whose node enlisted with two T4 GPUs; records then cleared."""
    load_driver(tmp_path)
    machine.responses[("slurmd", "-C")] = TWO_T4
    return request.getfixturevalue("enlisted")


def assert_node_untouched(machine, tmp_path, before_conf: str) -> None:
    """No drain, no re-registration, no restart, the same --conf."""
    assert options(tmp_path)["SLURMD_CONF"] == before_conf
    assert scontrol_changes(machine) == []
    assert machine.ran("systemd-run") == []
    assert machine.calls("restart") == []


# Detection results.


def test_no_gpu_driver_means_a_node_without_gres(ctx, machine, tmp_path):
    machine.responses[("slurmd", "-C")] = CPU_ONLY
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert "gres" not in options(tmp_path)["SLURMD_CONF"]
    assert "Gres" not in json.loads(stored(out)["hardware"])
    assert machine.ran("nvidia-smi") == []  # Only a failed driver is asked for its words.
    assert out.unit_status == testing.ActiveStatus()


def test_gpus_slurm_detects_are_the_node_gres(ctx, machine, tmp_path, gpu_node):
    assert "gres=gpu:tesla_t4:2" in options(tmp_path)["SLURMD_CONF"]
    assert json.loads(stored(gpu_node)["hardware"])["Gres"] == "gpu:tesla_t4:2"
    assert gpu_node.unit_status == testing.ActiveStatus()


def test_several_gpu_models_are_all_declared(ctx, machine, tmp_path):
    load_driver(tmp_path)
    machine.responses[("slurmd", "-C")] = SEVERAL_MODELS
    secret = auth_secret()
    relation = controller_relation(secret)

    ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert "gres=gpu:tesla_t4:2,gpu:a100:1" in options(tmp_path)["SLURMD_CONF"]


def test_detection_commands_have_timeouts(ctx, machine, tmp_path, gpu_node):
    machine.responses[("slurmd", "-C")] = CPU_ONLY  # Driver loaded, no GPU: nvidia-smi asked.

    ctx.run(ctx.on.start(), gpu_node)

    timeouts = {command[0]: timeout for command, timeout in machine.timeouts}
    assert 0 < timeouts["slurmd"] <= 60
    assert 0 < timeouts["nvidia-smi"] <= 30


# Failures keep the node as it is.


def test_a_failed_driver_keeps_the_gres_and_blocks_without_draining(
    ctx, machine, tmp_path, gpu_node
):
    before = options(tmp_path)["SLURMD_CONF"]
    machine.responses[("slurmd", "-C")] = CPU_ONLY
    machine.responses[("nvidia-smi",)] = "Unable to determine the device handle for GPU0\n"

    out = ctx.run(ctx.on.start(), gpu_node)

    assert_node_untouched(machine, tmp_path, before)
    assert json.loads(stored(out)["hardware"])["Gres"] == "gpu:tesla_t4:2"
    assert stored(out)["registered"] == stored(gpu_node)["registered"]
    assert out.unit_status.name == "blocked"
    assert DRIVER_FAILED in out.unit_status.message
    assert "Unable to determine the device handle" in out.unit_status.message


def test_the_failure_stays_the_status_until_a_detection_succeeds(ctx, machine, tmp_path, gpu_node):
    machine.responses[("slurmd", "-C")] = CPU_ONLY
    failed = ctx.run(ctx.on.start(), gpu_node)

    later = ctx.run(ctx.on.update_status(), again(failed))

    assert DRIVER_FAILED in later.unit_status.message
    assert scontrol_changes(machine) == []
    machine.responses[("slurmd", "-C")] = TWO_T4
    fixed = ctx.run(ctx.on.action("detect-hardware"), again(later))
    assert fixed.unit_status == testing.ActiveStatus()
    assert stored(fixed)["detection_error"] == ""
    assert scontrol_changes(machine) == []  # Same Gres as before: nothing to change.


@pytest.mark.parametrize(
    "failure",
    [
        (
            lambda m: m.fail("slurmd", "-C", returncode=139, stderr="Segmentation fault"),
            "hardware detection failed, node config kept",
        ),
        (lambda m: m.time_out("slurmd", "-C"), "timed out"),
    ],
    ids=["error", "timeout"],
)
def test_a_failed_detection_keeps_the_gres(ctx, machine, tmp_path, gpu_node, failure):
    """`failure`: how `slurmd -C` fails, and what the status says of it."""
    fail, said = failure
    before = options(tmp_path)["SLURMD_CONF"]
    fail(machine)

    out = ctx.run(ctx.on.start(), gpu_node)

    assert_node_untouched(machine, tmp_path, before)
    assert json.loads(stored(out)["hardware"])["Gres"] == "gpu:tesla_t4:2"
    assert out.unit_status.name == "blocked"
    assert said in out.unit_status.message


def test_the_action_reports_a_failure_and_changes_nothing(ctx, machine, tmp_path, gpu_node):
    before = options(tmp_path)["SLURMD_CONF"]
    machine.responses[("slurmd", "-C")] = CPU_ONLY

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("detect-hardware"), gpu_node)

    assert DRIVER_FAILED in failure.value.message
    assert_node_untouched(machine, tmp_path, before)


# When detection runs.


@pytest.mark.parametrize(
    "event",
    ["update_status", "config_changed", "leader_elected", "relation_changed"],
)
def test_other_events_do_not_detect(ctx, machine, gpu_node, event):
    machine.responses[("slurmd", "-C")] = CPU_ONLY  # A detection would now fail.
    if event == "relation_changed":
        out = ctx.run(ctx.on.relation_changed(gpu_node.get_relations("slurmctld")[0]), gpu_node)
    else:
        out = ctx.run(getattr(ctx.on, event)(), gpu_node)

    assert machine.ran("slurmd", "-C") == []
    assert out.unit_status == testing.ActiveStatus()


def test_upgrade_charm_detects_and_a_failure_keeps_the_gres(
    ctx, machine, tmp_path, gpu_node, monkeypatch
):
    # The install step of upgrade-charm may pass apt options the fake does not know.
    monkeypatch.setattr(
        apt, "install", lambda packages, upgrade=False, **_: machine.apt_install(packages)
    )
    before = options(tmp_path)["SLURMD_CONF"]
    machine.responses[("slurmd", "-C")] = CPU_ONLY

    out = ctx.run(ctx.on.upgrade_charm(), gpu_node)

    assert len(machine.ran("slurmd", "-C")) == 1
    assert_node_untouched(machine, tmp_path, before)
    assert DRIVER_FAILED in out.unit_status.message


def test_start_detects_once(ctx, machine, gpu_node):
    ctx.run(ctx.on.start(), gpu_node)

    assert len(machine.ran("slurmd", "-C")) == 1


def test_gpus_found_on_request_register_the_node_again(ctx, machine, tmp_path):
    machine.responses[("slurmd", "-C")] = CPU_ONLY
    secret = auth_secret()
    relation = controller_relation(secret)
    cpu_node = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))
    machine.commands.clear()
    load_driver(tmp_path)  # The driver was installed and the machine rebooted.
    machine.responses[("slurmd", "-C")] = TWO_T4

    out = ctx.run(ctx.on.action("detect-hardware"), cpu_node)

    assert out.unit_status.name != "blocked"
    assert ctx.action_results == {
        "node": "slurmd-0",
        "gres": "gpu:tesla_t4:2",
        "changed": True,
        "hardware": (
            "CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
            "RealMemory=1000 Gres=gpu:tesla_t4:2"
        ),
    }
    assert "gres=gpu:tesla_t4:2" in options(tmp_path)["SLURMD_CONF"]
    drains = [c for c in machine.ran("scontrol", "update") if "state=drain" in c]
    assert len(drains) == 1  # New hardware: drained, then registered again once idle.
    assert machine.ran("systemd-run")


# The optional driver install (Ubuntu).


def ubuntu(root: Path) -> None:
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n')


def test_nvidia_driver_is_installed_once_and_asks_for_a_reboot(ctx, machine, tmp_path):
    ubuntu(tmp_path)
    machine.responses[("slurmd", "-C")] = CPU_ONLY
    state = installed(controller_relation(), config={"nvidia-driver": True})

    out = ctx.run(ctx.on.config_changed(), state)
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run/reboot-required").write_text("*** System restart required ***\n")
    later = ctx.run(ctx.on.update_status(), again(out))

    assert ["ubuntu-drivers-common"] in machine.apt_installs
    assert len(machine.ran("ubuntu-drivers", "install")) == 1
    timeout = next(t for c, t in machine.timeouts if c[:2] == ["ubuntu-drivers", "install"])
    assert timeout >= 600
    assert later.unit_status == testing.BlockedStatus(
        "NVIDIA driver installed: reboot the machine to load it"
    )


def test_nvidia_driver_install_failure_is_retried(ctx, machine, tmp_path):
    ubuntu(tmp_path)
    machine.fail("ubuntu-drivers", stderr="ERROR: no driver found")
    state = installed(controller_relation(), config={"nvidia-driver": True})

    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "blocked"
    machine.heal()
    again_out = ctx.run(ctx.on.update_status(), again(out))

    assert len(machine.ran("ubuntu-drivers", "install")) == 2
    assert stored(again_out)["driver_installed"] is True


def test_nvidia_driver_needs_ubuntu(ctx, machine, tmp_path):
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/os-release").write_text("ID=debian\n")
    state = installed(controller_relation(), config={"nvidia-driver": True})

    out = ctx.run(ctx.on.config_changed(), state)

    assert machine.ran("ubuntu-drivers") == []
    assert out.unit_status.name == "blocked"
    assert "needs Ubuntu" in out.unit_status.message


def test_without_the_option_no_driver_is_installed(ctx, machine, tmp_path, gpu_node):
    ubuntu(tmp_path)

    ctx.run(ctx.on.config_changed(), gpu_node)

    assert machine.ran("ubuntu-drivers") == []


# GPU keys of partition-config.


def test_partition_config_takes_gpu_keys(ctx, machine):
    relation = controller_relation()
    state = installed(
        relation,
        config={"partition-config": "DefCpuPerGPU=4 DefMemPerGPU=8000 MaxCPUsPerNode=32"},
    )

    out = ctx.run(ctx.on.config_changed(), state)

    published = json.loads(out.get_relation(relation.id).local_app_data["partition"])
    assert published["defcpupergpu"] == 4
    assert published["defmempergpu"] == 8000
    assert published["maxcpuspernode"] == 32
    assert out.unit_status.name != "blocked"


def test_partition_config_refuses_a_bad_gpu_value(ctx, machine):
    state = installed(controller_relation(), config={"partition-config": "DefCpuPerGPU=-1"})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status.name == "blocked"
    assert "DefCpuPerGPU".lower() in out.unit_status.message.lower()
