set -eu
export DEBIAN_FRONTEND=noninteractive
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $1 forky main" \
    > /etc/apt/sources.list.d/forky.list
apt-get -q update -o Acquire::Check-Valid-Until=false >/dev/null
shift
mkdir -p /out/partial
apt-get -q install -y --download-only -o Dir::Cache::archives=/out -t forky "$@"
