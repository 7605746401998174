#!/bin/sh
# The filesystem-client stand-in: undo fs-mount.sh for mountpoint $1.
unit=$(systemd-escape --path --suffix=mount "$1")
systemctl disable --now --quiet "$unit" 2>/dev/null
rm -f "/etc/systemd/system/$unit"
systemctl daemon-reload
if mountpoint -q "$1"; then umount "$1"; fi
# Still mounted (busy: a process works in it): say so, as the stand-in's log does.
! mountpoint -q "$1"
