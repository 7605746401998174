"""Charmcraft's own entry point with only the base check of destructive builds switched off.

Run inside charmcraft's environment (``uv tool run --from charmcraft==<pinned> python
charmcraft_any_host.py pack ...``). Charmcraft (craft-application's
``LifecycleService._validate_build_plan``) refuses a destructive build for a base (ubuntu@24.04)
other than the host's; CI's host is Debian, so the pack check (tests/pack) skips that one check,
as the lab's build machine does (lab/src/slurm_lab/builder.py). Everything else, the ``--output``
refusal included, is charmcraft's own code. Only tests use it: `just pack` never does.
"""

# pyright: reportMissingImports=false

import sys

# Charmcraft's apt backend imports python3-apt, which comes from the host's packages (Debian's
# python3-apt for the host's python3; the lab's build machine sees it the same way).
# Only apt: the rest of that directory (Debian's OpenSSL...) must not shadow charmcraft's own.
sys.path.append("/usr/lib/python3/dist-packages")
import apt
import apt.cache
import apt.package
import apt.progress.base
import apt.progress.text  # noqa: F401
import apt_pkg  # noqa: F401

sys.path.remove("/usr/lib/python3/dist-packages")

from craft_application.services.lifecycle import LifecycleService

LifecycleService._validate_build_plan = lambda self: None  # type: ignore[method-assign]

from charmcraft.application.main import main  # noqa: E402

sys.exit(main())
