#!/bin/sh
# The filesystem-client stand-in (slurm_lab.juju.standins.fsclient): mount $1 at $2 with
# options $3 through a mount unit enabled at boot (idempotent).
set -e
source=$1 mountpoint=$2 options=$3
mkdir -p "$mountpoint"
unit=$(systemd-escape --path --suffix=mount "$mountpoint")
printf '%s\n' "# Written by the lab's filesystem-client stand-in." "[Unit]" \
    "Description=Lab shared filesystem at $mountpoint" "[Mount]" "What=$source" \
    "Where=$mountpoint" "Type=none" "Options=$options" "[Install]" \
    "WantedBy=local-fs.target" > "/etc/systemd/system/$unit"
systemctl daemon-reload
systemctl enable --quiet "$unit"
mountpoint -q "$mountpoint" || systemctl start "$unit"
