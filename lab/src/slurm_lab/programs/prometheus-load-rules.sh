#!/bin/sh
# The Prometheus stand-in: write the rules ($1) to $2 once promtool accepts them; Prometheus
# reloads (SIGHUP).
set -e
rules=$1 rules_file=$2
printf '%s\n' "$rules" > "$rules_file.new"
promtool check rules "$rules_file.new" >/dev/null
mv "$rules_file.new" "$rules_file"
systemctl reload prometheus
