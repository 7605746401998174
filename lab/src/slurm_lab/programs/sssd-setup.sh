#!/bin/sh
# The sssd stand-in (slurm_lab.juju.standins.directory): install Debian's SSSD from the packages
# in $1 if it is not installed, write /etc/sssd/sssd.conf from stdin, let NSS ask SSSD for users
# and groups after the local files, and (re)start SSSD with its caches dropped (nothing when the
# configuration is the one SSSD already runs).
set -eu
export DEBIAN_FRONTEND=noninteractive
if ! dpkg-query -W -f '${db:Status-Abbrev}' sssd-ldap 2>/dev/null | grep -q '^ii'; then
    debs=$1
    set --
    for deb in "$debs"/*.deb; do
        case ${deb##*/} in
            slapd_*|ldap-utils_*) ;;
            *) set -- "$@" "$deb" ;;
        esac
    done
    apt-get -q install -y --no-install-recommends "$@" >/dev/null
fi
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
