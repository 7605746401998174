"""Guards that tools/mutants.py checks can fail: key file mode while written.

slurmd's Port refusal is checked in tests/unit/slurmd/test_slurmd_guards.py."""

import os
from pathlib import Path
from typing import Any

import pytest
from hpc_libs.machine import files


def test_a_key_is_never_readable_by_others_while_its_bytes_are_written(
    tmp_path: Path, owners: dict[str, tuple[str, str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_fdopen = os.fdopen

    class Watched:
        def __init__(self, f: Any) -> None:
            self._f = f

        def __enter__(self) -> "Watched":
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.__exit__(*exc)

        def write(self, data: bytes) -> int:
            modes.append(os.fstat(self._f.fileno()).st_mode & 0o777)
            return self._f.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Watched(real_fdopen(fd, *a, **k)))

    files.write_atomic(tmp_path / "slurm.key", b"secret", mode=0o600, owner="slurm")

    assert modes and all(mode == 0o600 for mode in modes)
