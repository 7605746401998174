#!/bin/sh
# Remount every mount the filesystem-client stand-in made in a machine (fs-mount.sh) with $1
# (ro or rw): a cut network takes the shared filesystem with it.
for unit in /etc/systemd/system/*.mount; do
    grep -q '^Description=Lab shared filesystem' "$unit" 2>/dev/null || continue
    where=$(sed -n 's/^Where=//p' "$unit")
    mountpoint -q "$where" && mount -o "remount,bind,$1" "$where"
done
true
