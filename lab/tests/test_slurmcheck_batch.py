"""The batch check: the base's Slurm judges each case of a batch, in one namespace, by itself.

Each refused case must be refused for its own file, with Slurm's words, while the good cases
of the same batch pass; the base must be left as it was.
"""

from __future__ import annotations

import os
import shutil

import pytest
from slurm_lab import rootfs, slurmcheck_batch
from slurm_lab.errors import LabError

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("unshare"),
        reason="the check needs root, the lab's base (debootstrap) and unshare",
    ),
]

SLURM_CONF = "ClusterName=c\nSlurmctldHost=ctl0\nAuthType=auth/slurm\nGresTypes=gpu\n"
SLURMDBD_CONF = (
    "AuthType=auth/slurm\nDbdHost=localhost\nStorageType=accounting_storage/mysql\n"
    "SlurmUser=slurm\n"
)


def test_each_case_is_judged_on_its_own_files():
    base = rootfs.ensure_base()
    before = sorted(os.listdir(base / "etc/slurm"))
    cases = [
        {"slurm.conf": SLURM_CONF, "cgroup.conf": "CgroupPlugin=autodetect\n"},
        {"slurm.conf": SLURM_CONF + "PriorityDecayHalfLife=14days\n"},
        {"slurm.conf": SLURM_CONF + "FirstJobId=100000\nMaxJobId=1000\n"},
        {"slurm.conf": SLURM_CONF, "gres.conf": "AutoDetect=nvidia\n"},
        {"slurm.conf": SLURM_CONF, "gres.conf": "Bogus=1\n"},
        {"slurm.conf": SLURM_CONF, "cgroup.conf": "Foo=bar\n"},
        {"slurmdbd.conf": SLURMDBD_CONF + "PurgeJobAfter=12months\n"},
        {"slurmdbd.conf": SLURMDBD_CONF + "PurgeJobAfter=12x\n"},
    ]

    verdicts = slurmcheck_batch.check(cases, base)

    assert [v.accepted for v in verdicts] == [True, False, False, True, False, False, True, False]
    assert "PriorityDecayHalfLife" in verdicts[1].messages
    assert "FirstJobId > MaxJobId" in verdicts[2].messages
    assert verdicts[4].messages.startswith("gres.conf:") and "Bogus" in verdicts[4].messages
    assert verdicts[5].messages.startswith("cgroup.conf:") and "Foo" in verdicts[5].messages
    assert "PurgeJobAfter" in verdicts[7].messages
    assert sorted(os.listdir(base / "etc/slurm")) == before


def test_a_file_slurm_is_not_asked_about_is_refused():
    with pytest.raises(LabError, match="cannot judge"):
        slurmcheck_batch.check([{"topology.conf": ""}], rootfs.ensure_base())
