#!/bin/sh
# The COS collector stand-in (slurm_lab.juju.standins.cos): write the config ($1) and the rules
# ($2 into $3), let promtool judge them, restart Prometheus (as root).
set -e
config=$1 rules=$2 rules_file=$3
mkdir -p "${rules_file%/*}"
printf '%s\n' "$rules" > "$rules_file.new"
printf '%s\n' "$config" > /etc/prometheus/prometheus.yml.new
promtool check rules "$rules_file.new" >/dev/null
promtool check config --syntax-only /etc/prometheus/prometheus.yml.new >/dev/null
mv "$rules_file.new" "$rules_file"
mv /etc/prometheus/prometheus.yml.new /etc/prometheus/prometheus.yml
# As root, like the collector's snap daemon: a job's credentials_file may be root's only.
# Root keeps CAP_DAC_OVERRIDE (Debian's unit drops every capability) for the prometheus
# user's data directory.
mkdir -p /etc/systemd/system/prometheus.service.d
printf '[Service]\nUser=root\nGroup=root\nPrivateUsers=no\nCapabilityBoundingSet=CAP_DAC_OVERRIDE\n' \
    > /etc/systemd/system/prometheus.service.d/root.conf
systemctl daemon-reload
systemctl enable --quiet prometheus
systemctl restart prometheus
