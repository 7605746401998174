#!/usr/bin/env python3
"""Needs pydantic, which its pyproject forgot."""

import ops
import pydantic


class UndeclaredCharm(ops.CharmBase):
    """Would report pydantic's version, if it could import it."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        framework.observe(self.on.collect_unit_status, self._status)

    def _status(self, event: ops.CollectStatusEvent) -> None:
        event.add_status(ops.ActiveStatus(pydantic.VERSION))


if __name__ == "__main__":  # pragma: nocover
    ops.main(UndeclaredCharm)
