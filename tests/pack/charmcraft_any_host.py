"""Charmcraft's own entry point with only the base check of destructive builds switched off.

Run inside charmcraft's environment (``uv tool run --from charmcraft==<pinned> python
charmcraft_any_host.py pack ...``). Charmcraft (craft-application's
``LifecycleService._validate_build_plan``) refuses a destructive build for a base (ubuntu@24.04)
other than the host's; CI's host is Debian, so the pack check (tests/pack) skips that one check,
as the lab's build machine does (lab/src/slurm_lab/builder.py). The host provides what a build
machine would: python3-apt and python3-dev (tools/bootstrap.sh), and uv for the part's
astral-uv snap, as craft-parts expects in a container. Everything else, the ``--output``
refusal included, is charmcraft's own code. Only tests use it: `just pack` never does.
"""

# pyright: reportMissingImports=false
# ruff: noqa: E402

import sys

# Charmcraft's apt backend imports python3-apt, Debian's package for the host's python3 (the
# lab's build machine sees it the same way). Only apt is taken from that directory: the rest
# (Debian's OpenSSL...) must not shadow charmcraft's own dependencies.
DIST_PACKAGES = "/usr/lib/python3/dist-packages"
sys.path.append(DIST_PACKAGES)
try:
    import apt
    import apt.cache
    import apt.package
    import apt.progress.base
    import apt.progress.text
    import apt_pkg
except ImportError as e:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    sys.exit(f"charmcraft_any_host: no python3-apt for CPython {version} in {DIST_PACKAGES}: {e}")
sys.path.remove(DIST_PACKAGES)
del apt, apt_pkg  # loaded, in sys.modules, for charmcraft to import

from craft_application.services.lifecycle import LifecycleService
from craft_parts.utils import os_utils

LifecycleService._validate_build_plan = lambda self: None  # type: ignore[method-assign]

# The part's build-snaps (astral-uv): uv is on PATH beforehand, which craft-parts expects in a
# container (it then only warns). This host is one (/.dockerenv); a CI host that is not has
# no snapd to install them with either.
if not os_utils.is_inside_container():
    os_utils.is_inside_container = lambda: True

from charmcraft.application.main import main

sys.exit(main())
