#!/bin/sh
# The ldap stand-in's install (slurm_lab.juju.standins.directory): Debian's slapd from the
# packages in $1, for the suffix of DNS domain $2 (dc=<label>,...), its admin password on stdin
# (kept in /root/.ldap-admin, root only, for ldapadd -y), listening on ldap:/// and ldapi:///.
set -eu
export DEBIAN_FRONTEND=noninteractive
umask 077
password=$(cat)
domain=$2
printf '%s' "$password" > /root/.ldap-admin
debconf-set-selections <<SEL
slapd slapd/no_configuration boolean false
slapd slapd/domain string $domain
slapd shared/organization string lab
slapd slapd/password1 password $password
slapd slapd/password2 password $password
slapd slapd/purge_database boolean true
slapd slapd/move_old_database boolean true
SEL
if ! dpkg-query -W -f '${db:Status-Abbrev}' slapd 2>/dev/null | grep -q '^ii'; then
    debs=$1
    set --
    for deb in "$debs"/*.deb; do
        case ${deb##*/} in
            sssd*|libsss-*|libnss-sss_*|libpam-sss_*|python3-sss_*|libpam-pwquality_*) ;;
            *) set -- "$@" "$deb" ;;
        esac
    done
    apt-get -q install -y --no-install-recommends "$@" >/dev/null
fi
systemctl enable --quiet slapd
systemctl restart slapd
