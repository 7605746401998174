#!/bin/sh
# Add the LDIF on stdin to the ldap stand-in's directory as its admin $1 (ldapi, on the server's
# machine). With $2 = "existing-ok", entries that already exist are not an error.
set -eu
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
ldapadd -x -c -H ldapi:/// -D "$1" -y /root/.ldap-admin > "$out" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
    if [ "${2:-}" = existing-ok ] && ! grep -v 'Already exists' "$out" | grep -q '^ldap_add:'; then
        exit 0
    fi
    cat "$out" >&2
    exit "$status"
fi
