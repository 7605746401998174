"""The one error the machine layer raises."""


class LabError(Exception):
    """A lab operation failed (a command, a boot, a missing machine); the message says which."""
