#!/bin/sh
# Install Debian's SSSD (LDAP provider, NSS and PAM modules) from the packages in $1 unless it
# is installed: every file there but the server's (slurm_lab.directory_debs). The sssd stand-in
# starts it in the background as soon as its unit is beside a principal (`sssd-install`
# transient unit), so that the machines install at once; sssd-setup.sh waits for it.
set -eu
export DEBIAN_FRONTEND=noninteractive
if dpkg-query -W -f '${db:Status-Abbrev}' sssd-ldap 2>/dev/null | grep -q '^ii'; then
    exit 0
fi
debs=$1
set --
for deb in "$debs"/*.deb; do
    case ${deb##*/} in
        slapd_*|ldap-utils_*) ;;
        *) set -- "$@" "$deb" ;;
    esac
done
apt-get -q install -y --no-install-recommends "$@" >/dev/null
