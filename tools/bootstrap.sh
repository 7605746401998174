#!/usr/bin/env bash
# Set up a fresh Debian machine (root, python3) for this repository: the lab's host packages
# (apt), uv and just (PyPI: uv, rust-just) in a venv of their own linked into /usr/local/bin,
# and the workspace (`uv sync --frozen --compile-bytecode`). Safe to run again; each step
# prints its duration.
# README.md's two commands and CI's .ci/run all start with it.
set -euo pipefail

cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
TOOLS_VENV=${SLURM_CHARMS_TOOLS_VENV:-/opt/slurm-charms-tools}

step() {
    local name=$1
    shift
    local started=$SECONDS
    echo "::: $name"
    "$@"
    echo "::: $name: $((SECONDS - started)) s"
}

apt_base() {
    apt-get update
    # shellcheck: `just lint` checks the shell programs the charms ship (charms/*/src/programs).
    apt-get install -y --no-install-recommends ca-certificates git shellcheck
    # `just pack-check` runs charmcraft on this host: its apt backend imports python3-apt, and
    # the uv plugin's build-packages (python3-dev, python3-venv) are then present beforehand.
    apt-get install -y --no-install-recommends python3-apt python3-dev python3-venv
    # tests/slurm compiles the fault it preloads into slurmd (hang_forked_exit.c).
    apt-get install -y --no-install-recommends gcc libc6-dev
}

tools() {
    # Debian's python3 refuses `pip install` outside a venv (PEP 668); its venv module comes
    # with python3-venv.
    if ! python3 -m venv "$TOOLS_VENV" 2>/dev/null; then
        apt-get install -y --no-install-recommends python3-venv
        python3 -m venv "$TOOLS_VENV"
    fi
    "$TOOLS_VENV/bin/pip" install --quiet --upgrade uv rust-just
    ln -sf "$TOOLS_VENV/bin/uv" "$TOOLS_VENV/bin/uvx" "$TOOLS_VENV/bin/just" /usr/local/bin/
}

workspace() {
    # Bytecode compiled once here (about 1 s): Python never writes it where
    # PYTHONDONTWRITEBYTECODE is set, and each process would compile ops, pydantic, pytest...
    # again (1.6 s against 0.9 s to import them, measured).
    uv sync --frozen --compile-bytecode
}

lab_host_packages() {
    # The lab lists what it needs from the host (debootstrap, systemd-container, iproute2, ...).
    local packages
    packages=$(uv run --frozen slurm-lab host-requirements)
    # shellcheck disable=SC2086 # one word per package
    apt-get install -y --no-install-recommends $packages
}

install_promtool() {
    # `just alerts` runs promtool, which Debian ships in the `prometheus` package. Installing
    # that package would start a Prometheus server, so only promtool is taken from it.
    if command -v promtool >/dev/null; then
        return
    fi
    local dir
    dir=$(mktemp -d)
    (cd "$dir" && apt-get download prometheus && dpkg-deb -x prometheus_*.deb root)
    install -m 0755 "$dir/root/usr/bin/promtool" /usr/local/bin/promtool
    rm -rf "$dir"
    promtool --version | head -1
}

step "apt: base packages" apt_base
step "promtool from Debian's prometheus package" install_promtool
step "uv and just from PyPI" tools
export PATH="/usr/local/bin:$PATH"
uv --version
just --version
step "uv sync --frozen --compile-bytecode" workspace
step "apt: lab host packages" lab_host_packages
