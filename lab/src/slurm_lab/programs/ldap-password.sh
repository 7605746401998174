#!/bin/sh
# Set the password of entry $2 to stdin's content, as the ldap stand-in's admin $1 (ldapi).
set -eu
umask 077
tmp=$(mktemp /root/.ldap-bind.XXXXXX)
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
ldappasswd -x -H ldapi:/// -D "$1" -y /root/.ldap-admin -T "$tmp" "$2" >/dev/null
