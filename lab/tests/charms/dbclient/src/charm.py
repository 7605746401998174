#!/usr/bin/env python3
"""Ask for database `labtest` (v0 fields) and write the credentials to a client option file."""

import json
import os
from pathlib import Path

import ops

OPTION_FILE = Path("/root/dbclient.cnf")


class DbclientCharm(ops.CharmBase):
    """Requirer side of mysql_client v0, just enough for the stand-in's test."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        framework.observe(self.on.database_relation_changed, self._write)
        framework.observe(self.on.secret_changed, self._write)

    def _write(self, _: ops.EventBase) -> None:
        relation = self.model.get_relation("database")
        if relation is None:
            return
        if self.unit.is_leader():
            relation.data[self.app].update(
                {
                    "database": "labtest",
                    "requested-secrets": json.dumps(
                        ["username", "password", "tls", "tls-ca", "uris"]
                    ),
                }
            )
        remote = relation.data[relation.app]
        if not remote.get("secret-user") or not remote.get("endpoints"):
            return
        content = self.model.get_secret(id=remote["secret-user"]).get_content(refresh=True)
        host, _sep, port = remote["endpoints"].split(",")[0].rpartition(":")
        text = (
            f"[client]\nhost={host}\nport={port}\nuser={content['username']}\n"
            f"password={content['password']}\ndatabase={remote['database']}\n"
        )
        fd = os.open(OPTION_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        self.unit.status = ops.ActiveStatus(f"database at {host}")


if __name__ == "__main__":
    ops.main(DbclientCharm)
