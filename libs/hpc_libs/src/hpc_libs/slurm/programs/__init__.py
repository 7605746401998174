"""Programs the managers install on the machine, run there by systemd with its python3."""
