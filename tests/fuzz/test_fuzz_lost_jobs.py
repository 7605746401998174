"""The lost-jobs scanner on hostile state directories (issue 37, item 3).

SlurmUser writes StateSaveLocation: hypothesis builds trees of `hash.*` entries holding
names Slurm writes and names it never writes (leading zeros, signs, huge ids, ids in the
wrong hash, Unicode digits, new lines), as directories, files, FIFOs and symbolic links to
directories and files outside, with `script` and `environment` as links, FIFOs, hard links,
unframed scripts and environments, files owned by another uid, and oversized ones.

* `batch_dir_ids` lists exactly the real directories named `job.<id>` as Slurm names them, in
  real `hash.<id % 10>` directories of SlurmUser's, and never raises on such a tree;
* `read_batch_dir` proves a directory only when every piece is SlurmUser's own regular file
  or directory, no link, and never returns a byte from outside the state directory;
* a huge hash directory is read up to `MAX_ENTRIES` names and said to be partial.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import harness
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

lost_jobs = harness.modules("slurmctld")["lost_jobs"]

OUTSIDE = b"#!/bin/sh\n# outside the state directory\n\0"
GOOD_ENV = struct.pack("=I", 2) + b"A=1\0B=2\0"
NAMES = st.one_of(
    st.integers(1, 2**32 + 5).map(lambda n: f"job.{n}"),
    st.sampled_from(
        ["job.0", "job.07", "job.+7", "job.-7", "job.7 ", "job.7\n", "job.\u0667", "job.", "job"]
    ),
    st.text(max_size=12).filter(
        lambda t: "/" not in t and "\0" not in t and t not in (".", "..", "")
    ),
)
KINDS = st.sampled_from(["dir", "file", "fifo", "link-dir", "link-file"])
PIECES = st.sampled_from(
    ["good", "link", "fifo", "dir", "missing", "hardlink", "unframed", "huge", "other-owner"]
)


def _make(where: Path, kind: str, outside: Path) -> None:
    if kind == "dir":
        where.mkdir()
    elif kind == "file":
        where.write_bytes(b"x")
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "link-dir":
        where.symlink_to(outside)
    else:
        where.symlink_to(outside / "script")


def _piece(job: Path, name: str, kind: str, outside: Path, owner_of: dict[Path, int]) -> None:
    path = job / name
    data = b"#!/bin/sh\ntrue\n\0" if name == "script" else GOOD_ENV
    if kind == "good":
        path.write_bytes(data)
    elif kind == "link":
        path.symlink_to(outside / name)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "hardlink":
        os.link(outside / name, path)
    elif kind == "unframed":
        path.write_bytes(struct.pack("=I", 5) + b"A=1\0" if name == "environment" else b"a\0b\0")
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(lost_jobs.MAX_FILE + 1)
    elif kind == "other-owner":
        path.write_bytes(data)
        owner_of[path] = 1
    # "missing": nothing.


def _expected_id(name: str, hash_index: int) -> int | None:
    match = re.fullmatch(r"job\.([1-9][0-9]{0,9})", name, flags=re.ASCII)
    if match is None:
        return None
    job_id = int(match[1])
    return job_id if job_id <= lost_jobs.MAX_JOB_ID and job_id % 10 == hash_index else None


def _outside(factory: pytest.TempPathFactory) -> Path:
    """A directory outside the state directory, with a script and environment of its own."""
    where = factory.mktemp("outside")
    (where / "script").write_bytes(OUTSIDE)
    (where / "environment").write_bytes(GOOD_ENV)
    return where


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _outside(tmp_path_factory)


@given(
    entries=st.lists(
        st.tuples(st.integers(0, 11), NAMES, KINDS, PIECES, PIECES),
        max_size=25,
        unique_by=lambda e: (e[0], e[1]),
    )
)
@example(entries=[(7, "job.7", "dir", "good", "good"), (7, "job.17", "link-dir", "good", "good")])
@example(entries=[(7, "job.7", "dir", "link", "good"), (3, "job.13", "dir", "good", "hardlink")])
def test_the_scanner_proves_only_slurms_own_batch_directories(
    tmp_path_factory: pytest.TempPathFactory, entries
):
    outside = _outside(tmp_path_factory)
    root = tmp_path_factory.mktemp("root")
    state = root / "state"
    state.mkdir()
    owner = os.getuid()
    owner_of: dict[Path, int] = {}
    expected: set[int] = set()
    proven: set[int] = set()
    (state / "hash.5").symlink_to(outside)  # A hash directory that is a link is not read.
    for hash_index, name, kind, script, environment in entries:
        hash_dir = state / f"hash.{hash_index}"
        hash_dir.mkdir(exist_ok=True)
        where = hash_dir / name
        if hash_index == 5 or where.exists() or where.is_symlink():
            continue
        _make(where, kind, outside)
        job_id = _expected_id(name, hash_index)
        if job_id is None or kind != "dir":
            continue
        expected.add(job_id)
        _piece(where, "script", script, outside, owner_of)
        _piece(where, "environment", environment, outside, owner_of)
        if script == environment == "good":
            proven.add(job_id)

    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        """Files marked `other-owner` are another uid's (the test need not be root)."""
        info = real_fstat(fd)
        marked = {(p.stat().st_dev, p.stat().st_ino) for p in owner_of}
        if (info.st_dev, info.st_ino) in marked:
            values = list(info)
            values[4] = owner + 1
            return os.stat_result(values)
        return info

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lost_jobs.os, "fstat", fstat)
        ids, whole = lost_jobs.batch_dir_ids(state, under=root, owner=owner)
        assert whole
        assert sorted(ids) == sorted(expected)
        for job_id in ids:
            read = lost_jobs.read_batch_dir(state, job_id, under=root, owner=owner, before=2**40)
            if job_id in proven:
                assert isinstance(read, lost_jobs.BatchDir)
                assert read.script != OUTSIDE and read.environment == GOOD_ENV
            else:
                assert isinstance(read, str), (job_id, read)


def test_a_huge_hash_directory_is_read_up_to_the_bound(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(lost_jobs, "MAX_ENTRIES", 50)
    hash_dir = tmp_path / "state" / "hash.7"
    hash_dir.mkdir(parents=True)
    for n in range(200):
        (hash_dir / f"job.{n * 10 + 7}").mkdir()

    ids, whole = lost_jobs.batch_dir_ids(tmp_path / "state", under=tmp_path, owner=os.getuid())

    assert not whole
    assert len(ids) == 50


def test_a_state_directory_that_is_a_link_is_not_read(tmp_path: Path, outside: Path):
    (outside / "hash.7" / "job.7").mkdir(parents=True)
    (tmp_path / "state").symlink_to(outside)

    with pytest.raises(lost_jobs.SlurmOpsError):
        lost_jobs.batch_dir_ids(tmp_path / "state", under=tmp_path, owner=os.getuid())
