"""Associations as code: the leader makes slurmdbd hold the `accounts` document.

The document (QoS, accounts, users: `hpc_libs.slurm.accounts`) is parsed and checked with
the config, so a bad one blocks the unit naming its key before anything runs. Then, on the
leader, whenever slurmctld accounts to slurmdbd and a document is set, each reconcile:

1. reads what slurmdbd holds (`sacctmgr show`, a few commands) and the associations with
   running or pending jobs;
2. finds what differs from the document for the names it manages (drift: a hand-made
   change, below; the `accounts-diff` action shows every difference);
3. plans and applies the difference (`sacctmgr --immediate`), in the library's safe order;
   no command runs when nothing differs. A removal of an association with jobs is held (a
   status line) and retried by a later event;
4. records in the peer APP databag (so a new leader knows it) the names it manages
   (`accounts_managed`: `Plan.managed_after`, the document's, and the former ones too while a
   removal is held) and the digest of the document applied (`accounts_applied`). Only
   after the apply succeeded: a failed `sacctmgr` (slurmdbd down, a refusal) is a status
   quoting it, nothing is recorded, and the next event (update-status at the latest) tries
   again from what slurmdbd then holds.

Drift (step 2) is what differs while the document is the one last applied in full (its
digest recorded): then only a hand-made change can differ, and the status says what the
reconcile put back. After a new document, what differs is the document's own change.

With a document and slurmdbd, slurm.conf enforces the associations, limits and QoS
(`conf_settings`); without a document it enforces nothing (`AccountingStorageEnforce` with no
associations would refuse every job), and what slurmdbd holds is left as it is.
"""

import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ops
from config import SlurmctldConfig
from facts import Facts
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import AccountsManaged, SlurmctldPeer, SlurmctldPeerData
from hpc_libs.interfaces.slurmdbd import DbdEntry
from hpc_libs.slurm import accounts
from hpc_libs.slurm.accounts import Document, Managed, Sacctmgr

logger = logging.getLogger(__name__)

ENFORCE = ["associations", "limits", "qos"]
"""slurm.conf's AccountingStorageEnforce with a document (the operator may add items)."""
SHOWN = 3
"""Names or lines a status shows before `...`."""


def conf_settings(config: SlurmctldConfig, dbds: Sequence[DbdEntry]) -> dict[str, Any]:
    """slurm.conf's enforcement: only with a document and slurmdbd to hold it."""
    if config.accounts is None or not dbds:
        return {}
    return {"accountingstorageenforce": list(ENFORCE)}


def remembered(memory: SlurmctldPeerData) -> Managed:
    """Return what the leader recorded as managed (nothing, when nothing was recorded)."""
    record = memory.accounts_managed
    return record.managed() if record is not None else Managed()


def digest(document: Document) -> str:
    """Digest the checked document (its canonical form: YAML layout and comments aside)."""
    return hashlib.sha256(document.model_dump_json().encode()).hexdigest()


def diff(document: Document, sacctmgr: Sacctmgr, memory: SlurmctldPeerData) -> tuple[str, ...]:
    """Return what slurmdbd holds that differs from `document`, for the names it manages.

    Raises:
        AccountsError: sacctmgr cannot read slurmdbd (its stderr says why).

    """
    return accounts.drift(document, sacctmgr.read(), remembered(memory))


@dataclass(frozen=True)
class Outcome:
    """What this dispatch's reconcile of the document found, for the status."""

    failure: str | None = None
    """Why nothing (or not everything) was applied: sacctmgr's own words."""
    held: tuple[str, ...] = ()
    """Removals held because their associations have running or pending jobs."""
    drift: tuple[str, ...] = ()
    """Hand-made changes found (and put back, when `failure` is None)."""


class Associations(ops.Object):
    """The leader's reconcile of the `accounts` document, its status and `accounts-diff`."""

    def __init__(self, charm: SlurmCharm[SlurmctldConfig], peer: SlurmctldPeer) -> None:
        super().__init__(charm, "associations")
        self.charm, self.peer = charm, peer
        self.outcome: Outcome | None = None
        """This dispatch's outcome (None: the reconcile did not run or had nothing to do)."""
        charm.framework.observe(charm.on.accounts_diff_action, self._on_accounts_diff)

    def reconcile(self, facts: Facts) -> dict[str, Any] | None:
        """Apply the document (slurmdbd there); return what the peer memory records of it.

        The charm calls it on the leader's path only, once slurm.conf accounts to slurmdbd.
        None: nothing to record (no document, no slurmdbd, or sacctmgr failed).
        """
        document = facts.config.accounts
        if document is None or not facts.dbds:
            return None
        sacctmgr = Sacctmgr()
        try:
            previously = remembered(facts.memory)
            state = sacctmgr.read()
            plan = accounts.plan(
                document,
                state,
                previously,
                busy=sacctmgr.busy(),
                prune_unmanaged=facts.config.accounts_prune_unmanaged,
            )
            # Unchanged since it was applied in full: what differs was changed by hand.
            unchanged = facts.memory.accounts_applied == digest(document)
            drift = accounts.drift(document, state, previously) if unchanged else ()
            if plan.changes:
                sacctmgr.apply(plan)
                logger.info("accounts: applied %d sacctmgr commands", len(plan.changes))
        except SlurmOpsError as e:  # AccountsError is one: sacctmgr's own words.
            reason = _reason(e)
            logger.warning("accounts not applied (the next event tries again): %s", reason)
            self.outcome = Outcome(failure=reason)
            return None
        self.outcome = Outcome(held=plan.held, drift=drift if plan.changes else ())
        managed = plan.managed_after(document, previously)
        return {
            "accounts_managed": AccountsManaged.of(managed),
            "accounts_applied": digest(document),
        }

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say why the document is not applied, which removals wait, what was put back."""
        del facts  # What this dispatch's reconcile found is the fact.
        outcome = self.outcome
        if outcome is None:
            return
        if outcome.failure is not None:
            yield ops.BlockedStatus(f"accounts not applied: {outcome.failure}")
            return
        if outcome.held:
            yield ops.ActiveStatus(f"accounts: removal held while jobs run: {_few(outcome.held)}")
        if outcome.drift:
            yield ops.ActiveStatus(f"accounts: put back hand-made changes: {_few(outcome.drift)}")

    def _on_accounts_diff(self, event: ops.ActionEvent) -> None:
        config = self.charm.valid_config()
        if config is None:
            event.fail("the charm's config is invalid: see the unit's status")
            return
        if config.accounts is None:
            event.fail("no accounts document: the `accounts` option is empty")
            return
        try:
            lines = diff(config.accounts, Sacctmgr(), self.peer.read())
        except (SlurmOpsError, ValueError) as e:
            event.fail(f"cannot read slurmdbd's associations: {_reason(e)}")
            return
        event.set_results({"count": len(lines), "differences": "\n".join(lines) or "none"})


def _reason(error: Exception) -> str:
    """One line for a status: the error's message and the last line of sacctmgr's stderr."""
    if isinstance(error, SlurmOpsError):
        return error.status_message()
    return str(error)


def _few(lines: Sequence[str]) -> str:
    shown = "; ".join(lines[:SHOWN])
    return f"{shown}; ..." if len(lines) > SHOWN else shown
