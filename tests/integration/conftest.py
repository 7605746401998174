"""The one `juju` fixture: real Juju (jubilant) when the juju CLI is on PATH, else the lab.

The same test files run on both. Set SLURM_LAB_BACKEND=lab to use the lab even where juju is
installed. On the lab every unit is a real machine (systemd, Slurm) running the `.charm`
charmcraft packed for the lab's suite (cached; `just lab-pack`): its `dispatch` and ops.main
with real hook tools (lab/README.md); see slurm_lab.juju.
The Slurm release under test is the lab machines' Debian suite: `trixie` (Slurm 24.11) or `forky`
(Debian testing, the newer Slurm: 26.05 today). A module names the releases it runs on in
`RELEASES` (default: trixie's only); one that runs on both is collected once per release, each
copy with a lab of its own, and xdist schedules the copies as separate modules. A module that
needs one release whatever the run asks names it in `LAB_SUITE` (the major upgrade: its origin,
trixie). SLURM_LAB_SUITE runs every other module on that one suite instead. The forky copies
carry the `newer_slurm` marker (`just integration-newer`: `-m newer_slurm`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jubilant
import pytest

REPO = Path(__file__).resolve().parents[2]
CHARM_DIRS = (REPO / "charms", REPO / "lab" / "tests" / "charms")
LONGEST_MODULES = (
    "test_rebuild_and_upgrade.py",
    "test_ha.py",
    "test_soak_short.py",
    "test_ha_worst_moment.py",
    "test_accounting_and_rest.py",
    "test_dynamic_nodes.py",
    "test_observability.py",
    "test_accounting_backup.py",
    "test_hostile_user.py",
    "test_operator_toolkit.py",
    "test_bench_lab_smoke.py",
    "test_ha_with_accounting.py",
    "test_node_health.py",
)
"""Started first when modules run in parallel (`just integration`), longest first, so that no long
module starts last (`pytest_xdist_make_scheduler`; the module timeline at the end of the run
shows what each worker ran and for how long). In CI (4 labs on 2 cores; 5 since stop 47): the
rolling rebuild and HA major upgrade on one 11-machine cluster about 15 (alone on the shared lab
host 10 with a 2.5-minute deploy, 16 when the load made the deploy 7), the failover suite 13-15
minutes, the dynamic-node suite 8-9, observability about 7 (alone: 11 before its test-sized
intervals), the worst-moment failover 5 to 9 (Slurm's 121 s requeue delay), the hostile user's
scenarios (one failover, one node reboot) 5 to 6 alone, the benchmark smoke run about 4 (alone:
12 before it left out the figures other modules prove; `just test` runs it beside the lab
steps). Accounting and REST, then directory users and the associations document on the same
cluster about 10.5 alone at load 9-14 (`ldap` and `sssd` about 4 of it, the document's four
scenarios 3.5). The rest take 1 to 4 minutes each. CI17 (stop 48), in minutes: rebuild 17.2,
failover 15.8, accounting and REST 12.9, dynamic nodes 10.4, observability 10.0, worst moment
5.6, accounting backup 4.9, hostile user 4.6, operator toolkit 4.5, key rotation 4.4, node
health 3.4. CI27 (stop 47): rebuild 12.6, failover 11.7, worst moment 8.5 (11.7 in CI21, since
its lost-end test), accounting and REST 8.3, dynamic nodes 6.5, observability 6.0; the worst
moment, started sixth, ended 14.5 minutes into the 16-minute phase: it now starts with the
longest. So does the soak's short seed, 11-12 minutes beside the lab steps (CI22, CI23) and 12.1
and 12.3 among the modules, six at a time since `just test` runs it there (CI30, CI31)."""
LONG_LAST_TEST = ("test_rebuild_and_upgrade.py", "test_ha_with_accounting.py")
"""Modules whose last test runs for minutes (the major upgrade of the HA cluster, about 5; the
key rotation, the HA-with-accounting module's last test, 5): a worker is handed its
next module when its last test starts, so after one of these it gets the shortest module left,
and the longest goes to the next worker that frees up (CI17: the key rotation's module, handed
to the rebuild's worker 5 minutes before it was free, ran last and alone for 2 minutes; CI18:
node health waited 5 minutes behind the key rotation and ended the phase)."""


NEWER_SUITE = "forky"
"""The suite of the newer Slurm (26.05 today): its tests carry the `newer_slurm` marker."""
RELEASE_IN_ID = re.compile(r"\[(?:.*-)?(trixie|forky)(?:-.*)?\]$")
"""The release in a test's id, where its module runs on more than one (`pytest_generate_tests`)."""


def module_releases(module: Any) -> tuple[str | None, ...]:
    """The suites a module's labs run in this run (None: no lab suite, real Juju).

    The module's `LAB_SUITE` (a release it needs), else $SLURM_LAB_SUITE (one release for the
    whole run), else the module's `RELEASES` (the matrix `just test` runs), else trixie.
    """
    if on_real_juju():
        return (None,)
    needed = getattr(module, "LAB_SUITE", None) or lab_suite()
    return (needed,) if needed else tuple(getattr(module, "RELEASES", ("trixie",)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module on more than one release: each test once per release, a lab per release."""
    releases = module_releases(metafunc.module)
    if len(releases) > 1 and "lab_release" in metafunc.fixturenames:
        metafunc.parametrize("lab_release", releases, indirect=True, scope="module", ids=str)


def item_release(item: pytest.Item) -> str | None:
    """The suite an item's lab runs."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "lab_release" in callspec.params:
        return callspec.params["lab_release"]
    return module_releases(getattr(item, "module", None))[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the newer Slurm's tests `newer_slurm`, and put the longest modules first; the order
    inside each module is kept (stable sort)."""
    for item in items:
        if item_release(item) == NEWER_SUITE:
            item.add_marker(pytest.mark.newer_slurm)
    rank = {name: position for position, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Modules to workers longest first, each as its worker frees up (`LongestFirst`)."""
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # xdist would sort modules by their test count

    class LongestFirst(LoadFileScheduling):
        """xdist's file scheduling, with the next module chosen when the worker needs it.

        A worker runs a test only once it knows the next one, so xdist hands a worker its next
        module early (when 2 tests are left), and at the start a one-test module got the next
        long module queued behind it while other workers freed up sooner. Here a worker gets
        the longest module left when its last test is about to run; a filler (the shortest
        module left) goes to a worker whose first module has a single test, at the start, and
        to one whose last test runs for minutes (`LONG_LAST_TEST`).
        """

        filler_round = False
        """Whether the first round runs: a worker that has a module already gets a filler."""

        def _split_scope(self, nodeid: str) -> str:
            """A module's file, and its release where it runs on more than one."""
            release = RELEASE_IN_ID.search(nodeid)
            scope = super()._split_scope(nodeid)
            return f"{scope}@{release.group(1)}" if release else scope

        def schedule(self) -> None:
            self.filler_round = self.collection is None
            super().schedule()
            self.filler_round = False

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
            elif self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

        def _assign_work_unit(self, node: Any) -> None:
            if (self.filler_round and self.assigned_work.get(node)) or self._ends_long(node):
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

        def _ends_long(self, node: Any) -> bool:
            """Whether the worker is about to run the last test of a `LONG_LAST_TEST` module."""
            return any(
                scope.split("@")[0].endswith(LONG_LAST_TEST) and not all(work.values())
                for scope, work in self.assigned_work.get(node, {}).items()
            )

    return LongestFirst(config, log)


TIMELINE = REPO / "build" / "integration-timeline.log"
"""When each module's lab came up and went down, and on which worker (printed at the end)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without xdist
        TIMELINE.parent.mkdir(exist_ok=True)
        TIMELINE.write_text(f"{time.time():.0f} start\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = TIMELINE.read_text().splitlines() if TIMELINE.is_file() else []
    if len(lines) > 1:
        began = float(lines[0].split()[0])
        terminalreporter.section("module timeline (minutes from the start)")
        for line in lines[1:]:
            stamp, rest = line.split(" ", 1)
            terminalreporter.write_line(f"{(float(stamp) - began) / 60:6.1f} {rest}")


@pytest.fixture(scope="module", autouse=True)
def timeline(request: pytest.FixtureRequest, lab_release: str | None) -> Iterator[None]:
    """Write the module's start and end to TIMELINE, with its worker, release and minutes."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"{request.module.__name__} ({lab_release or 'juju'})"
    began = time.time()
    with TIMELINE.open("a") as log:
        log.write(f"{began:.0f} {worker} {name} started\n")
    yield
    ended = time.time()
    with TIMELINE.open("a") as log:
        log.write(f"{ended:.0f} {worker} {name} ended after {(ended - began) / 60:.1f} min\n")


def on_real_juju() -> bool:
    """Whether the tests run against a real Juju controller."""
    backend = os.environ.get("SLURM_LAB_BACKEND", "")
    return backend != "lab" and (backend == "juju" or shutil.which("juju") is not None)


def charm_path(name: str) -> Path:
    """What to deploy for a charm: a packed .charm on real Juju, the charm's dir on the lab
    (which packs it with charmcraft for its machines and deploys that .charm).

    Real Juju takes $CHARM_<NAME>_PATH (dashes as underscores), else what `just pack` wrote
    (build/<name>_*.charm), else charms/<name>/*.charm; a test whose charm is not packed is
    skipped.
    """
    if on_real_juju():
        env = os.environ.get(f"CHARM_{name.upper().replace('-', '_')}_PATH")
        if env:
            return Path(env)
        packed = sorted((REPO / "build").glob(f"{name}_*.charm")) + sorted(
            p for d in CHARM_DIRS for p in (d / name).glob("*.charm") if (d / name).is_dir()
        )
        if not packed:
            pytest.skip(f"no packed {name} charm (set CHARM_{name.upper()}_PATH)")
        return packed[0]
    for directory in CHARM_DIRS:
        if (directory / name / "charmcraft.yaml").is_file():
            return directory / name
    raise FileNotFoundError(f"no charm directory for {name} under {CHARM_DIRS}")


@pytest.fixture(scope="session", name="charm_path")
def charm_path_fixture() -> Callable[[str], Path]:
    """The `charm_path` helper, as a fixture."""
    return charm_path


def lab_suite() -> str | None:
    """The lab suite asked for by $SLURM_LAB_SUITE (None: the lab's default, trixie)."""
    return os.environ.get("SLURM_LAB_SUITE") or None


@pytest.fixture(scope="module")
def lab_release(request: pytest.FixtureRequest) -> str | None:
    """The suite of the module's lab: the copy's release (`pytest_generate_tests`), else the
    module's only one (`module_releases`)."""
    return getattr(request, "param", None) or module_releases(request.module)[0]


def lab_usable() -> bool:
    """Whether this machine can run the lab: root, debootstrap and systemd-nspawn."""
    return (
        os.geteuid() == 0
        and shutil.which("debootstrap") is not None
        and shutil.which("systemd-nspawn") is not None
    )


@pytest.fixture(scope="module")
def juju(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    lab_release: str | None,
) -> Iterator[jubilant.Juju]:
    """A fresh model for the test module: a temporary Juju model, or a fresh lab."""
    if on_real_juju():
        with jubilant.temp_model() as real:
            real.wait_timeout = 20 * 60
            yield real
            if request.session.testsfailed:
                print(real.debug_log(limit=1000), end="")
        return
    if not lab_usable():
        pytest.skip("no juju CLI, and the lab needs root, debootstrap and systemd-nspawn")
    from slurm_lab.juju import LabJuju
    from slurm_lab.machines import Lab

    lab = Lab(tmp_path_factory.mktemp("lab"), suite=lab_release)
    backend = LabJuju(lab, wait_timeout=20 * 60)
    try:
        yield backend
        if request.session.testsfailed:
            print(backend.dump_logs(), end="")
    finally:
        lab.down()
