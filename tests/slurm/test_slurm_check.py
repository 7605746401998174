"""Slurm's own parser judges the charms' files on a real controller (hpc_libs.slurm.check).

The charm's normal slurm.conf (rendered on the host by the slurmctld charm's own code) is
accepted by the controller's Slurm; the values of issue 20 that slurmctld refused at its next
restart are refused, quoting Slurm, and the live file is kept. slurmdbd.conf is judged by
slurmdbd through the real writer (SlurmdbdManager.write_config).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from incluster import Cluster

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

REPO = Path(__file__).resolve().parents[2]
REFUSED = {
    "PriorityDecayHalfLife=14days": 'Bad value "14days" for PriorityDecayHalfLife',
    "AcctGatherNodeFreq=65536": "AcctGatherNodeFreq value (65536) is greater than 65535",
    "JobCompPort=4294967296": "JobCompPort value (4294967296) is greater than 4294967295",
    "FirstJobId=100\nMaxJobId=50": "FirstJobId > MaxJobId",
    "MaxStepCount=0": "MaxStepCount=0, No steps permitted",
    "PriorityDecayHalfLife=0": "PriorityUsageResetPeriod",
}


def charm_slurm_conf() -> str:
    """slurm.conf as the slurmctld charm renders it for one controller and one partition."""
    sys.path.insert(0, str(REPO / "charms/slurmctld/src"))
    try:
        import placement  # pyright: ignore[reportMissingImports]
        import render  # pyright: ignore[reportMissingImports]
        from config import SlurmctldConfig  # pyright: ignore[reportMissingImports]
        from hpc_libs.interfaces.slurmctld_peer import ControllerHost, PartitionEntry
        from hpc_libs.slurm.partition import PartitionSpec
        from hpc_libs.slurm.slurmctld import SlurmctldManager

        partition = PartitionEntry.serving("compute", PartitionSpec(), 3)
        conf = render.render_slurm_conf(
            SlurmctldConfig(slurm_conf_parameters="MaxJobCount=20000\nMaxStepCount=100"),
            [ControllerHost(hostname="ctl", address="10.0.0.1")],
            {"compute": partition},
            [],
            # One controller, local state.
            {"statesavelocation": placement.LOCAL_STATE_SAVE_LOCATION},
        )
        return SlurmctldManager(Path("/nonexistent")).config.render(conf)
    finally:
        sys.path.remove(str(REPO / "charms/slurmctld/src"))


JUDGE = """
from pathlib import Path
from hpc_libs.slurm.check import SlurmRefusedError, check_with_slurm
result = {}
for name, text in args["texts"].items():
    try:
        check_with_slurm(text, directory=Path("/etc/slurm"), owner="slurm")
        result[name] = None
    except SlurmRefusedError as e:
        result[name] = e.reasons
result["left"] = sorted(p.name for p in Path("/etc/slurm").iterdir() if p.name.startswith("."))
"""


def test_slurm_accepts_the_charms_file_and_refuses_the_issues_values(cluster: Cluster):
    normal = charm_slurm_conf()
    texts = {"normal": normal, **{extra: normal + extra + "\n" for extra in REFUSED}}

    verdicts = cluster.py(cluster.controller, JUDGE, texts=texts)

    assert verdicts.pop("left") == []
    assert verdicts.pop("normal") is None
    for extra, says in REFUSED.items():
        assert any(says in reason for reason in verdicts[extra]), (extra, verdicts[extra])


def test_a_refused_slurm_conf_is_not_written_and_slurmctld_runs_on(cluster: Cluster):
    result = cluster.py(
        cluster.controller,
        """
        from hpc_libs.slurm.check import SlurmRefusedError
        from hpc_libs.slurm.slurmctld import SlurmctldManager
        manager = SlurmctldManager()
        before = manager.config.path.read_bytes()
        conf = manager.config.load()
        conf.max_step_count = 0
        try:
            manager.config.write(conf)
            result = {"refused": None}
        except SlurmRefusedError as e:
            result = {"refused": e.status_message()}
        result["kept"] = manager.config.path.read_bytes() == before
        result["active"] = manager.service.is_active()
        """,
    )

    assert result == {
        "refused": "Slurm refuses the new slurm.conf (the old one is kept): "
        "MaxStepCount=0, No steps permitted",
        "kept": True,
        "active": True,
    }


def test_slurmdbd_judges_slurmdbd_conf_through_the_writer(cluster: Cluster):
    result = cluster.py(
        cluster.controller,
        """
        import shutil
        from pathlib import Path
        from hpc_libs.slurm.check import SlurmRefusedError
        from hpc_libs.slurm.slurmdbd import (
            DbdHosts, SlurmdbdManager, StorageSettings, parse_parameters
        )
        root = Path("/tmp/slurmdbd-check")
        manager = SlurmdbdManager(root)
        storage = StorageSettings("10.0.0.5", 3306, "slurm_acct_db", "slurm", "pw")
        result = {}
        for text in args["texts"]:
            try:
                manager.write_config(DbdHosts("ctl"), storage, parse_parameters(text))
                result[text] = [line for line in manager.config.path.read_text().splitlines()
                                if line.startswith(("purge", "defaultqos"))]
            except SlurmRefusedError as e:
                result[text] = e.reasons
        shutil.rmtree(root)
        """,
        texts=["PurgeJobAfter=12 DefaultQOS=5", "ArchiveDir=/nonexistent ArchiveJobs=yes"],
    )

    assert sorted(result["PurgeJobAfter=12 DefaultQOS=5"]) == [
        "defaultqos=5",
        "purgejobafter=12months",
    ]
    refused = result["ArchiveDir=/nonexistent ArchiveJobs=yes"]
    assert any("/nonexistent" in reason for reason in refused), refused
