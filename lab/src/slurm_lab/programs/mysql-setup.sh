#!/bin/sh
# The mysql stand-in's install (slurm_lab.juju.standins.mysql): MariaDB listening on the lab
# network, enabled at boot.
set -e
cat > /etc/mysql/mariadb.conf.d/99-lab-standin.cnf <<'CONF'
[mysqld]
bind-address = 0.0.0.0
CONF
systemctl enable --quiet mariadb
systemctl restart mariadb
