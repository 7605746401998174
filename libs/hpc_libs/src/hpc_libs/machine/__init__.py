"""Machine-level operations: processes, files, apt packages and systemd services."""
