"""A typed wrapper around `scontrol` (Slurm 24.11, data_parser v0.0.42, to 26.05, v0.0.45).

Queries use `--json` and parse only the fields the charms need; unknown fields are
ignored so newer Slurm versions keep working, and a field a version dropped has a default
that keeps its meaning (see `ControllerPing`). Every failure becomes `ScontrolError`
carrying scontrol's stderr. A query for an unknown node, partition or job reads as None
(24.11 and 26.05 answer it with exit status 0 and an empty list). Every answer must name a
data_parser version the parsers were checked against (`data_parser.check_known`): a release
whose default moved on fails with both versions named, never with a misread field.
"""

import json
import logging
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from hpc_libs.errors import ScontrolError, SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm import data_parser

logger = logging.getLogger(__name__)

_UNKNOWN_MARKERS = (
    "Invalid node name",
    "Invalid partition name",
    "Invalid job id",
    "not found",
)


def _as_list(value: Any) -> Any:
    """Accept Slurm's comma-separated strings where newer parsers give lists."""
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return value


def _as_timestamp(value: Any) -> Any:
    """Accept data_parser's `{"set": true, "number": <epoch>}` where older ones gave a number.

    An unset time (`"set": false`) reads as None.
    """
    if isinstance(value, dict):
        number = cast(dict[str, Any], value)
        return number.get("number") if number.get("set", True) else None
    return value


R = TypeVar("R", bound=BaseModel)

StrList = Annotated[list[str], BeforeValidator(_as_list)]
Timestamp = Annotated[int | None, BeforeValidator(_as_timestamp)]
"""A UNIX time; None when Slurm has not set it."""
Number = Annotated[int | None, BeforeValidator(_as_timestamp)]
"""A number in data_parser's `{"set": .., "number": ..}` form; None when Slurm has not set it."""


class _Parsed(BaseModel):
    # Built at first use, not at import: every hook imports this module, few parse with it.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class ControllerPing(_Parsed):
    """One controller in `scontrol ping --json`.

    Slurm 24.11 gives `pinged` (`UP`/`DOWN`) and `mode` (`primary`, `backup`, ...) beside
    `responding`; 26.05 dropped both (it gives `status`, `No error` when up): empty here.
    """

    hostname: str
    pinged: str = ""
    responding: bool = False
    mode: str = ""
    primary: bool = False

    @property
    def is_up(self) -> bool:
        """Whether the controller answered the ping (and, where given, `pinged` agrees)."""
        return self.responding and self.pinged.upper() in ("UP", "")


class Node(_Parsed):
    """One node in `scontrol show node --json`."""

    name: str
    state: StrList = Field(default_factory=list[str])
    reason: str = ""
    reason_set_by_user: str = ""
    """Who set `reason`: the user who ran scontrol, or SlurmUser when slurmctld set it."""
    reason_changed_at: Timestamp = None
    boot_time: Timestamp = None
    """When the node's machine booted, as its slurmd's last registration said."""
    features: StrList = Field(default_factory=list[str])
    active_features: StrList = Field(default_factory=list[str])
    partitions: StrList = Field(default_factory=list[str])
    cpus: int | None = None
    real_memory: int | None = None
    weight: int | None = None
    version: str = ""
    """The Slurm release the node's slurmd registered with (`24.11.5`); empty if it never did."""

    def has_state(self, state: str) -> bool:
        """Whether `state` (case-insensitive, e.g. `drain`, `idle`) is among the node's flags."""
        return state.upper() in (s.upper() for s in self.state)


class Signal(_Parsed):
    """The signal in a job's exit code (`id` None or 0: none)."""

    id: Number = None


class ExitCode(_Parsed):
    """A job's exit code: the status its batch script returned and the signal that ended it."""

    return_code: Number = None
    signal: Signal = Field(default_factory=Signal)


class Job(_Parsed):
    """One job in `scontrol show job --json` (the fields the charms need)."""

    job_id: int
    job_state: StrList = Field(default_factory=list[str])
    requeue: bool = False
    batch_flag: bool = False
    state_reason: str = ""
    state_description: str = ""
    """Slurm's own words for `state_reason` (`launch failed requeued held`), empty if none."""
    restart_cnt: int = 0
    submit_time: Timestamp = None
    """When the job was submitted, or last requeued (a requeue submits it again)."""
    start_time: Timestamp = None
    end_time: Timestamp = None
    exit_code: ExitCode = Field(default_factory=ExitCode)
    nodes: str = ""

    @property
    def requeueable(self) -> bool:
        """Whether `scontrol requeue` can put the job back in the queue.

        The job allows it (`requeue`, from `--requeue` or the cluster's JobRequeue) and it is
        a batch job (`batch_flag`): Slurm cannot requeue an interactive `srun` or `salloc`.
        """
        return self.requeue and self.batch_flag


class _PingResponse(_Parsed):
    pings: list[ControllerPing] = Field(default_factory=list[ControllerPing])


def parse_pings(output: str) -> list[ControllerPing]:
    """Parse `scontrol ping --json` (24.11 and 26.05): the controllers, primary first.

    The one reader of ping's answer: `Scontrol.ping` runs it, and the exporter reads what its
    own bounded run printed.

    Raises:
        ValueError: The output is not ping's JSON (pydantic's ValidationError is one), or it
            is in a data_parser version not in `data_parser.KNOWN`.

    """
    return parse_answer(output, _PingResponse).pings


def parse_answer(output: str, response: type[R]) -> R:
    """Parse a plain `--json` answer of a Slurm command into `response`.

    Raises:
        ValueError: The output is not a JSON object, names a data_parser version not in
            `data_parser.KNOWN` (`DataParserError`, naming both), or does not fit `response`.

    """
    document: object = json.loads(output)
    if not isinstance(document, dict):
        raise ValueError("the answer is not a JSON object")
    data_parser.check_known(cast(dict[str, Any], document))
    return response.model_validate(document)


class _NodesResponse(_Parsed):
    nodes: list[Node] = Field(default_factory=list[Node])


class _JobsResponse(_Parsed):
    jobs: list[Job] = Field(default_factory=list[Job])


class Scontrol:
    """Run `scontrol` (and `scancel`) through the `host.run` seam, each call bounded by `timeout`.

    A timed-out call raises `ScontrolError` with `timed_out` set (the controller may be
    busy or unreachable); the charms report it as waiting and retry on the next event.
    """

    def __init__(self, timeout: float = 60) -> None:
        self.timeout = timeout

    def ping(self) -> list[ControllerPing]:
        """Return the controllers as `scontrol ping` sees them, primary first."""
        return self._query(["ping"], _PingResponse).pings

    def show_node(self, name: str) -> Node | None:
        """Return the node called `name`, or None if Slurm does not know it."""
        nodes = self._query_or_none(["show", "node", name], _NodesResponse)
        return next((n for n in nodes.nodes if n.name == name), None) if nodes else None

    def show_nodes(self) -> list[Node]:
        """Return every node the controller knows."""
        return self._query(["show", "nodes"], _NodesResponse).nodes

    def show_job(self, job_id: int) -> Job | None:
        """Return job `job_id`, or None if Slurm does not know it (any more)."""
        jobs = self._query_or_none(["show", "job", str(job_id)], _JobsResponse)
        return next((j for j in jobs.jobs if j.job_id == job_id), None) if jobs else None

    def knows_job(self, job_id: int) -> bool:
        """Whether the controller holds any record for `job_id` (a job, or an array's task).

        False only when scontrol says so: no record, or "Invalid job id" (not the looser
        markers of `_query_or_none`: a wrong "unknown" here would report a job as lost).
        """
        jobs = self._query_or_none(
            ["show", "job", str(job_id)], _JobsResponse, unknown=("Invalid job id",)
        )
        return bool(jobs and jobs.jobs)

    def show_jobs(self) -> list[Job]:
        """Return every job the controller knows (ended ones for `MinJobAge`)."""
        return self._query(["show", "jobs"], _JobsResponse).jobs

    def update_node(
        self,
        names: str | Sequence[str],
        *,
        state: str | None = None,
        reason: str | None = None,
        **params: str | int,
    ) -> None:
        """`scontrol update nodename=<names> [state=..] [reason=..] [key=value ...]`.

        `reason` travels as one argv element, so spaces need no quoting and no quote
        characters end up in Slurm.
        """
        node_list = names if isinstance(names, str) else ",".join(names)
        args = ["update", f"nodename={node_list}"]
        if state is not None:
            args.append(f"state={state}")
        if reason is not None:
            args.append(f"reason={reason}")
        args += [f"{key}={value}" for key, value in params.items()]
        self._run(args)

    def update_partition(self, name: str, **params: str | int) -> None:
        """`scontrol update partitionname=<name> key=value ...`."""
        self._run(["update", f"partitionname={name}", *(f"{k}={v}" for k, v in params.items())])

    def delete_node(self, name: str) -> None:
        """`scontrol delete nodename=<name>` (refused by Slurm while jobs run on it)."""
        self._run(["delete", f"nodename={name}"])

    def takeover(self, index: int) -> None:
        """`scontrol takeover <index>`: that backup asks the controller in charge for control.

        The one in charge saves its state and stands by; the backup then serves.
        """
        self._run(["takeover", str(index)])

    def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld rereads its configuration files."""
        self._run(["reconfigure"])

    def token(self, username: str, lifespan: int) -> str:
        """`scontrol token username=<username> lifespan=<lifespan>`: return the JWT it prints.

        The caller validates `username` and `lifespan`. The token is a credential: it is
        returned, never logged, and an error never quotes scontrol's standard output.

        Raises:
            ScontrolError: scontrol failed, timed out or printed no `SLURM_JWT=` line.

        """
        args = ["token", f"username={username}", f"lifespan={lifespan}"]
        for line in self._run(args).splitlines():
            name, sep, value = line.strip().partition("=")
            if sep and name == "SLURM_JWT" and value:
                return value
        raise ScontrolError("scontrol token printed no SLURM_JWT", command=["scontrol", *args])

    def requeue(self, job_ids: Sequence[int]) -> None:
        """`scontrol requeue <ids>`: stop the jobs and put them back in the queue."""
        self._run(["requeue", ",".join(str(job_id) for job_id in job_ids)])

    def release(self, job_ids: Sequence[int]) -> None:
        """`scontrol release <ids>`: let held jobs be scheduled again."""
        self._run(["release", ",".join(str(job_id) for job_id in job_ids)])

    def cancel(self, job_ids: Sequence[int]) -> None:
        """`scancel <ids>`: end the jobs."""
        try:
            host.run(["scancel", *(str(job_id) for job_id in job_ids)], timeout=self.timeout)
        except SlurmOpsError as e:
            raise _scontrol_error(e) from e

    def cancel_node_jobs(self, name: str) -> None:
        """Cancel every job running on node `name` (`scancel --nodelist`)."""
        try:
            host.run(["scancel", f"--nodelist={name}"], timeout=self.timeout)
        except SlurmOpsError as e:
            raise _scontrol_error(e) from e

    def _run(self, args: list[str]) -> str:
        try:
            return host.run(["scontrol", *args], timeout=self.timeout).stdout
        except SlurmOpsError as e:
            raise _scontrol_error(e) from e

    def _query(self, args: list[str], response: type[R]) -> R:
        result = self._query_or_none(args, response)
        if result is None:
            raise ScontrolError(
                f"scontrol {' '.join(args)}: not found", command=["scontrol", *args]
            )
        return result

    def _query_or_none(
        self, args: list[str], response: type[R], unknown: tuple[str, ...] = _UNKNOWN_MARKERS
    ) -> R | None:
        """Run `scontrol <args> --json` and parse it; None if the object does not exist.

        A failure whose output carries one of the `unknown` markers means "does not exist".
        """
        command = ["scontrol", *args, "--json"]
        try:
            result = host.run(command, timeout=self.timeout, check=False)
        except SlurmOpsError as e:
            raise _scontrol_error(e) from e
        if result.returncode != 0:
            # With --json, scontrol may report errors in the JSON document on stdout.
            output = result.stderr + result.stdout
            if any(marker in output for marker in unknown):
                return None
            raise ScontrolError(
                f"{' '.join(command)} failed with exit status {result.returncode}",
                command=command,
                stderr=result.stderr or result.stdout,
                returncode=result.returncode,
            )
        try:
            return parse_answer(result.stdout, response)
        except (ValueError, ValidationError) as e:
            raise ScontrolError(
                f"cannot parse the output of {' '.join(command)}: {e}", command=command
            ) from e


def _scontrol_error(e: SlurmOpsError) -> ScontrolError:
    return ScontrolError.restated(e.message, e)
