"""Programs the lab installs in its machines, as files (checked by ruff, pyright, shellcheck)."""
