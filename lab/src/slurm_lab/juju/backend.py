"""`LabJuju`: the subset of `jubilant.Juju` the integration tests use, backed by the lab.

Every unit gets its own lab machine; its charm's hooks run inside that machine (see
`slurm_lab.juju.engine`, whose docstring lists how the lab still differs from Juju). Calls that
change the model run the resulting hooks before they return, except hooks still running after
`HOOK_GRACE` seconds, which go on in the background; `wait` also fires update-status every
`update_status_interval` seconds (300 by default, as on Juju), retries failed hooks when due
and runs the charm events machines dispatch with `juju-exec`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import math
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, overload

import jubilant
import yaml
from jubilant import ConfigValue, ConstraintValue, Status, Task, TaskError, WaitError

from slurm_lab import gpu
from slurm_lab.errors import LabError
from slurm_lab.juju import actionparams, charms, commit, juju_exec, lifecycle, runner
from slurm_lab.juju import model as store
from slurm_lab.juju.cos import CosCollector
from slurm_lab.juju.engine import Controller
from slurm_lab.juju.hooks import LabLike
from slurm_lab.juju.model import App, Endpoint, ModelState, Relation, Unit
from slurm_lab.juju.mysql import MysqlStandIn
from slurm_lab.juju.prometheus import PrometheusStandIn
from slurm_lab.juju.shell import command_string
from slurm_lab.juju.standins.directory import LdapStandIn, SssdStandIn
from slurm_lab.juju.status import build_status

LAB_GPUS_CONSTRAINT = "lab-gpus"
LAB_GPUS_FILE = "lab-gpus.json"
EXEC_POLL = 0.2
SSH_TIMEOUT = 300.0
"""Seconds between looks at a busy unit by an `exec` waiting for its hook."""
VIRT_TYPE_CONSTRAINT = "virt-type"
VIRT_TYPES = {"container": "container", "virtual-machine": "vm"}
"""Juju's `virt-type` values (LXD clouds) and the lab machine kind each gives the units."""


def cli_error(*argv: str, message: str) -> jubilant.CLIError:
    """Build the error jubilant raises when the juju command fails."""
    return jubilant.CLIError(1, ["juju", *argv], "", f"ERROR {message}\n")


class LabJuju(jubilant.Juju):
    """A jubilant.Juju whose model lives on the lab (no juju CLI involved)."""

    def __init__(
        self,
        lab: LabLike | None = None,
        *,
        model: str = "lab",
        wait_timeout: float = 15 * 60.0,
        update_status_interval: float = 300.0,
        charms_mount: str = "/lab/charms",
    ) -> None:
        super().__init__(model=model, wait_timeout=wait_timeout, cli_binary="juju")
        if lab is None:
            from slurm_lab.machines import Lab  # noqa: PLC0415

            lab = Lab()
        self.lab: LabLike = lab
        self.update_status_interval = update_status_interval
        self._dir = Path(lab.state_dir) / "juju"
        self._file = self._dir / "model.json"
        self._depth = 0
        self._threads = threading.RLock()  # one thread in a session at a time (nested: same)
        self._lock_handle: Any = None
        state = store.load(self._file)
        if state is None or not self._machines_alive(state):
            state = ModelState(name=model, uuid=str(uuid.uuid4()))
            store.save(state, self._file)
        self.ctl = Controller(state, lab, self._dir / "logs", self._save, charms_mount)
        self._last_update_status = time.monotonic()
        from slurm_lab.juju.fsclient import FilesystemClient  # noqa: PLC0415

        self.ctl.builtin[FilesystemClient.KIND] = FilesystemClient(self.ctl).handle
        # Stand-in for the COS collector subordinate (slurm_lab.juju.cos).
        self.ctl.builtin[CosCollector.KIND] = CosCollector(self.ctl).handle
        # Stand-in for the mysql charm (slurm_lab.juju.mysql).
        self.ctl.builtin[MysqlStandIn.KIND] = MysqlStandIn(self.ctl).handle
        # Stand-in for COS's Prometheus, receiving remote write (slurm_lab.juju.prometheus).
        self.ctl.builtin[PrometheusStandIn.KIND] = PrometheusStandIn(self.ctl).handle
        # Stand-ins for a directory: slapd and the SSSD subordinate (standins.directory).
        self.ctl.builtin[LdapStandIn.KIND] = LdapStandIn(self.ctl).handle
        self.ctl.builtin[SssdStandIn.KIND] = SssdStandIn(self.ctl).handle
        atexit.register(self._finish_background_hooks)

    def _finish_background_hooks(self) -> None:
        """At exit: wait for this process's background hooks and apply their results."""
        if self.ctl.busy:
            with self._session():
                self.ctl.drain(grace=math.inf)

    def _machines_alive(self, state: ModelState) -> bool:
        """Whether every unit's machine still exists (`slurm-lab down` removes them)."""
        names = {machine.name for machine in self.lab.machines()}
        return all(unit.machine in names for unit in state.units.values())

    def __repr__(self) -> str:
        return f"LabJuju(model={self.model!r}, state_dir={str(self.lab.state_dir)!r})"

    @property
    def state(self) -> ModelState:
        """The model's current state (read-only use, please)."""
        return self.ctl.model

    # --- persistence and locking ---------------------------------------------------------------

    def _save(self) -> None:
        store.save(self.ctl.model, self._file)

    @contextlib.contextmanager
    def _session(self) -> Iterator[ModelState]:
        """Exclusive use of the model across processes and threads; reloads it, saves it after.

        Threads: a test may `exec` from a thread of its own while its main thread goes on.
        """
        with self._threads:
            if self._depth:
                self._depth += 1
                try:
                    yield self.ctl.model
                finally:
                    self._depth -= 1
                return
            self._dir.mkdir(parents=True, exist_ok=True)
            with (self._dir / "model.lock").open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                loaded = store.load(self._file)
                if loaded is not None:
                    self.ctl.model = loaded
                self._depth = 1
                try:
                    self.ctl.drain()  # what came due meanwhile: retries, juju-exec, ended hooks
                    yield self.ctl.model
                    self.ctl.drain()
                finally:
                    self._depth = 0
                    self._save()

    # --- unsupported: there is no juju CLI -------------------------------------------------------

    def cli(self, *args: str, include_model: bool = True, stdin: str | None = None) -> str:
        """Not available: the lab has no juju CLI."""
        raise NotImplementedError(f"the lab backend has no juju CLI (juju {shlex.join(args)})")

    def _cli(self, *args: str, **kwargs: Any) -> tuple[str, str]:
        raise NotImplementedError(f"the lab backend has no juju CLI (juju {shlex.join(args)})")

    # --- names -----------------------------------------------------------------------------------

    def _app(self, name: str, *argv: str) -> App:
        app = self.ctl.model.apps.get(name)
        if app is None:
            raise cli_error(*argv, message=f'application "{name}" not found')
        return app

    def _unit(self, name: str) -> Unit:
        model = self.ctl.model
        if name.endswith("/leader"):
            leader = model.apps.get(name.split("/", maxsplit=1)[0])
            name = leader.leader if leader and leader.leader else name
        unit = model.units.get(name)
        if unit is None:
            raise ValueError(f'unit "{name}" not found')
        return unit

    # --- deploy and scale ------------------------------------------------------------------------

    def deploy(
        self,
        charm: str | Path,
        app: str | None = None,
        *,
        attach_storage: str | Iterable[str] | None = None,
        base: str | None = None,
        bind: Mapping[str, str] | str | None = None,
        channel: str | None = None,
        config: Mapping[str, ConfigValue] | None = None,
        constraints: Mapping[str, ConstraintValue] | None = None,
        force: bool = False,
        num_units: int = 1,
        overlays: Iterable[str | Path] = (),
        resources: Mapping[str, str] | None = None,
        revision: int | None = None,
        storage: Mapping[str, str] | None = None,
        to: str | Iterable[str] | None = None,
        trust: bool = False,
    ) -> None:
        """Deploy a local charm directory, a bundle file, or the filesystem-client stand-in.

        The constraint `virt-type=virtual-machine` (Juju's, on LXD clouds) gives the
        application's units VMs that boot their own kernel (`slurm_lab.vm`; add-unit too),
        `container` or none gives them containers. Lab only: the constraint `lab-gpus` (`N` or
        `N:<model>`, see `slurm_lab.gpu`) gives every machine of the application N simulated
        NVIDIA GPUs (add-unit too).
        """
        path = Path(charm)
        with self._session():
            if path.suffix in (".yaml", ".yml") and path.is_file():
                self._deploy_bundle(path)
                return
            self._deploy_app(
                charm, app, config=config, num_units=num_units, constraints=constraints
            )

    # Lab-only simulated GPUs, per application (kept beside the model, not in it).

    def _set_lab_gpus(self, app: str, constraints: Mapping[str, ConstraintValue] | None) -> None:
        value = (constraints or {}).get(LAB_GPUS_CONSTRAINT)
        specs = self._lab_gpus()
        if value is None:
            specs.pop(app, None)
        else:
            spec = gpu.GpuSpec.parse(str(value))
            specs[app] = {"count": spec.count, "model": spec.model}
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / LAB_GPUS_FILE).write_text(json.dumps(specs, sort_keys=True))

    def _lab_gpus(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads((self._dir / LAB_GPUS_FILE).read_text())
        except FileNotFoundError:
            return {}

    def lab_gpu_spec(self, app: str) -> gpu.GpuSpec | None:
        """Return the simulated GPUs of the application's machines (lab only), if any."""
        fields = self._lab_gpus().get(app)
        return gpu.GpuSpec(**fields) if fields else None

    def _deploy_app(
        self,
        charm: str | Path,
        app: str | None,
        *,
        config: Mapping[str, ConfigValue] | None,
        num_units: int,
        base_dir: Path | None = None,
        constraints: Mapping[str, ConstraintValue] | None = None,
    ) -> App:
        from slurm_lab.juju.fsclient import FilesystemClient  # noqa: PLC0415

        model = self.ctl.model
        charm_dir = _find_charm(str(charm), base_dir or Path.cwd())
        # The subordinate stand-ins: filesystem-client and the COS collector.
        standin = {c.KIND: c for c in (FilesystemClient, CosCollector, SssdStandIn)}.get(
            Path(str(charm)).name
        )
        if charm_dir is None and standin is not None:
            new = standin.new_app(app or standin.KIND, config)
            if new.name in model.apps:
                raise cli_error("deploy", str(charm), message=f'"{new.name}" already exists')
            model.apps[new.name] = new
            return new
        # The principal stand-ins (lab machines): mysql and COS's Prometheus.
        principal = {c.KIND: c for c in (MysqlStandIn, PrometheusStandIn, LdapStandIn)}.get(
            Path(str(charm)).name
        )
        if charm_dir is None and principal is not None:
            new = principal.new_app(app or principal.KIND, config)
            if new.name in model.apps:
                raise cli_error("deploy", str(charm), message=f'"{new.name}" already exists')
            model.apps[new.name] = new
            self._add_units(new, num_units)
            return new
        if charm_dir is None:
            raise cli_error("deploy", str(charm), message=f"no local charm at {charm}")
        spec = charms.load_spec(charm_dir)
        name = app or spec.name
        if name in model.apps:
            raise cli_error("deploy", str(charm), message=f'application "{name}" already exists')
        self._set_lab_gpus(name, constraints)
        kept = _app_constraints(constraints)
        runner.install_tools(self.lab.charms_dir)
        runner.charm_source(charm_dir, name, self.lab.charms_dir, self.lab.suite)
        new = App(
            name=name,
            charm_dir=str(charm_dir),
            charm_name=spec.name,
            subordinate=spec.subordinate,
            config=_coerce_config(spec.options, dict(config or {}), name),
            constraints=kept,
        )
        model.apps[name] = new
        self.ctl.forget_spec(name)
        for endpoint, (role, ep_spec) in spec.endpoints().items():
            if role == "peer":
                lifecycle.new_relation(
                    model, [Endpoint(name, endpoint, ep_spec.get("interface", ""), "peer")]
                )
        if not spec.subordinate:
            self._add_units(new, num_units)
        return new

    def _add_units(self, app: App, count: int) -> list[Unit]:
        model = self.ctl.model
        plans: list[tuple[str, str]] = []
        for _ in range(count):
            machine_id = str(model.next_machine)
            model.next_machine += 1
            plans.append((machine_id, f"juju-{model.uuid[:6]}-{machine_id}"))
        kind = VIRT_TYPES[app.constraints.get(VIRT_TYPE_CONSTRAINT, "container")]
        with ThreadPoolExecutor(max_workers=max(1, min(4, count))) as pool:
            if kind == "vm":
                machines = list(pool.map(lambda plan: self.lab.create(plan[1], "vm"), plans))
            else:
                machines = list(pool.map(lambda plan: self.lab.create(plan[1]), plans))
        units: list[Unit] = []
        gpu_spec = self.lab_gpu_spec(app.name)
        for (machine_id, _), machine in zip(plans, machines, strict=True):
            juju_exec.install(machine)
            if gpu_spec is not None:
                gpu.simulate(machine, gpu_spec)
            unit = Unit(
                name=f"{app.name}/{app.next_unit}",
                app=app.name,
                machine=machine.name,
                machine_id=machine_id,
                address=machine.address,
            )
            app.next_unit += 1
            model.units[unit.name] = unit
            app.units.append(unit.name)
            if app.leader is None:
                app.leader = unit.name
            units.append(unit)
            self._add_subordinates(unit)
            self.ctl.enqueue_all(lifecycle.unit_added(self.ctl.model, unit))
        return units

    def _add_subordinates(self, unit: Unit) -> None:
        """Stand-in subordinates related to the app get a unit beside the new principal."""
        from slurm_lab.juju.fsclient import FilesystemClient  # noqa: PLC0415

        for rel in self.ctl.model.relations_of(unit.app):
            FilesystemClient(self.ctl).add_subordinate_units(rel, principals=[unit])
            CosCollector(self.ctl).add_subordinate_units(rel, principals=[unit])
            SssdStandIn(self.ctl).add_subordinate_units(rel, principals=[unit])

    def add_unit(
        self,
        app: str,
        *,
        attach_storage: str | Iterable[str] | None = None,
        num_units: int = 1,
        to: str | Iterable[str] | None = None,
    ) -> None:
        """Add units (each on a new lab machine) and run their hooks."""
        with self._session():
            self._add_units(self._app(app, "add-unit"), num_units)

    def remove_unit(
        self,
        *app_or_unit: str,
        destroy_storage: bool = False,
        force: bool = False,
        num_units: int = 0,
    ) -> None:
        """Remove units: departed/broken/stop/remove hooks, leader re-election, machine gone."""
        with self._session():
            for name in app_or_unit:
                self._remove_unit(self._unit(name))

    def _remove_unit(self, unit: Unit) -> None:
        model = self.ctl.model
        app = model.apps[unit.app]
        if unit.name not in app.units:
            return
        app.units.remove(unit.name)
        unit.failed_event = None  # like --force: a unit in error still goes
        self.ctl.enqueue_all(lifecycle.departing(self.ctl.model, unit))
        for sub in [u for u in model.units.values() if u.principal == unit.name]:
            self._remove_unit(sub)
        # The leader stays leader through its departure hooks; the controller elects another
        # unit when it destroys this one (`engine.Controller._destroy_unit`, `commit.drop_unit`).
        model.queue.append({"unit": unit.name, "kind": "_destroy_unit"})

    def change_leader(self, app: str) -> str:
        """Move the application's leadership to its next unit; return the new leader.

        As when the leader's agent loses its lease (`commit.move_leadership`); runs the hooks.
        """
        with self._session():
            target = self._app(app, "change-leader")
            try:
                leader, events = commit.move_leadership(self.ctl.model, target.name)
            except ValueError as e:
                raise cli_error("change-leader", app, message=str(e)) from None
            self.ctl.enqueue_all(events)
            return leader

    def remove_application(
        self,
        *app: str,
        destroy_storage: bool = False,
        force: bool = False,
    ) -> None:
        """Remove applications: their relations break on the remaining side, units go."""
        with self._session():
            for name in app:
                self._remove_application(self._app(name, "remove-application"))

    def _remove_application(self, app: App) -> None:
        model = self.ctl.model
        for rel in model.relations_of(app.name):
            if not rel.is_peer:
                self.ctl.enqueue_all(lifecycle.relation_removed(rel))
        for unit in list(model.app_units(app.name)):
            self._remove_unit(unit)
        for rel in model.relations_of(app.name):
            model.queue.append({"unit": "", "kind": "_drop_relation", "relation_id": rel.id})
        model.queue.append({"unit": "", "kind": "_drop_app", "app": app.name})

    # --- relations -------------------------------------------------------------------------------

    def integrate(self, app1: str, app2: str, *, via: str | Iterable[str] | None = None) -> None:
        """Relate two applications ("app" or "app:endpoint") and run the relation hooks."""
        with self._session():
            endpoints = self._match_endpoints(app1, app2)
            existing = self._existing(endpoints)
            if existing is not None:
                raise cli_error(
                    "integrate", app1, app2, message=f"relation {existing.key()} already exists"
                )
            self._relate(endpoints)

    def _endpoints_of(self, app: App) -> dict[str, tuple[str, dict[str, Any]]]:
        from slurm_lab.juju.fsclient import FilesystemClient  # noqa: PLC0415

        standins = (FilesystemClient, MysqlStandIn, PrometheusStandIn, CosCollector)
        standin = {c.KIND: c for c in (*standins, LdapStandIn, SssdStandIn)}.get(app.kind)
        if standin is not None:
            return standin.ENDPOINTS
        endpoints = self.ctl.spec(app).endpoints()
        if not app.subordinate:
            # Juju gives every principal an implicit `juju-info` provider endpoint.
            endpoints.setdefault("juju-info", ("provider", {"interface": "juju-info"}))
        return endpoints

    def _match_endpoints(self, first: str, second: str) -> list[Endpoint]:
        (app1, _, ep1), (app2, _, ep2) = first.partition(":"), second.partition(":")
        a, b = self._app(app1, "integrate"), self._app(app2, "integrate")
        eps_a, eps_b = self._endpoints_of(a), self._endpoints_of(b)
        matches: list[list[Endpoint]] = []
        for name_a, (role_a, spec_a) in eps_a.items():
            for name_b, (role_b, spec_b) in eps_b.items():
                if (ep1 and name_a != ep1) or (ep2 and name_b != ep2):
                    continue
                if {role_a, role_b} != {"provider", "requirer"}:
                    continue
                if spec_a.get("interface") != spec_b.get("interface"):
                    continue
                scope = (
                    "container"
                    if "container" in (spec_a.get("scope"), spec_b.get("scope"))
                    else "global"
                )
                matches.append(
                    [
                        Endpoint(a.name, name_a, spec_a["interface"], role_a, scope),
                        Endpoint(b.name, name_b, spec_b["interface"], role_b, scope),
                    ]
                )
        if len(matches) != 1:
            what = "no relations found" if not matches else "ambiguous relation"
            raise cli_error("integrate", first, second, message=f"{what}: {first} {second}")
        return matches[0]

    def remove_relation(self, app1: str, app2: str, *, force: bool = False) -> None:
        """Remove an existing relation: departed and broken hooks on both sides."""
        with self._session() as model:
            wanted = [spec.partition(":") for spec in (app1, app2)]
            found = [
                rel
                for rel in model.relations.values()
                if not rel.is_peer
                and all(
                    any(e.app == app and (not ep or e.endpoint == ep) for e in rel.endpoints)
                    for app, _, ep in wanted
                )
                and wanted[0][0] != wanted[1][0]
            ]
            if len(found) != 1:
                what = "relation not found" if not found else "ambiguous relation"
                raise cli_error("remove-relation", app1, app2, message=f"{what}: {app1} {app2}")
            self.ctl.enqueue_all(lifecycle.relation_removed(found[0]))
            self._drop_subordinates(found[0])

    def _drop_subordinates(self, rel: Relation) -> None:
        """Subordinate units go with the container relation that put them on their principal."""
        model = self.ctl.model
        if not any(e.scope == "container" for e in rel.endpoints):
            return
        for endpoint in rel.endpoints:
            app = model.apps[endpoint.app]
            if not app.subordinate:
                continue
            principal_app = rel.other_app(app.name)
            for name in list(app.units):
                principal = model.units[name].principal or ""
                if principal.split("/")[0] == principal_app:
                    app.units.remove(name)
                    model.queue.append({"unit": name, "kind": "_destroy_unit"})
            if app.leader not in app.units:
                app.leader = app.units[0] if app.units else None

    # --- config ----------------------------------------------------------------------------------

    @overload
    def config(self, app: str, *, app_config: bool = False) -> Mapping[str, ConfigValue]: ...

    @overload
    def config(
        self,
        app: str,
        values: Mapping[str, ConfigValue],
        *,
        reset: str | Iterable[str] = (),
    ) -> None: ...

    @overload
    def config(self, app: str, *, reset: str | Iterable[str]) -> None: ...

    def config(
        self,
        app: str,
        values: Mapping[str, ConfigValue] | None = None,
        *,
        app_config: bool = False,
        reset: str | Iterable[str] = (),
    ) -> Mapping[str, ConfigValue] | None:
        """Get the app's config (with defaults), or set/reset keys and run config-changed."""
        with self._session():
            target = self._app(app, "config")
            options = self._options(target)
            if values is None and not reset:
                if app_config:
                    return {}
                defaults = {k: v["default"] for k, v in options.items() if "default" in v}
                return {**defaults, **target.config}
            new = dict(target.config)
            for key in [reset] if isinstance(reset, str) else list(reset):
                new.pop(key, None)
            new.update(_coerce_config(options, dict(values or {}), app))
            if new != target.config:
                target.config = new
                for unit in self.ctl.model.app_units(app):
                    self.ctl.enqueue(unit.name, "config_changed")
            return None

    def _options(self, app: App) -> dict[str, Any]:
        if app.kind != "charm":
            return {}
        return self.ctl.spec(app).options

    # --- actions and exec ------------------------------------------------------------------------

    def run(
        self,
        unit: str,
        action: str,
        params: Mapping[str, Any] | None = None,
        *,
        wait: float | None = None,
    ) -> Task:
        """Run an action on a unit; TaskError if it fails, like jubilant."""
        with self._session() as model:
            target = self._unit(unit)
            app = model.apps[target.app]
            if app.kind != "charm" or action not in self.ctl.spec(app).actions:
                raise ValueError(f'action "{action}" not defined for unit "{target.name}"')
            self.ctl.drain()
            self.ctl.wait_unit_idle(target.name)  # an action waits for the unit's running hook
            model.next_task += 1
            task_id = str(model.next_task)
            declared = self.ctl.spec(app).actions[action] or {}
            try:
                checked = actionparams.validate(declared, dict(params or {}))
            except actionparams.ParamsError as e:
                raise cli_error("run", unit, action, message=str(e)) from None
            event = {
                "unit": target.name,
                "kind": "action",
                "name": action,
                "params": checked,
                "id": task_id,
            }
            response = self.ctl.run_charm(target, event)
            context = response.get("context")
            if context is not None:
                self.ctl.apply_immediate(target, context)
                if response["ok"]:
                    self.ctl.commit(target, context)
            task = _task(task_id, response)
        task.raise_on_failure()
        return task

    @overload
    def exec(
        self, command: str, *args: str, machine: int | str, wait: float | None = None
    ) -> Task: ...

    @overload
    def exec(self, command: str, *args: str, unit: str, wait: float | None = None) -> Task: ...

    def exec(
        self,
        command: str,
        *args: str,
        machine: int | str | None = None,
        unit: str | None = None,
        wait: float | None = None,
    ) -> Task:
        """Run a command on a unit in its hook context, or on a machine as a plain shell.

        As `juju exec` on Juju 3.6: with `unit`, the command waits for the unit's running hook
        and runs with the hook tools on PATH (`Controller.start_exec`), committing what it sets
        through them if it exits 0; no hook of the unit starts until it ends. With `machine`,
        it runs as root with no hook context. A unit of a lab stand-in (no charm, no agent)
        gets the plain shell. The command runs outside the model session: other units' hooks
        and other threads' commands go on meanwhile.
        """
        if (machine is None) == (unit is None):
            raise TypeError('must specify "machine" or "unit", but not both')
        timeout = wait or 300
        script = command_string([command, *args])
        with self._session() as model:
            model.next_task += 1
            task_id = str(model.next_task)
            if unit is not None:
                target = self._unit(unit)
                in_context = model.apps[target.app].kind == "charm"
                name, machine_name = target.name, target.machine
            else:
                in_context, name = False, ""
                found = [u for u in model.units.values() if u.machine_id == str(machine)]
                if not found:
                    raise ValueError(f'machine "{machine}" not found')
                machine_name = found[0].machine
        if in_context:
            task = _exec_task(task_id, lambda: self._exec_in_context(name, script, timeout))
        else:
            task = _exec_task(task_id, lambda: self._exec_plain(machine_name, script, timeout))
        task.raise_on_failure()
        return task

    def _exec_plain(self, machine: str, script: str, timeout: float) -> dict[str, Any]:
        """`exec` on a machine: a root shell, no hook context."""
        result = self.lab.get(machine).exec(["bash", "-c", script], timeout=timeout)
        return {"code": result.returncode, "stdout": result.stdout, "stderr": result.stderr}

    def _exec_in_context(self, name: str, script: str, timeout: float) -> dict[str, Any]:
        """`exec` on a charm unit: once the unit is idle, in its hook context."""
        deadline = time.monotonic() + timeout
        while True:
            with self._session():  # each session applies the hooks that ended meanwhile
                unit = self._unit(name)
                if unit.running is None:
                    event, run = self.ctl.start_exec(unit, script)
                    break
            if time.monotonic() >= deadline:
                raise LabError(f"timed out after {timeout}s waiting for the unit's hook")
            time.sleep(EXEC_POLL)
        remaining = max(deadline - time.monotonic(), 1.0)
        try:
            response = self.ctl.execute(unit, self.ctl.machine(unit), run, remaining)
        except BaseException:  # interrupted (or the machine is gone): release the unit
            with self._session():
                self.ctl.end_exec(name, event, None)
            raise
        with self._session():
            self.ctl.end_exec(name, event, response)
        if response.get("lab_error"):
            raise LabError(response["error"])
        return response

    def ssh(
        self,
        target: str | int,
        command: str,
        *args: str,
        container: str | None = None,
        host_key_checks: bool = True,
        ssh_options: Iterable[str] = (),
        user: str | None = None,
    ) -> str:
        """`juju ssh`: run a command on a unit's (or machine's) lab machine; its stdout.

        As on Juju, it goes straight to the machine: no hook context, and no lock, so it runs
        while the unit's hooks run (`exec` waits for them: Juju's machine lock). The words are
        joined with spaces for the machine's shell, as OpenSSH sends them. The lab runs it as
        root (its machines have no `ubuntu` account), or as `user`; `container`,
        `host_key_checks` and `ssh_options` mean nothing there. Raises `jubilant.CLIError`
        with the command's exit status and output when it fails, as jubilant does, and
        TimeoutError after `SSH_TIMEOUT` seconds (the lab's bound; Juju has none).
        """
        del container, host_key_checks
        if isinstance(ssh_options, str):
            raise TypeError("ssh_options must be an iterable of str, not str")
        script = " ".join([command, *args])
        argv = ["bash", "-c", script]
        if user is not None and user != "root":
            argv = ["runuser", "-u", user, "--", *argv]
        try:
            result = self.lab.get(self._machine_of(str(target))).exec(argv, timeout=SSH_TIMEOUT)
        except LabError as e:
            if "timed out" in str(e):
                raise TimeoutError(f"timed out waiting for ssh: {e}") from None
            raise
        if result.returncode != 0:
            where = f"{user}@{target}" if user is not None else str(target)
            argv_cli = ["juju", "ssh", where, command, *args]
            raise jubilant.CLIError(result.returncode, argv_cli, result.stdout, result.stderr)
        return result.stdout

    def _machine_of(self, target: str) -> str:
        """Return the lab machine of a unit (`app/N`, `app/leader`) or of a machine id.

        Looked up in the model as this process last saw it, without a session (a session runs
        and waits for hooks: `ssh` must not); a target it does not know yet takes one.
        """
        for attempt in range(2):
            model = self.ctl.model
            if "/" in target:
                with contextlib.suppress(ValueError):
                    return self._unit(target).machine
            else:
                found = [u for u in model.units.values() if u.machine_id == target]
                if found:
                    return found[0].machine
            if attempt == 0:
                with self._session():
                    pass
        kind = "unit" if "/" in target else "machine"
        raise cli_error("ssh", target, message=f'{kind} "{target}" not found')

    # --- hooks on request ------------------------------------------------------------------------

    def update_status(self, *units: str) -> None:
        """Fire update-status on the given units (every charm unit if none given).

        The hooks of different units run concurrently, like Juju's unit agents.
        """
        with self._session() as model:
            names = list(units) or [
                u.name for u in model.units.values() if model.apps[u.app].kind == "charm"
            ]
            for name in sorted({self._unit(name).name for name in names}):
                if {"unit": name, "kind": "update_status"} not in model.queue:
                    self.ctl.enqueue(name, "update_status")

    def rotate_mysql_password(self, app: str = MysqlStandIn.KIND) -> int:
        """Lab only: give each user of the mysql stand-in `app` a new password (secret revision).

        Returns how many users got one; their consumers get secret-changed.
        """
        with self._session():
            if self._app(app, "rotate-password").kind != MysqlStandIn.KIND:
                raise ValueError(f'"{app}" is not the mysql stand-in')
            return MysqlStandIn(self.ctl).rotate_password(app)

    def resolve(self, unit: str) -> None:
        """Retry a unit's failed hook now (like `juju resolve`)."""
        with self._session():
            target = self._unit(unit)
            if target.in_error:
                self.ctl.retry_now(target)

    # --- status and wait -------------------------------------------------------------------------

    def status(self) -> Status:
        """Return the model's status, parsed by jubilant from a `juju status` JSON document."""
        with self._session() as model:
            return Status._from_dict(build_status(model))  # pyright: ignore[reportPrivateUsage]

    def status_dict(self) -> dict[str, Any]:
        """Return the `juju status --format json` document that status() parses."""
        with self._session() as model:
            return build_status(model)

    def wait(
        self,
        ready: Callable[[Status], bool],
        *,
        error: Callable[[Status], bool] | None = None,
        delay: float = 1.0,
        timeout: float | None = None,
        successes: int = 3,
    ) -> Status:
        """Like jubilant's wait; fires update-status every update_status_interval seconds.

        Every poll is a model session: hooks due for a retry, `juju-exec` dispatches and the
        results of background hooks are handled there.
        """
        timeout = self.wait_timeout if timeout is None else timeout
        start = time.monotonic()
        status: Status | None = None
        count = 0
        while time.monotonic() - start < timeout:
            if time.monotonic() - self._last_update_status >= self.update_status_interval:
                self.update_status()
                self._last_update_status = time.monotonic()  # the interval runs between ticks
            status = self.status()
            if error is not None and error(status):
                name = getattr(error, "__qualname__", repr(error))
                raise WaitError(f"error function {name} returned true\n{status}")
            if ready(status):
                count += 1
                if count >= successes:
                    return status
            else:
                count = 0
            time.sleep(delay)
        raise TimeoutError(f"wait timed out after {timeout}s\n{status}")

    # --- logs ------------------------------------------------------------------------------------

    def debug_log(self, *, limit: int = 0) -> str:
        """Every unit's charm log lines, in order (the last `limit` lines if given)."""
        path = self._dir / "logs" / "debug.log"
        lines = path.read_text().splitlines(keepends=True) if path.exists() else []
        return "".join(lines[-limit:] if limit else lines)

    def unit_log(self, unit: str, *, journal_lines: int = 300) -> str:
        """One unit's charm log (every hook) followed by its machine's journal."""
        with self._session():
            target = self._unit(unit)
            path = self._dir / "logs" / f"unit-{target.app}-{target.number}.log"
            charm_log = path.read_text() if path.exists() else ""
            try:
                journal = self.ctl.machine(target).journal(lines=journal_lines)
            except LabError as e:
                journal = f"(no journal: {e})\n"
        header = f"=== {target.name} charm log ===\n"
        return f"{header}{charm_log}=== {target.machine} journal ===\n{journal}"

    def dump_logs(self, *, journal_lines: int = 200) -> str:
        """Status, then every unit's logs: what to print when a test fails."""
        parts = [json.dumps(self.status_dict(), indent=1)]
        for name in sorted(self.ctl.model.units):
            if self.ctl.model.units[name].principal is None:
                parts.append(self.unit_log(name, journal_lines=journal_lines))
        return "\n".join(parts)

    # --- teardown --------------------------------------------------------------------------------

    def destroy_lab_model(self) -> None:
        """Destroy every unit's machine and forget the model (no hooks run)."""
        with self._session() as model:
            machines = [u.machine for u in model.units.values() if u.principal is None]
            for machine in machines:
                with contextlib.suppress(LabError):
                    self.lab.destroy(machine)
            self.ctl.forget_inflight()
            self.ctl.model = ModelState(name=model.name, uuid=str(uuid.uuid4()))

    # --- bundles ---------------------------------------------------------------------------------

    def _deploy_bundle(self, path: Path) -> None:
        """Deploy a bundle's applications and relations; ones already there are kept as is."""
        model = self.ctl.model
        bundle: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
        apps: dict[str, Any] = bundle.get("applications") or bundle.get("services") or {}
        for name, raw in apps.items():
            spec: dict[str, Any] = raw or {}
            if name in model.apps:
                continue
            self._deploy_app(
                spec.get("charm", name),
                name,
                config=spec.get("options") or spec.get("config") or {},
                num_units=int(spec.get("num_units", spec.get("num-units", 1))),
                base_dir=path.parent,
            )
        for first, second in bundle.get("relations") or bundle.get("integrations") or []:
            endpoints = self._match_endpoints(first, second)
            if self._existing(endpoints) is None:
                self._relate(endpoints)

    def _existing(self, endpoints: list[Endpoint]) -> Relation | None:
        wanted = {(e.app, e.endpoint) for e in endpoints}
        for rel in self.ctl.model.relations.values():
            if {(e.app, e.endpoint) for e in rel.endpoints} == wanted:
                return rel
        return None

    def _relate(self, endpoints: list[Endpoint]) -> None:
        from slurm_lab.juju.fsclient import FilesystemClient  # noqa: PLC0415

        rel = lifecycle.new_relation(self.ctl.model, endpoints)
        FilesystemClient(self.ctl).add_subordinate_units(rel)
        CosCollector(self.ctl).add_subordinate_units(rel)
        SssdStandIn(self.ctl).add_subordinate_units(rel)
        self.ctl.enqueue_all(lifecycle.integrated(self.ctl.model, rel))


def _app_constraints(constraints: Mapping[str, ConstraintValue] | None) -> dict[str, str]:
    """Return the constraints the model keeps for an application; a bad `virt-type` fails."""
    kept = {key: str(value) for key, value in (constraints or {}).items()}
    virt_type = kept.get(VIRT_TYPE_CONSTRAINT)
    if virt_type is not None and virt_type not in VIRT_TYPES:
        raise cli_error(
            "deploy",
            f"--constraints virt-type={virt_type}",
            message=f'invalid value "{virt_type}" for "virt-type"',
        )
    return kept


def _find_charm(ref: str, base_dir: Path) -> Path | None:
    """Find the local charm dir for a reference: a path, or charms/<name> near base_dir."""
    candidates = [Path(ref), base_dir / ref]
    name = Path(ref).name
    for parent in [base_dir, *base_dir.parents, Path.cwd()]:
        candidates.append(parent / "charms" / name)
    for candidate in candidates:
        if (candidate / "charmcraft.yaml").is_file():
            return candidate.resolve()
    return None


def _coerce_value(kind: str, value: Any) -> Any:
    if kind == "boolean" and isinstance(value, str):
        return value.lower() in ("true", "yes", "1")
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind in ("string", "secret"):
        return str(value)
    return value


def _coerce_config(options: dict[str, Any], values: dict[str, Any], app: str) -> dict[str, Any]:
    """Convert values to their option's type, as `juju config key=value` would."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        option = options.get(key)
        if option is None:
            raise cli_error("config", app, message=f'unknown option "{key}"')
        out[key] = _coerce_value(option.get("type", "string"), value)
    return out


def _stringify(results: Any) -> Any:
    """Convert action results to what Juju returns: nested maps of strings."""
    if isinstance(results, dict):
        return {str(k): _stringify(v) for k, v in results.items()}  # pyright: ignore[reportUnknownVariableType]
    return str(results)


def _exec_task(task_id: str, run: Callable[[], dict[str, Any]]) -> Task:
    """Run an `exec` and return its task (exit status, output); TimeoutError if it timed out."""
    try:
        response = run()
    except LabError as e:
        if "timed out" in str(e):
            raise TimeoutError(f"timed out waiting for command: {e}") from None
        raise
    code = int(response.get("code") or 0)
    return Task(
        id=task_id,
        status="completed" if code == 0 else "failed",
        return_code=code,
        stdout=response.get("stdout") or "",
        stderr=response.get("stderr") or "",
    )


def _task(task_id: str, response: dict[str, Any]) -> Task:
    action: dict[str, Any] = (response.get("context") or {}).get("action") or {}
    results = _stringify(action.get("results") or {})
    logs = list(action.get("logs") or [])
    if not response["ok"]:
        return Task(
            id=task_id,
            status="failed",
            results=results,
            return_code=int(response.get("code") or 1),
            stdout=response.get("stdout") or "",
            stderr=response.get("stderr") or response.get("error") or "",
            message=f"exit status {int(response.get('code') or 1)}",
            log=logs,
        )
    if action.get("failed") is not None:
        return Task(
            id=task_id,
            status="failed",
            results=results,
            message=action["failed"],
            log=logs,
        )
    return Task(id=task_id, status="completed", results=results, log=logs)


__all__ = ["LabJuju", "TaskError"]
