"""Slurm's grammar for the values the charms accept from operators and related applications.

Every value that reaches slurm.conf, a node's `--conf` line or a daemon's command line is
checked here first. Two layers:

* the token rule, for every value: printable ASCII with no whitespace, quote, `#`, `=` or
  backslash, so a value can never end its `key=value` token, start a comment, add a key, a
  line or a command-line argument (`"60 Nodes=ALL"` as a MaxTime is refused);
* a rule per key, from slurm.conf(5) and Slurm's own parser (`s_p_handle_uint16/32/64`,
  `time_str2secs`, the partition and node option tables of read_config.c): integer ranges,
  time formats, enumerations, name lists, GRES and host names.

A key without a rule of its own still gets the token rule (`check_value`), but an operator's
slurm.conf or cgroup.conf key must have one (`admitted`: the tables below are allow-lists).
No value may hold a URL with credentials (`user:password@`): Slurm's files are served to every
node and slurm.conf is readable by every user. Keys are matched in any case, as Slurm does.
Validators raise `ValueError` with the reason; `check_value` and `check_fields` raise
`GrammarError`, which names the key as slurm.conf(5) spells it.
"""

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any

from slurmutils import (
    CGroupConfig,
    Model,
    ModelError,
    Node,
    NodeSet,
    Partition,
    SlurmConfig,
    SlurmdbdConfig,
)

from hpc_libs.slurm.text import literals_as_yes_no

Validator = Callable[[str], None]
"""Check one value as written in slurm.conf; raise ValueError saying why it is refused."""

UNLIMITED_WORDS = frozenset({"unlimited", "infinite"})
MAX_PORT = 65535
# Largest number of seconds Slurm's time_str2secs can hold (a C int).
_MAX_TIME_SECONDS = 2**31 - 1
_TOKEN_FORBIDDEN = frozenset("'\"#=\\")
_NAME = r"[A-Za-z0-9_.-]+"
_NAME_RE = re.compile(_NAME)
_GRES_RE = re.compile(rf"{_NAME}(:{_NAME})?(:[0-9]+[KMGTkmgt]?)?")
_TIME_FORMS = (
    re.compile(r"(?P<m>\d+)"),
    re.compile(r"(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"),
)
_HOST_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_CPU_RANGE_RE = re.compile(r"\d+(-\d+)?")
_TRES_WEIGHT_RE = re.compile(rf"{_NAME}(/{_NAME})?=\d+(\.\d+)?[KMGTkmgt]?")
_HOSTLIST_RE = re.compile(r"[A-Za-z0-9_.,\[\]-]+")
_OPTION_RE = re.compile(r"[A-Za-z0-9_./+-]+(=[^=,]+)?")
_PORT_RANGE_RE = re.compile(r"(\d+)-(\d+)")
_DECIMAL_RE = re.compile(r"\d+(\.\d+)?")
_PLUGIN_RE = re.compile(r"[a-z_]+/[A-Za-z0-9_]+")
_WORD_RE = re.compile(r"[A-Za-z0-9_./+-]+")
_URL_CREDENTIALS_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")
_LICENSE_RE = re.compile(rf"{_NAME}(:[0-9]+)?")
_EXIT_CODES_RE = re.compile(r"\d+(-\d+)?")
_SUSPEND_NODES_RE = re.compile(r"[A-Za-z0-9_.,\[\]-]+(:\d+)?")
_SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_.+/-]*")
_PURGE_RE = re.compile(r"(?P<count>[0-9]+)(?P<unit>hours?|days?|months?)?", re.IGNORECASE)
_MAX_PURGE = 0xFFFF
"""Slurm keeps a purge age in the low 16 bits (SLURMDB_PURGE_BASE); above, it is garbled."""
MAX_JOB_ID = 0x03FFFFFF
"""Slurm's largest job id (slurm.h MAX_JOB_ID): a larger MaxJobId is reset to it."""
DEFAULT_MAX_JOB_ID = 0x03FF0000
"""MaxJobId when slurm.conf sets none (slurm.h DEFAULT_MAX_JOB_ID)."""
LOG_TIME_FORMATS = (
    *("iso8601", "iso8601_ms", "rfc5424", "rfc5424_ms"),
    *("rfc3339", "clock", "short", "thread_id"),
)


class GrammarError(ValueError):
    """A value breaks Slurm's grammar for its key.

    Attributes:
        key: The key as slurm.conf(5) spells it (as given when it is unknown).
        reason: Why the value is refused.

    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid {key}: {reason}")
        self.key = key
        self.reason = reason


def returning(rule: Validator) -> Callable[[str], str]:
    """`rule` as a function returning the value it accepts (for `pydantic.AfterValidator`)."""

    def check(value: str) -> str:
        rule(value)
        return value

    return check


# The rules.


def token(value: str) -> None:
    """Check the rule every value obeys: one printable ASCII token, no Slurm syntax in it."""
    _token(value, _TOKEN_FORBIDDEN)


def _token(value: str, forbidden: frozenset[str]) -> None:
    if not value:
        raise ValueError("empty value")
    for char in value:
        if not "!" <= char <= "~":
            raise ValueError(f"{char!r} is whitespace, a control or a non-ASCII character")
        if char in forbidden:
            raise ValueError(f"{char!r} is not allowed in a value")


def free_text(value: str) -> None:
    """Text passed as ONE argv element (a node reason): printable ASCII, spaces, no quotes.

    Rejects control characters (no new line in Slurm's state or logs), quotes and backslash
    (Slurm strips and interprets them), and leading or trailing blanks.
    """
    if not value or value != value.strip():
        raise ValueError("empty, or leading or trailing blanks")
    for char in value:
        if not " " <= char <= "~" or char in "'\"\\":
            raise ValueError(f"{char!r} is not allowed")


def uint(
    bits: int, *, minimum: int = 0, maximum: int | None = None, unlimited: bool = False
) -> Validator:
    """Accept a decimal unsigned integer of `bits` bits, below Slurm's NO_VAL and INFINITE.

    No sign, no float, no hex or `k` suffix (Slurm's parser takes them; the charms do not).
    `maximum` lowers the bound (MaxJobId). With `unlimited`, `UNLIMITED` and `INFINITE` (any
    case) are accepted too.
    """
    highest = 2**bits - 3 if maximum is None else maximum

    def check(value: str) -> None:
        token(value)
        if unlimited and value.lower() in UNLIMITED_WORDS:
            return
        if not value.isdecimal() or not value.isascii():
            words = " or UNLIMITED" if unlimited else ""
            raise ValueError(f"{value!r} is not a whole number{words}")
        if not minimum <= int(value) <= highest:
            raise ValueError(f"{value} is not between {minimum} and {highest}")

    return check


UINT16 = uint(16)
UINT32 = uint(32)
UINT64 = uint(64)


def time_value(value: str) -> None:
    """Check a time limit (MaxTime, DefaultTime) as slurm.conf(5) documents it.

    UNLIMITED, INFINITE, `minutes`, `minutes:seconds`, `hours:minutes:seconds`, `days-hours`,
    `days-hours:minutes` or `days-hours:minutes:seconds`.
    """
    token(value)
    if value.lower() in UNLIMITED_WORDS:
        return
    try:
        seconds = time_seconds(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not UNLIMITED, minutes or [days-]hours:minutes:seconds"
        ) from None
    if seconds > _MAX_TIME_SECONDS:
        raise ValueError(f"{value} is longer than Slurm can hold")


def time_seconds(value: str) -> int:
    """Return the seconds of a time in one of `time_value`'s numeric forms.

    Raises:
        ValueError: `value` is no such time (UNLIMITED included).

    """
    for form in _TIME_FORMS:
        match = form.fullmatch(value)
        if match and value.isascii():
            parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
            return (
                parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
    raise ValueError(f"{value!r} is not minutes or [days-]hours:minutes:seconds")


def one_of(*choices: str) -> Validator:
    """Accept one of `choices`, in any case."""
    allowed = {c.lower() for c in choices}

    def check(value: str) -> None:
        token(value)
        if value.lower() not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")

    return check


def list_of(item: Validator) -> Validator:
    """Accept a comma-separated list of `item`s, none empty."""

    def check(value: str) -> None:
        token(value)
        for part in value.split(","):
            item(part)

    return check


def pattern(regex: re.Pattern[str], what: str) -> Validator:
    """Accept a value `regex` matches whole."""

    def check(value: str) -> None:
        token(value)
        if not regex.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")

    return check


def minutes(minimum: int = 0) -> Validator:
    """Accept a whole number of minutes from `minimum` that Slurm's time parser can hold."""

    def check(value: str) -> None:
        token(value)
        if not value.isdecimal() or not value.isascii():
            raise ValueError(f"{value!r} is not a whole number of minutes")
        if not minimum <= int(value) <= _MAX_TIME_SECONDS // 60:
            raise ValueError(f"{value} is not between {minimum} and {_MAX_TIME_SECONDS // 60}")

    return check


def no_credentials(value: str) -> None:
    """Refuse a URL holding a user or password (`http://user:pw@host`).

    Slurm's files are served to every node and slurm.conf is readable by every user.
    """
    if _URL_CREDENTIALS_RE.search(value):
        raise ValueError(
            "a URL with a user or password (user:password@) would be readable by every user"
        )


def log_time_format(value: str) -> None:
    """Check a LogTimeFormat: a time format, optionally followed by `,format_stderr`."""
    token(value)
    name, sep, suffix = value.lower().partition(",")
    if name not in LOG_TIME_FORMATS or (sep and suffix != "format_stderr"):
        formats = ", ".join(LOG_TIME_FORMATS)
        raise ValueError(f"{value!r} is not one of {formats}[,format_stderr]")


def path_list(separator: str) -> Validator:
    """Accept absolute paths joined by `separator` (PluginDir's `:`, BcastExclude's `,`)."""

    def check(value: str) -> None:
        token(value)
        for part in value.split(separator):
            absolute_path(part)

    return check


def yes_no(value: str) -> None:
    """Check a boolean as Slurm reads it (s_p_handle_boolean): YES/NO, TRUE/FALSE, UP/DOWN, 1/0."""
    one_of("YES", "NO", "TRUE", "FALSE", "UP", "DOWN", "1", "0")(value)


def over_subscribe(value: str) -> None:
    """OverSubscribe: NO, EXCLUSIVE, YES[:count >= 2] or FORCE[:count >= 1]."""
    token(value)
    word, sep, count = value.partition(":")
    word = word.upper()
    if not sep and word in ("NO", "EXCLUSIVE", "YES", "FORCE"):
        return
    least = {"YES": 2, "FORCE": 1}.get(word)
    if least is None or not count.isdecimal() or not least <= int(count) <= 2**15 - 1:
        raise ValueError(f"{value!r} is not NO, EXCLUSIVE, YES[:count] or FORCE[:count]")


def hostname(value: str) -> None:
    """Check an RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens."""
    token(value)
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_HOST_LABEL_RE.fullmatch(label) for label in labels):
        raise ValueError(f"{value!r} is not a host name")


def host(value: str) -> None:
    """Check a host name, an IPv4 address or an IPv6 address (without brackets)."""
    token(value)
    if _ip(value) is not None:
        return
    if "%" in value:
        raise ValueError(f"{value!r} is not an IPv6 address with an interface name after '%'")
    hostname(value)


def port(value: str) -> None:
    """Check a TCP port, 1-65535."""
    token(value)
    if not value.isdecimal() or not value.isascii() or not 1 <= int(value) <= MAX_PORT:
        raise ValueError(f"{value!r} is not a port (1-65535)")


def controller_entry(value: str) -> None:
    """Check a `--conf-server` entry: host or IP, optional `:port` (`[v6]:port` for IPv6)."""
    token(value)
    if value.startswith("["):
        address, sep, rest = value[1:].partition("]")
        if not sep or not isinstance(_ip(address), ipaddress.IPv6Address):
            raise ValueError(f"{value!r} is not [IPv6 address]:port")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{value!r} is not [IPv6 address]:port")
            port(rest[1:])
        return
    if value.count(":") > 1:  # A bare IPv6 address: no port can follow it.
        if not isinstance(_ip(value), ipaddress.IPv6Address):
            raise ValueError(f"{value!r} is not an IPv6 address")
        return
    name, sep, number = value.partition(":")
    host(name)
    if sep:
        port(number)


# A Linux interface name, as an IPv6 scope ID (`fe80::1%eth0`): at most IFNAMSIZ - 1 = 15
# characters, not `.` or `..`. Linux refuses only `/`, `:` and whitespace besides; this rule
# keeps to the letters, digits, `_`, `.` and `-` that interface names use, so no `,` (a
# list separator), `%` or `$` (systemd specifiers) can ride in a scope ID.
_SCOPE_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Return the address `value` holds; None if none, or if its IPv6 scope is no interface."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    scope = address.scope_id if isinstance(address, ipaddress.IPv6Address) else None
    if scope is not None and (not _SCOPE_ID_RE.fullmatch(scope) or scope in (".", "..")):
        return None
    return address


NAME = pattern(_NAME_RE, "a name of letters, digits, '_', '.' or '-'")
NAMES = list_of(NAME)
HOSTLIST = pattern(_HOSTLIST_RE, "a host list")
GRES = list_of(pattern(_GRES_RE, "name[:type][:count]"))
CPU_LIST = list_of(pattern(_CPU_RANGE_RE, "a CPU id or range"))
CPU_BIND = one_of("none", "board", "socket", "ldom", "core", "thread")


def tres_weights(value: str) -> None:
    """TRESBillingWeights: `TRES[/name]=weight` items, comma-separated.

    The one value that holds `=`: Slurm reads a token's key up to its first `=`, so an `=`
    after it stays in the value; whitespace, quotes and `#` are still refused.
    """
    _token(value, _TOKEN_FORBIDDEN - {"="})
    for item in value.split(","):
        if not _TRES_WEIGHT_RE.fullmatch(item):
            raise ValueError(f"{item!r} is not TRES=weight")


def options(value: str) -> None:
    """Check a comma-separated option list of `name` or `name=value` items (SchedulerParameters).

    Like TRESBillingWeights the value holds `=`, after each item's name only; whitespace,
    quotes, `#` and backslash are still refused, so it stays one token.
    """
    _token(value, _TOKEN_FORBIDDEN - {"="})
    for item in value.split(","):
        if not _OPTION_RE.fullmatch(item):
            raise ValueError(f"{item!r} is not name or name=value")


def absolute_path(value: str) -> None:
    """Check an absolute path (a program or file the daemons open); no whitespace or quotes."""
    token(value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")


def port_range(value: str) -> None:
    """Check a TCP port range `low-high` (SrunPortRange): low <= high, both 1-65535."""
    low, high = port_range_bounds(value)
    if low > high:
        raise ValueError(f"{value!r} ends before it starts")


def port_range_bounds(value: str) -> tuple[int, int]:
    """Return the two ends of a `low-high` port range (not checked for order)."""
    token(value)
    match = _PORT_RANGE_RE.fullmatch(value)
    if match is None or not value.isascii():
        raise ValueError(f"{value!r} is not a port range low-high")
    port(match[1])
    port(match[2])
    return int(match[1]), int(match[2])


def decimal(maximum: float) -> Validator:
    """Accept a non-negative decimal number (`95`, `99.5`) up to `maximum`."""

    def check(value: str) -> None:
        token(value)
        if not _DECIMAL_RE.fullmatch(value) or not value.isascii():
            raise ValueError(f"{value!r} is not a number")
        if float(value) > maximum:
            raise ValueError(f"{value} is above {maximum:g}")

    return check


PLUGIN = pattern(_PLUGIN_RE, "a plugin name type/name")
WORDS = list_of(pattern(_WORD_RE, "a word of letters, digits, '_', '.', '/', '+' or '-'"))
LOG_LEVEL = one_of(
    "quiet",
    "fatal",
    "error",
    "info",
    "verbose",
    "debug",
    "debug2",
    "debug3",
    "debug4",
    "debug5",
    *(str(level) for level in range(10)),
)
YES_NO_WORDS = one_of("yes", "no")
"""What slurmutils reads for cgroup.conf's booleans (Slurm reads more spellings)."""


# Partition keys slurmutils accepts, as slurm.conf(5) spells them, with their rules.
PARTITION: Mapping[str, Validator] = {
    "PartitionName": NAME,
    "AllocNodes": HOSTLIST,
    "AllowAccounts": NAMES,
    "AllowGroups": NAMES,
    "AllowQos": NAMES,
    "Alternate": NAME,
    "CpuBind": CPU_BIND,
    "Default": yes_no,
    "DefaultTime": time_value,
    "DefCpuPerGPU": UINT64,
    "DefMemPerCPU": UINT64,
    "DefMemPerGPU": UINT64,
    "DefMemPerNode": UINT64,
    "DenyAccounts": NAMES,
    "DenyQos": NAMES,
    "DisableRootJobs": yes_no,
    "ExclusiveTopo": yes_no,
    "ExclusiveUser": yes_no,
    "GraceTime": UINT32,
    "Hidden": yes_no,
    "LLN": yes_no,
    "MaxCPUsPerNode": uint(32, unlimited=True),
    "MaxCPUsPerSocket": uint(32, unlimited=True),
    "MaxMemPerCPU": uint(64, unlimited=True),
    "MaxMemPerNode": uint(64, unlimited=True),
    "MaxNodes": uint(32, unlimited=True),
    "MaxTime": time_value,
    "MinNodes": UINT32,
    "Nodes": NAMES,
    "OverSubscribe": over_subscribe,
    "OverTimeLimit": uint(16, unlimited=True),
    "PowerDownOnIdle": yes_no,
    "PreemptMode": list_of(one_of("OFF", "CANCEL", "GANG", "REQUEUE", "SUSPEND", "WITHIN")),
    "PriorityJobFactor": UINT16,
    "PriorityTier": UINT16,
    "QOS": NAME,
    "ReqResv": yes_no,
    "ResumeTimeout": UINT16,
    "RootOnly": yes_no,
    "SelectTypeParameters": list_of(
        one_of("CR_Core", "CR_Core_Memory", "CR_Socket", "CR_Socket_Memory")
    ),
    "State": one_of("UP", "DOWN", "DRAIN", "INACTIVE"),
    "SuspendTime": uint(32, unlimited=True),
    "SuspendTimeout": UINT16,
    "TRESBillingWeights": tres_weights,
}

# Node keys slurmutils accepts, as slurm.conf(5) spells them, with their rules.
NODE: Mapping[str, Validator] = {
    "NodeName": NAME,
    "NodeHostname": host,
    "NodeAddr": host,
    "BcastAddr": host,
    "Boards": UINT16,
    "CoreSpecCount": UINT16,
    "CoresPerSocket": UINT16,
    "CpuBind": CPU_BIND,
    "CPUs": UINT16,
    "CpuSpecList": CPU_LIST,
    "Features": NAMES,
    "Gres": GRES,
    "MemSpecLimit": UINT64,
    "Port": port,
    "Procs": UINT16,
    "RealMemory": UINT64,
    "Reason": token,
    "Sockets": UINT16,
    "SocketsPerBoard": UINT16,
    "State": one_of("CLOUD", "DOWN", "DRAIN", "FAIL", "FAILING", "FUTURE", "UNKNOWN"),
    "ThreadsPerCore": UINT16,
    "TmpDisk": UINT32,
    "Weight": UINT32,
}

NODESET: Mapping[str, Validator] = {"NodeSet": NAME, "Feature": NAME, "Nodes": HOSTLIST}

# slurm.conf parameters an operator may set (slurmctld's `slurm-conf-parameters`), as
# slurm.conf(5) spells them, with their rules. This is an allow-list (`admitted`): a key is here
# when its values have a rule as strict as Slurm's own parser (read_config.c: the s_p types,
# time_str2mins/secs, the cross checks of _validate_and_set_defaults), so a value this admits
# is one slurmctld accepts at its next restart. The charm then lets Slurm itself judge the
# whole rendered file before it replaces the live one (`hpc_libs.slurm.check`).
#
# Admitted: scheduling, priority, preemption and limits (integers in Slurm's ranges, times in
# its formats, enumerations); option lists (`name[=value]` items, checked by Slurm); the
# programs and files the daemons run or write (absolute paths: Prolog, Epilog,
# HealthCheckProgram, PluginDir... run as root on every compute node, so whoever may set
# slurmctld's config is root on the cluster); job completion logging (JobCompLoc without
# credentials; JobCompPass is refused: slurm.conf is readable by every user); plugin choices
# slurmutils enumerates; booleans.
#
# Not admitted, whatever slurmutils knows, because no rule here checks them or the charms do
# not support what they need: BurstBufferType, NodeFeaturesPlugins, PrEpPlugins,
# PrioritySiteFactorPlugin and MetricsType (plugins with their own configuration files the
# charms do not write; MetricsType is not in Slurm 24.11 and the slurmctld charm sets it
# itself on 25.11 and newer), their parameters (PrEpParameters,
# PrioritySiteFactorParameters, MCSParameters, FederationParameters, SwitchParameters),
# InteractiveStepOptions (its value holds blanks: quotes, which the token rule refuses),
# CpuFreqDef and GpuFreqDef (frequencies per vendor: no rule), and SlurmctldPidFile,
# SlurmdPidFile and SlurmdSpoolDir (the packages' systemd units and directories own them).
# The keys the charm sets itself are refused by the charm (slurmctld's overrides module).
SLURM_CONF: Mapping[str, Validator] = {
    **dict.fromkeys(
        (
            "BcastParameters",
            "DependencyParameters",
            "JobAcctGatherFrequency",
            "JobAcctGatherParams",
            "JobCompParams",
            "LaunchParameters",
            "MpiParams",
            "PreemptParameters",
            "PriorityParameters",
            "PriorityWeightTRES",
            "ScronParameters",
            "SchedulerParameters",
            "SelectTypeParameters",
            "SlurmctldParameters",
            "SlurmdParameters",
            "TaskPluginParam",
            "TopologyParam",
            "X11Parameters",
        ),
        options,
    ),
    **dict.fromkeys(
        (
            "AccountingStorageEnforce",
            "AccountingStorageTRES",
            "AccountingStoreFlags",
            "CliFilterPlugins",
            "DebugFlags",
            "CpuFreqGovernors",
            "GresTypes",
            "HealthCheckNodeState",
            "JobSubmitPlugins",
            "PriorityFlags",
            "PrivateData",
            "PrologFlags",
            "PropagateResourceLimits",
            "PropagateResourceLimitsExcept",
            "ReconfigFlags",
            "SuspendExcParts",
            "SuspendExcStates",
        ),
        WORDS,
    ),
    **dict.fromkeys(
        (
            "Epilog",
            "EpilogSlurmctld",
            "HealthCheckProgram",
            "MailProg",
            "PlugStackConfig",
            "Prolog",
            "PrologSlurmctld",
            "RebootProgram",
            "ResumeFailProgram",
            "ResumeProgram",
            "ResvEpilog",
            "ResvProlog",
            "SlurmdLogFile",
            "SlurmSchedLogFile",
            "SrunEpilog",
            "SrunProlog",
            "SuspendProgram",
            "TaskEpilog",
            "TaskProlog",
            "TmpFS",
            "UnkillableStepProgram",
        ),
        absolute_path,
    ),
    **dict.fromkeys(
        (
            "AllowSpecResourcesUsage",
            "DisableRootJobs",
            "GroupUpdateForce",
            "JobFileAppend",
            "JobRequeue",
            "KillOnBadExit",
            "PriorityFavorSmall",
            "SlurmSchedLogLevel",
            "TrackWCKey",
            "UsePAM",
        ),
        yes_no,
    ),
    **dict.fromkeys(("PreemptExemptTime", "PriorityDecayHalfLife", "PriorityMaxAge"), time_value),
    **dict.fromkeys(
        (
            "BatchStartTimeout",
            "CompleteWait",
            "EioTimeout",
            "EpilogMsgTime",
            "GetEnvTimeout",
            "HealthCheckInterval",
            "InactiveLimit",
            "KillWait",
            "PrologEpilogTimeout",
            "ResumeRate",
            "ResumeTimeout",
            "SchedulerTimeSlice",
            "SlurmdTimeout",
            "SuspendRate",
            "SuspendTimeout",
            "TCPTimeout",
            "UnkillableStepTimeout",
            "WaitTime",
            "AcctGatherNodeFreq",
            "GroupUpdateTime",
            "VSizeFactor",
        ),
        UINT16,
    ),
    **dict.fromkeys(
        (
            "MaxArraySize",
            "MaxBatchRequeue",
            "MaxDBDMsgs",
            "MinJobAge",
            "PriorityWeightAge",
            "PriorityWeightAssoc",
            "PriorityWeightFairshare",
            "PriorityWeightJobSize",
            "PriorityWeightPartition",
            "PriorityWeightQOS",
        ),
        UINT32,
    ),
    **dict.fromkeys(
        (
            "DefCpuPerGPU",
            "DefMemPerCPU",
            "DefMemPerGPU",
            "DefMemPerNode",
            "MaxMemPerCPU",
            "MaxMemPerNode",
        ),
        UINT64,
    ),
    **dict.fromkeys(
        (
            "AcctGatherEnergyType",
            "AcctGatherFilesystemType",
            "AcctGatherInterconnectType",
            "AcctGatherProfileType",
            "JobCompType",
            "JobContainerType",
            "MCSPlugin",
            "SwitchType",
        ),
        PLUGIN,
    ),
    **dict.fromkeys(
        ("RequeueExit", "RequeueExitHold"),
        list_of(pattern(_EXIT_CODES_RE, "an exit code or range")),
    ),
    **dict.fromkeys(
        ("SlurmctldDebug", "SlurmctldSyslogDebug", "SlurmdDebug", "SlurmdSyslogDebug"), LOG_LEVEL
    ),
    "BcastExclude": path_list(","),
    "EnforcePartLimits": one_of("ALL", "ANY", "NO", "YES"),
    "FairShareDampeningFactor": uint(16, minimum=1),
    "FirstJobId": uint(32, minimum=1),
    "JobCompHost": host,
    "JobCompLoc": token,  # a file or a URL; `check_value` refuses credentials in it
    "JobCompPort": port,
    "JobCompUser": NAME,
    "Licenses": list_of(pattern(_LICENSE_RE, "name[:count]")),
    "LogTimeFormat": log_time_format,
    "MailDomain": hostname,
    "MaxJobId": uint(32, minimum=1, maximum=MAX_JOB_ID),
    "MaxJobCount": uint(32, minimum=1),
    "MaxStepCount": uint(32, minimum=1),
    "MaxTasksPerNode": uint(16, minimum=1),
    "MpiDefault": pattern(_NAME_RE, "an MPI plugin name"),
    "OverTimeLimit": uint(16, unlimited=True),
    "PreemptMode": list_of(one_of("OFF", "CANCEL", "GANG", "REQUEUE", "SUSPEND", "WITHIN")),
    "PreemptType": one_of("preempt/none", "preempt/partition_prio", "preempt/qos"),
    "PluginDir": path_list(":"),
    "PriorityCalcPeriod": minutes(minimum=1),
    "PriorityType": one_of("priority/basic", "priority/multifactor"),
    "PriorityUsageResetPeriod": one_of(
        "NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY"
    ),
    "PropagatePrioProcess": one_of("0", "1", "2"),
    "ResvOverRun": uint(16, unlimited=True),
    "ReturnToService": one_of("0", "1", "2"),
    "SchedulerType": one_of("sched/backfill", "sched/builtin"),
    "SrunPortRange": port_range,
    "SuspendExcNodes": pattern(_SUSPEND_NODES_RE, "a host list[:count]"),
    "SuspendTime": uint(32, unlimited=True),
    "TopologyPlugin": one_of(
        "topology/3d_torus", "topology/block", "topology/default", "topology/tree"
    ),
    "TreeWidth": uint(16, minimum=1),
}

# cgroup.conf parameters an operator may set (slurmctld's `cgroup-parameters`), with their
# rules, as cgroup.conf(5) spells them.
CGROUP_CONF: Mapping[str, Validator] = {
    **dict.fromkeys(
        (
            "ConstrainCores",
            "ConstrainDevices",
            "ConstrainRAMSpace",
            "ConstrainSwapSpace",
            "EnableControllers",
            "IgnoreSystemd",
            "IgnoreSystemdOnFailure",
            "SignalChildrenProcesses",
        ),
        YES_NO_WORDS,
    ),
    **{
        key: decimal(100)
        for key in ("AllowedRAMSpace", "AllowedSwapSpace", "MaxRAMPercent", "MaxSwapPercent")
    },
    "CgroupMountpoint": absolute_path,
    "CgroupPlugin": one_of("autodetect", "cgroup/v1", "cgroup/v2", "disabled"),
    "MemorySwappiness": one_of(*(str(percent) for percent in range(101))),
    "MinRAMSpace": UINT64,
    "SystemdTimeout": UINT32,
}


def safe_path(value: str) -> None:
    """Check an absolute path of letters, digits and `_.+/-`, with no `..` component."""
    pattern(_SAFE_PATH_RE, "an absolute path")(value)
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} holds '..'")


def purge_age(value: str) -> None:
    """Check a Purge*After age as Slurm reads it: 1 to 65535, then hours, days or months."""
    token(value)
    match = _PURGE_RE.fullmatch(value)
    if match is None or not value.isascii():
        raise ValueError(f"{value!r} is not a number with an optional hours, days or months unit")
    if not 1 <= int(match["count"]) <= _MAX_PURGE:
        raise ValueError(f"{match['count']} is not between 1 and {_MAX_PURGE}")


def purge_spelling(value: str) -> str:
    """Spell a purge age with its unit in full: `12` is Slurm's default unit, `12months`.

    slurmutils reads a bare number as an integer, which its schema refuses for these keys.
    """
    match = _PURGE_RE.fullmatch(value)
    if match is None:
        return value
    unit = (match["unit"] or "months").lower()
    return f"{int(match['count'])}{unit if unit.endswith('s') else unit + 's'}"


_DBD_LEVEL = one_of(
    *("quiet", "fatal", "error", "info", "verbose"),
    *("debug", "debug2", "debug3", "debug4", "debug5"),
)
_DBD_DEBUG_FLAGS = (
    *("AuditRPCs", "DB_Archive", "DB_Assoc", "DB_Event", "DB_Job", "DB_QOS", "DB_Query"),
    *("DB_Reservation", "DB_Resource", "DB_Step", "DB_TRES", "DB_Usage", "DB_WCKey"),
    *("Federation", "Network", "NetworkRaw", "TLS"),
)

# slurmdbd.conf parameters an operator may set (slurmdbd's `slurmdbd-conf-parameters`), as
# slurmdbd.conf(5) (Slurm 24.11) spells them, with their rules. Other keys are refused: the
# charm's (hosts, ports, authentication, the database connection, files, the user) and those
# whose values hold `=` (CommunicationParameters), which the token rule forbids.
SLURMDBD_CONF: Mapping[str, Validator] = {
    **dict.fromkeys(
        (
            "AllowNoDefAcct",
            "AllResourcesAbsolute",
            "ArchiveEvents",
            "ArchiveJobs",
            "ArchiveResvs",
            "ArchiveSteps",
            "ArchiveSuspend",
            "ArchiveTXN",
            "ArchiveUsage",
            "DisableCoordDBD",
            "TrackSlurmctldDown",
            "TrackWCKey",
        ),
        yes_no,
    ),
    **dict.fromkeys(("ArchiveDir", "ArchiveScript"), safe_path),
    **dict.fromkeys(("CommitDelay", "MessageTimeout", "TCPTimeout"), UINT16),
    **dict.fromkeys(
        (
            f"Purge{what}After"
            for what in ("Event", "Job", "Resv", "Step", "Suspend", "TXN", "Usage")
        ),
        purge_age,
    ),
    "DebugFlags": list_of(one_of(*_DBD_DEBUG_FLAGS)),
    "DebugLevel": _DBD_LEVEL,
    "DebugLevelSyslog": _DBD_LEVEL,
    "DefaultQOS": NAME,
    "HashPlugin": one_of("hash/k12", "hash/sha3"),
    "LogTimeFormat": log_time_format,
    "MaxQueryTimeRange": time_value,
    "Parameters": one_of("PreserveCaseUser"),
    "PrivateData": list_of(one_of("accounts", "events", "jobs", "reservations", "usage", "users")),
}

_RULES: dict[type[Model], Mapping[str, Validator]] = {
    SlurmConfig: SLURM_CONF,
    CGroupConfig: CGROUP_CONF,
    SlurmdbdConfig: SLURMDBD_CONF,
    Partition: PARTITION,
    Node: NODE,
    NodeSet: NODESET,
}


def _spelling(rules: Mapping[str, Validator]) -> dict[str, str]:
    """Lower-case key, and slurmutils' field name (no underscores) -> slurm.conf spelling."""
    return {key.lower(): key for key in rules}


_SPELLINGS = {model: _spelling(rules) for model, rules in _RULES.items()}


def spelling(model: type[Model], key: str) -> str:
    """`key` (any case, slurmutils' `max_time` too) as slurm.conf(5) spells it."""
    return _SPELLINGS[model].get(key.replace("_", "").lower(), key)


def admitted(model: type[Model], key: str) -> bool:
    """Whether an operator may set `key` (any case) in `model`'s file: it has a rule here."""
    return spelling(model, key) in _RULES[model]


def check_value(model: type[Model], key: str, value: str) -> None:
    """Check one `key=value` of `model` as written in slurm.conf.

    Raises:
        GrammarError: The value breaks the token rule or the key's own rule, or holds a URL
            with credentials.

    """
    name = spelling(model, key)
    rule = _RULES[model].get(name, token)
    try:
        rule(value)  # Every rule applies the token rule first.
        no_credentials(value)
    except ValueError as e:
        raise GrammarError(name, str(e)) from e


def check_model(model: type[Model], fields: Mapping[str, Any]) -> None:
    """Raise ValueError if slurmutils or Slurm's grammar refuses `fields` as a `model`.

    ValueError is what pydantic expects of a field's validator; a GrammarError is one, naming
    the key.
    """
    try:
        model.from_dict(dict(fields))
    except (ModelError, ValueError, TypeError) as e:
        raise ValueError(f"invalid {model.__name__}: {e}") from e
    check_fields(model, fields)


def check_fields(model: type[Model], fields: Mapping[str, Any]) -> None:
    """Check slurmutils fields (a model's `dict()`) as they would be rendered, key by key.

    Each field is rendered alone, as slurmutils would write it, and must come out as exactly
    one `key=value` token whose value obeys the key's rule.

    Raises:
        GrammarError: A field's rendering breaks the grammar, or slurmutils refuses it.

    """
    for key, value in fields.items():
        name = spelling(model, str(key))
        try:
            text = literals_as_yes_no(str(model.from_dict({key: value})))
        except Exception as e:
            raise GrammarError(name, f"not a valid value: {e}") from e
        rendered_key, sep, rendered = text.partition("=")
        if not sep or rendered_key.lower() != str(key).lower() or not rendered:
            raise GrammarError(name, f"renders as {text!r}")
        check_value(model, name, rendered)
