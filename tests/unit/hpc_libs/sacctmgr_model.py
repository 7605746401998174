"""An in-memory model of what `sacctmgr --immediate` commands do to slurmdbd's associations.

It runs a `Plan`'s argv lists on a `State`, as slurmdbd does (checked against the real one
by tests/slurm/test_accounts.py, which applies the same documents): a QoS or account is
added with Slurm's defaults and what the command gives (an account without `qos=` inherits
its parent's list); `set` changes only what it names, `-1` clears a limit, an empty value a
list, and a TRES limit is merged name by name (`cpu=-1` clears cpu only); an account's unset
Max limit and default QoS show its parent's; removing a user with no `account=` removes every
association of it, removing an account removes its users' associations, removing a QoS takes
it out of every list. Only the argv forms the library writes are understood: anything else
fails the test.
"""

from collections.abc import Mapping, Sequence

from hpc_libs.slurm import accounts
from hpc_libs.slurm.accounts import NORMAL, ROOT, AccountState, Plan, State, UserState

QOS_DEFAULTS = {key.keyword: key.default for key in accounts._QOS_KEYS}  # pyright: ignore[reportPrivateUsage]
ACCOUNT_DEFAULTS = {key.keyword: key.default for key in accounts._ACCOUNT_KEYS}  # pyright: ignore[reportPrivateUsage]
INHERITED = [
    key.keyword
    for key in accounts._ACCOUNT_KEYS  # pyright: ignore[reportPrivateUsage]
    if key.inherited
]
KINDS = {
    key.keyword: key.kind
    for key in (*accounts._QOS_KEYS, *accounts._ACCOUNT_KEYS)  # pyright: ignore[reportPrivateUsage]
}


def empty() -> State:
    """A fresh slurmdbd: the `normal` QoS, the root account and root's association."""
    return State(
        qos={NORMAL: dict(QOS_DEFAULTS)},
        accounts={ROOT: AccountState("", dict(ACCOUNT_DEFAULTS), "default root account")},
        users={ROOT: UserState(ROOT, "administrator", {ROOT: {"fairshare": "1"}})},
    )


def apply(state: State, plan: Plan) -> State:
    """The state after running every change of `plan` on `state`."""
    qos = {name: dict(settings) for name, settings in state.qos.items()}
    accounts_ = {
        name: AccountState(a.parent, dict(a.settings), a.description)
        for name, a in state.accounts.items()
    }
    users = {
        name: UserState(
            u.default_account, u.admin_level, {a: dict(s) for a, s in u.associations.items()}
        )
        for name, u in state.users.items()
    }
    model = _Model(qos, _explicit(accounts_), users)
    for change in plan.changes:
        model.run(change.argv)
    return State(model.qos, _shown(model.accounts), model.users)


def _explicit(shown: dict[str, AccountState]) -> dict[str, AccountState]:
    """Accounts as slurmdbd keeps them: an inherited limit equal to the parent's is unset."""
    kept: dict[str, AccountState] = {}
    for name, account in shown.items():
        parent = shown.get(account.parent)
        settings = dict(account.settings)
        for keyword in INHERITED:
            if (
                parent is not None
                and account.parent != ROOT
                and settings[keyword] == parent.settings[keyword]
            ):
                settings[keyword] = ""
        kept[name] = AccountState(account.parent, settings, account.description)
    return kept


def _shown(kept: dict[str, AccountState]) -> dict[str, AccountState]:
    """Accounts as sacctmgr shows them: an unset inherited limit shows the parent's value."""
    shown: dict[str, AccountState] = {}

    def show(name: str) -> AccountState:
        if name not in shown:
            account = kept[name]
            settings = dict(account.settings)
            if account.parent in kept and account.parent != ROOT:
                parent = show(account.parent).settings
                for keyword in INHERITED:
                    settings[keyword] = settings[keyword] or parent[keyword]
            shown[name] = AccountState(account.parent, settings, account.description)
        return shown[name]

    for name in kept:
        show(name)
    return shown


def _pairs(argv: Sequence[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in argv:
        keyword, _, value = item.partition("=")
        pairs[keyword] = value
    return pairs


def _value(keyword: str, old: str, new: str) -> str:
    kind = KINDS.get(keyword, "word")
    if kind == "tres":
        merged = dict(item.split("=") for item in old.split(",") if item)
        assert "=" in new, "sacctmgr refuses a TRES limit without names (no TRES id found)"
        for item in new.split(","):
            name, count = item.split("=")
            if count == "-1":
                merged.pop(name, None)
            else:
                merged[name] = count
        return accounts._canonical("tres", ",".join(f"{n}={c}" for n, c in merged.items()))  # pyright: ignore[reportPrivateUsage]
    assert kind != "names" or new != "-1", "sacctmgr refuses -1 for a list"
    if new == "-1":
        return ""
    return accounts._canonical(kind, new)  # pyright: ignore[reportPrivateUsage]


def _set(
    settings: Mapping[str, str], defaults: Mapping[str, str], assignments: Mapping[str, str]
) -> dict[str, str]:
    changed = dict(settings)
    for keyword, new in assignments.items():
        assert new != "''" and not keyword.endswith("-"), "sacctmgr: use `preempt=` to clear"
        changed[keyword] = _value(keyword, changed.get(keyword, ""), new) or defaults[keyword]
    return changed


class _Model:
    def __init__(
        self,
        qos: dict[str, dict[str, str]],
        accounts_: dict[str, AccountState],
        users: dict[str, UserState],
    ) -> None:
        self.qos = qos
        self.accounts = accounts_
        self.users = users

    def run(self, argv: Sequence[str]) -> None:
        verb, kind, *rest = argv
        if verb == "add":
            getattr(self, f"add_{kind}")(_pairs(rest))
            return
        assert rest[0] == "where", argv
        cut = rest.index("set") if "set" in rest else len(rest)
        where, assignments = _pairs(rest[1:cut]), _pairs(rest[cut + 1 :])
        getattr(self, f"{verb}_{kind}")(where["name"].split(","), where, assignments)

    def add_qos(self, given: dict[str, str]) -> None:
        for name in given.pop("name").split(","):
            assert name not in self.qos, f"qos {name} exists"
            self.qos[name] = _set(QOS_DEFAULTS, QOS_DEFAULTS, given)

    def modify_qos(self, names: list[str], where: dict[str, str], given: dict[str, str]) -> None:
        for name in names:
            self.qos[name] = _set(self.qos[name], QOS_DEFAULTS, given)

    def remove_qos(self, names: list[str], where: dict[str, str], given: dict[str, str]) -> None:
        for name in names:
            del self.qos[name]
        for qos, settings in self.qos.items():
            kept = [n for n in settings["preempt"].split(",") if n and n not in names]
            self.qos[qos] = {**settings, "preempt": ",".join(kept)}

    def add_account(self, given: dict[str, str]) -> None:
        parent = given.pop("parent", ROOT)
        description = given.pop("description", None)
        inherited = {**ACCOUNT_DEFAULTS, "qos": self.accounts[parent].settings["qos"]}
        for name in given.pop("name").split(","):
            assert name not in self.accounts, f"account {name} exists"
            self.accounts[name] = AccountState(
                parent, _set(inherited, ACCOUNT_DEFAULTS, given), (description or name).lower()
            )

    def modify_account(
        self, names: list[str], where: dict[str, str], given: dict[str, str]
    ) -> None:
        for name in names:
            old = self.accounts[name]
            parent = given.get("parent", old.parent)
            description = given.get("description", old.description)
            settings = {k: v for k, v in given.items() if k not in ("parent", "description")}
            self.accounts[name] = AccountState(
                parent, _set(old.settings, ACCOUNT_DEFAULTS, settings), description
            )

    def remove_account(
        self, names: list[str], where: dict[str, str], given: dict[str, str]
    ) -> None:
        for name in names:
            assert not any(a.parent == name for a in self.accounts.values()), (
                f"{name} has children"
            )
            del self.accounts[name]
            for user in list(self.users):
                self._drop(user, name)

    def add_user(self, given: dict[str, str]) -> None:
        account = given.pop("account")
        assert account in self.accounts, f"no account {account}"
        for name in given.pop("name").split(","):
            user = self.users.get(name) or UserState(account, "none", {})
            assert account not in user.associations, f"{name} is in {account}"
            share = _set({"fairshare": "1"}, {"fairshare": "1"}, given)
            self.users[name] = UserState(
                user.default_account, user.admin_level, {**user.associations, account: share}
            )

    def modify_user(self, names: list[str], where: dict[str, str], given: dict[str, str]) -> None:
        for name in names:
            user = self.users[name]
            if "account" in where:
                account = where["account"]
                share = _set(user.associations[account], {"fairshare": "1"}, given)
                associations = {**user.associations, account: share}
                self.users[name] = UserState(user.default_account, user.admin_level, associations)
                continue
            default = given.get("defaultaccount", user.default_account)
            assert default in user.associations, f"{name} is not in {default}"
            level = given.get("adminlevel", user.admin_level)
            self.users[name] = UserState(default, level, user.associations)

    def remove_user(self, names: list[str], where: dict[str, str], given: dict[str, str]) -> None:
        for name in names:
            if "account" in where:
                self._drop(name, where["account"])
            else:
                del self.users[name]

    def _drop(self, name: str, account: str) -> None:
        user = self.users[name]
        associations = {a: s for a, s in user.associations.items() if a != account}
        if not associations:
            del self.users[name]
            return
        default = user.default_account
        if default == account:
            default = sorted(associations)[0]
        self.users[name] = UserState(default, user.admin_level, associations)
