#!/bin/sh
# The Prometheus stand-in's install (slurm_lab.juju.standins.prometheus): write the config,
# evaluating every $1, loading the rule files in $2, and start Prometheus with the remote-write
# receiver on port $3.
set -e
interval=$1 rules_dir=$2 port=$3
mkdir -p "$rules_dir"
cat > /etc/default/prometheus <<CONF
ARGS="--web.enable-remote-write-receiver --web.listen-address=:$port"
CONF
cat > /etc/prometheus/prometheus.yml <<CONF
global: {scrape_interval: $interval, evaluation_interval: $interval}
rule_files: ["$rules_dir/*.rules"]
scrape_configs: []
CONF
promtool check config --syntax-only /etc/prometheus/prometheus.yml >/dev/null
systemctl enable --quiet prometheus
systemctl restart prometheus
