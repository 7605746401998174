#!/bin/sh
# In a one-command container of the trixie base, on the host's network: download into /out the
# packages named after $1 (the Debian archive) and every dependency the base lacks
# (slurm_lab.directory_debs). The base keeps its own trixie source; apt checks the archive's
# signature against Debian's keyring.
set -eu
export DEBIAN_FRONTEND=noninteractive
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $1 trixie main" \
    > /etc/apt/sources.list
apt-get -q update >/dev/null
shift
mkdir -p /out/partial
apt-get -q install -y --no-install-recommends --download-only -o Dir::Cache::archives=/out "$@"
