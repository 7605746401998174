#!/bin/sh
# The sssd stand-in (slurm_lab.juju.standins.directory): wait for the background install
# (sssd-install.sh) and install SSSD from the packages in $1 if it is still missing, write
# /etc/sssd/sssd.conf from stdin, let NSS ask SSSD for users and groups after the local files,
# and (re)start SSSD with its caches dropped (nothing when the configuration is the one SSSD
# already runs).
set -eu
waited=0
while systemctl is-active --quiet sssd-install && [ "$waited" -lt 300 ]; do
    sleep 1
    waited=$((waited + 1))
done
sh -c "$2" sssd-install.sh "$1"
umask 077
mkdir -p /etc/sssd
tmp=/etc/sssd/.sssd.conf.lab-tmp
cat > "$tmp"
if getent group sssd >/dev/null; then
    chgrp sssd "$tmp"
    chmod 0640 "$tmp"
fi
if cmp -s "$tmp" /etc/sssd/sssd.conf && systemctl is-active --quiet sssd; then
    rm -f "$tmp"
    exit 0  # the same configuration, running: no restart, caches kept
fi
mv -f "$tmp" /etc/sssd/sssd.conf
for database in passwd group; do
    if ! grep -Eq "^$database:.*[[:space:]]sss([[:space:]]|\$)" /etc/nsswitch.conf; then
        sed -i -E "s/^($database:.*)\$/\\1 sss/" /etc/nsswitch.conf
    fi
done
systemctl enable --quiet sssd
systemctl stop sssd
rm -f /var/lib/sss/db/cache_* /var/lib/sss/mc/*
systemctl start sssd
