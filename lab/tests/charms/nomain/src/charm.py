#!/usr/bin/env python3
"""Defines a charm that would be active, but forgets `ops.main`: Juju's dispatch runs nothing."""

import ops


class NomainCharm(ops.CharmBase):
    """Active, if anything ever ran it."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        framework.observe(self.on.collect_unit_status, self._status)

    def _status(self, event: ops.CollectStatusEvent) -> None:
        event.add_status(ops.ActiveStatus("ran"))
