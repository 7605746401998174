# Developer and CI entry points. `just` lists them; `just test` is what CI (.ci/run) runs.

set shell := ["bash", "-euo", "pipefail", "-c"]

charms := "sackd slurmctld slurmd slurmdbd slurmrestd"
project_tool := "uv run python tools/charmcraft_project.py"
pack_args := env("CHARMCRAFT_PACK_ARGS", "")
pack_dir := env("PACK_DIR", "build")
lab_workers := env("LAB_WORKERS", "5")
lab_test_workers := env("LAB_TEST_WORKERS", "2")

[private]
default:
    @just --list

# Format the code and apply safe lint fixes.
fmt:
    uv run ruff format .
    uv run ruff check --fix .

# Lint: ruff, ruff's formatting check and codespell.
lint:
    uv run ruff check .
    uv run ruff format --check .
    uv run codespell
    uv run python tools/shellcheck_programs.py
    uv run python tools/import_cycles.py

# Alert rules: promtool checks every rule file and runs the test cases in tests/alerts, and
# checks every PromQL expression of the Grafana dashboards (tools/dashboards.py writes them
# as a rule file). promtool comes from Debian (tools/bootstrap.sh).
alerts:
    promtool check rules charms/*/src/prometheus_alert_rules/*.rules
    promtool test rules tests/alerts/*.yaml
    mkdir -p build
    uv run python tools/dashboards.py rules -o build/dashboard-expressions.rules
    promtool check rules build/dashboard-expressions.rules

# Type-check with pyright (strict for libs/hpc_libs, standard elsewhere; see pyproject.toml).
typecheck:
    uv run pyright

# Unit tests (charms in ops.testing, hpc_libs, the charmcraft projects) with coverage: a
# pytest process per charm (their modules share names; tools/unit_tests.py), CPUs at a time.
unit *args:
    uv run coverage erase
    uv run python tools/unit_tests.py {{ args }}
    uv run coverage combine --quiet
    uv run coverage report

# Property-based fuzz suite (hypothesis) over every option, action and databag of the five
# charms; the real Slurm of the lab's cached base judges the rendered files (root; builds the
# base if missing). HYPOTHESIS_PROFILE=deep for a long local hunt.
fuzz *args:
    FUZZ_REQUIRE_SLURM=1 uv run pytest tests/fuzz -p no:cacheprovider {{ args }}

# Mutation checks: each known-bad change (tools/mutants.py) must fail its named unit tests.
# `just mutants --check` only lists the targets (symbol + fragment) that no longer match.
mutants *names:
    uv run python tools/mutants.py {{ names }}

# The lab's own tests: machines, network, teardown, the Juju backend. Needs root. Two modules
# at a time (pytest-xdist, a module per worker, each with its own lab): most of their time is
# spent waiting on hooks and boots (the backend's hook timeouts, the runtime's reboot).
lab-test *args:
    uv run pytest lab/tests -n {{ lab_test_workers }} --dist loadfile \
        --ignore lab/tests/test_vm.py {{ args }}

# hpc_libs driving real Slurm daemons on lab machines (tests/slurm). Needs root. Two labs side
# by side (a module per worker, each worker with the tier's cluster of its own): the tier took
# 342 s in a row in CI before the accounts module (about 3-4 minutes more); 324 s in two.
slurm-test *args:
    uv run pytest tests/slurm -n 2 --dist loadfile {{ args }}

# Modules run `lab_workers` at a time (pytest-xdist, a module per worker, each with a lab of its
# own). The failover tests bound the takeover by the backup's own log, not by a client's probe,
# so sharing the host with other labs slows their clients, not their verdict.
# Integration tests: real Juju if `juju` is on PATH, else the local lab (needs root).
integration *args:
    uv run pytest tests/integration -n {{ lab_workers }} --dist loadfile --durations=40 \
        --ignore tests/integration/test_vm_defaults.py {{ args }}

# VM lab machines (lab/tests/test_vm.py: boot, exec, network, shares, real reboots) and the
# charms' defaults (process-isolation=cgroup) on a compute node that boots its own kernel: a
# qemu VM under software emulation (lab/README.md, "Virtual machines"). CI runs the second
# (`just vm-defaults`); lab/tests/test_vm.py boots two VMs and reboots them (about 6 minutes
# here), which the first covers in part (one VM, its boots and reboots): run both here when
# the lab's VMs change.
integration-vm *args:
    uv run pytest lab/tests/test_vm.py tests/integration/test_vm_defaults.py {{ args }}

# The charms' defaults on one compute VM (tests/integration/test_vm_defaults.py): one lab with
# one VM (qemu under emulation takes one host core), its first run builds the VM image (~3 min).
# `just test` runs it in its lab phase.
vm-defaults *args:
    uv run pytest tests/integration/test_vm_defaults.py {{ args }}

# Controller high availability on the lab: failover by SIGKILL, power-off and network cut.
integration-ha *args:
    uv run pytest tests/integration/test_ha.py {{ args }}

# The integration modules' copies on the newer Slurm (marked `newer_slurm`: the modules whose
# `RELEASES` name forky, and those that need it), a lab of Debian testing each (forky, Slurm
# 26.05 today; needs root). `just integration` runs them beside the 24.11 copies; the first run
# builds and caches the forky base (~2-3 min). The whole suite on forky instead:
# `SLURM_LAB_SUITE=forky just integration`.
integration-newer *args:
    SLURM_LAB_BACKEND=lab uv run pytest tests/integration -m newer_slurm \
        -n {{ lab_workers }} --dist loadfile --durations=40 \
        --ignore tests/integration/test_vm_defaults.py {{ args }}

# A seeded chaos soak on a fresh lab (issue 37; root): jobs from the login node at --rate a
# minute while faults drawn from --seed hit every part of the cluster, invariants checked
# throughout and at the end (tests/soak); writes build/soak-report.json, exits 1 on a
# violation or a job lost in silence. `--dry-run` prints the schedule only; `--small` the
# smaller cluster. A long run: `just soak --minutes 60`.
soak *args:
    uv run python tests/soak/soak.py {{ args }}

# Benchmarks (pytest-benchmark).
bench *args:
    uv run pytest benchmarks --benchmark-only {{ args }}

# Benchmarks on the lab beside their comparators (root); --quick: smoke run; build/bench-lab.json.
# --vm adds figure 11 (a slurmd unit on a VM beside a bare slurmd -Z on a VM; `--only vm` alone).
bench-lab *args:
    uv run python -m benchmarks.lab {{ args }}

# Everything CI runs, in order, timing each step. Pytest's "no tests collected" (exit 5) fails.
test:
    #!/usr/bin/env bash
    set -euo pipefail
    step() {
        local started=$SECONDS status=0
        "{{ just_executable() }}" "$@" || status=$?
        echo "== just $1: $((SECONDS - started)) s"
        return "$status"
    }
    # Wait for a step run in the background (pid $1), print its output (file $2); its status.
    finish() {
        local status=0
        wait "$1" || status=$?
        cat "$2"
        return "$status"
    }
    # What the 2 CPUs did: a phase's share of busy time, and a share per minute for the whole
    # run, so that a phase is moved or split from a measurement (busy = all but idle, iowait).
    cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9; exit}' /proc/stat; }
    busy_share() { # "$before" "$after": busy percent of all CPUs between two readings
        awk -v b="$1" -v a="$2" 'BEGIN{split(b,x," "); split(a,y," "); t=y[2]-x[2];
            printf "%d", (t > 0) ? 100 * (y[1]-x[1]) / t : 0}'
    }
    phase_started=$SECONDS phase_ticks=$(cpu_ticks)
    phase_done() {
        local now; now=$(cpu_ticks)
        echo "== phase $1: $((SECONDS - phase_started)) s, CPUs $(busy_share "$phase_ticks" "$now")% busy"
        phase_started=$SECONDS phase_ticks=$now
    }
    cpu_log=$(mktemp)
    (
        before=$(cpu_ticks)
        while sleep 60; do now=$(cpu_ticks); printf '%s ' "$(busy_share "$before" "$now")"; before=$now; done
    ) > "$cpu_log" & sampler=$!
    trap 'kill "$sampler" 2>/dev/null; echo "== CPUs busy per minute (%): $(cat "$cpu_log")"' EXIT
    for recipe in lint alerts; do step "$recipe"; done
    # pyright and the packs (every charm packed with charmcraft for the lab's machines, and
    # the test charms for trixie; on a fresh machine the base and the build machine first)
    # beside the unit tests, which leave a quarter of the CPUs idle (CI13: 73% busy).
    statuses=()
    typecheck_log=$(mktemp)
    step typecheck > "$typecheck_log" 2>&1 & typecheck=$!
    lab_pack_log=$(mktemp)
    step lab-pack > "$lab_pack_log" 2>&1 & lab_pack=$!
    step unit || statuses+=($?)
    finish "$typecheck" "$typecheck_log" || statuses+=($?)
    finish "$lab_pack" "$lab_pack_log" || statuses+=($?)
    phase_done checks
    [ "${#statuses[@]}" = 0 ] || exit "${statuses[0]}"
    # Then the steps with labs of their own run side by side: the lab's own tests, the fuzz
    # suite (Slurm judges in a chroot of the base), the hpc_libs-on-Slurm tests, the charms
    # packed for the newer Slurm's machines (the integration phase's forky labs), the lab
    # benchmark's smoke run; beside them `just pack`'s path with the real charmcraft and both
    # Ubuntu Python ABIs.
    # The next phase keeps both CPUs 90-99% busy (the charms' hooks in its labs); this one was
    # 65% busy in CI21: the newer Slurm's pack waits on the network (its base) about 3 minutes
    # with the CPUs nearly idle. The mutation checks fill that; what is added past it costs
    # about its CPU time. The charms' defaults on a compute VM (`just vm-defaults`, issue 34:
    # 276 s and 244 CPU-seconds alone, plus the VM image's first build on a clean machine)
    # run here too: the VM is one qemu under emulation, one CPU at most.
    # The background steps' output follows once they are done; the first failure fails the
    # run, after all of them ended.
    newer_log=$(mktemp)
    step lab-pack forky > "$newer_log" 2>&1 & newer=$!
    fuzz_log=$(mktemp)
    step fuzz > "$fuzz_log" 2>&1 & fuzz=$!
    slurm_log=$(mktemp)
    step slurm-test > "$slurm_log" 2>&1 & slurm=$!
    pack_log=$(mktemp)
    step pack-check > "$pack_log" 2>&1 & pack=$!
    smoke_log=$(mktemp)
    step bench-lab-smoke > "$smoke_log" 2>&1 & smoke=$!
    # The mutation checks (CPU only: unit tests in copies of the tree, 527 s in CI21) here, for
    # that idle third, not beside the integration modules, whose labs keep both CPUs busy:
    # there they cost about their CPU time in the phase's time.
    mutants_log=$(mktemp)
    step mutants > "$mutants_log" 2>&1 & mutants=$!
    vm_log=$(mktemp)
    step vm-defaults -s > "$vm_log" 2>&1 & vm=$!
    step lab-test || statuses+=($?)
    finish "$fuzz" "$fuzz_log" || statuses+=($?)
    finish "$slurm" "$slurm_log" || statuses+=($?)
    finish "$pack" "$pack_log" || statuses+=($?)
    finish "$smoke" "$smoke_log" || statuses+=($?)
    finish "$mutants" "$mutants_log" || statuses+=($?)
    finish "$vm" "$vm_log" || statuses+=($?)
    finish "$newer" "$newer_log" || statuses+=($?)
    phase_done labs
    [ "${#statuses[@]}" = 0 ] || exit "${statuses[0]}"
    # The integration modules, a lab each, seven at a time, the copies on 24.11 and on 26.05
    # side by side (each module's `RELEASES`), and the soak's short seed (issue 37). Six left
    # a fifth of the CPUs idle (CI8: 79% busy, the failovers' and the requeue's waits); the
    # lab phase had none to give (97%).
    LAB_WORKERS=7 step integration --ignore tests/integration/test_bench_lab_smoke.py \
        || statuses+=($?)
    phase_done integration
    [ "${#statuses[@]}" = 0 ] || exit "${statuses[0]}"

# One short seed of the soak on the smaller cluster (tests/integration/test_soak_short.py, a
# lab of its own; build/soak-report.json; about 9 minutes alone): `just integration` runs it
# with its modules, in CI too.
soak-short *args:
    uv run pytest tests/integration/test_soak_short.py -s {{ args }}

# The lab benchmark's smoke run (tests/integration/test_bench_lab_smoke.py, a lab of its own):
# `just test` runs it beside the other lab steps, and `just integration` with its modules.
bench-lab-smoke *args:
    uv run pytest tests/integration/test_bench_lab_smoke.py {{ args }}

# Write a charm's full charmcraft.yaml (charmcraft-common.yaml + its own) to OUTPUT.
charmcraft-project charm output="":
    {{ project_tool }} render {{ charm }} {{ if output == "" { "" } else { "-o " + output } }}

# Check every charm's full project with charmcraft's own schema (charmcraft from PyPI).
charmcraft-validate *charms:
    {{ project_tool }} validate {{ charms }}

# Pin charmcraft's dependencies for `charmcraft-validate` (after changing its version).
charmcraft-constraints:
    version=$(sed -n 's/^CHARMCRAFT_VERSION = "\(.*\)"$/\1/p' tools/charmcraft_project.py); \
    echo "charmcraft==$version" | uv pip compile - --universal --python-version 3.11 \
        --custom-compile-command "just charmcraft-constraints" -q \
        -o tools/charmcraft-constraints.txt

# Each charm is staged as a self-contained uv project in build/<charm> (see
# tools/charmcraft_project.py) and charmcraft runs from inside it, once per platform
# (--platform), writing <name>_<platform>.charm there, which is moved to build/; nothing is
# written outside build/. Managed mode (default) needs LXD and packs every platform.
# Destructive mode, on Ubuntu 24.04 or 26.04 without LXD, packs the platform of the host's own
# release only: CHARMCRAFT_PACK_ARGS=--destructive-mode just pack
# $CHARMCRAFT names charmcraft (default: the snap's `charmcraft`), for example the pinned one
# from PyPI, with an absolute constraints path (charmcraft runs in build/<charm>):
# CHARMCRAFT="uv tool run --from charmcraft==4.5.0 --constraints
# $(git rev-parse --show-toplevel)/tools/charmcraft-constraints.txt charmcraft"
# These are the files a user deploys (docs/deploy.md); `just lab-pack`'s are the lab's only.
# $PACK_DIR: another directory than build/ (tests). CHARMCRAFT_PACK_ARGS may hold the tool's
# --platform P (repeatable).
# Pack charms (default: all) into build/, and with no names build/local-charms.yaml.
pack *names:
    {{ project_tool }} pack --build-dir {{ pack_dir }} {{ names }} {{ pack_args }}
    {{ if names == "" { project_tool + " overlay bundles/slurm-cluster.yaml -o " + pack_dir + "/local-charms.yaml" } else { "echo 'no overlay: only just pack with no names writes it'" } }}

# `just pack` with the real charmcraft (PyPI, pinned) for both platforms, in destructive mode
# on this Debian host with only charmcraft's host-base check skipped (tests/pack); then each
# charm's locked dependencies installed for each platform's CPython (3.12, 3.14) and x86_64
# manylinux, every compiled extension's ABI checked (tools/charm_abi.py).
# Check the packing path and both Python ABIs (CI).
pack-check:
    #!/usr/bin/env bash
    set -euo pipefail
    # The ABI check and the two packs (a pytest worker each) run side by side: most of their
    # time is spent waiting on uv, the network and charmcraft's start.
    abi_log=$(mktemp)
    uv run python tools/charm_abi.py targets > "$abi_log" 2>&1 & abi=$!
    status=0
    uv run pytest tests/pack -n 2 -p no:cacheprovider -q || status=$?
    wait "$abi" || status=$?
    cat "$abi_log"
    exit "$status"

# Pack the charms and the lab's test charms for the lab's machines with charmcraft, in a
# build machine of the suite's Debian and Python (root; cached by content under
# /var/cache/slurm-lab/charms, so an unchanged charm is packed once; see lab/README.md).
lab-pack suite="trixie" dirs="charms/* lab/tests/charms/*":
    uv run slurm-lab pack --suite {{ suite }} {{ dirs }}

# Bring up a cluster on the local lab (needs root) and print how to reach it.
lab bundle="bundles/lab.yaml":
    uv run slurm-lab juju deploy {{ bundle }} --wait
    uv run slurm-lab juju exec --unit login/0 -- sinfo
    @echo
    @echo "The cluster is up. Drive it with juju's verbs (docs/operations.md, A session on the lab):"
    @echo "  uv run slurm-lab juju exec --unit login/0 -- srun -N2 hostname"
    @echo "  uv run slurm-lab juju exec --unit login/0 -- sbatch --wrap \"sleep 5\""
    @echo "  uv run slurm-lab juju status    uv run slurm-lab juju debug-log --include slurmctld"
    @echo "  uv run slurm-lab shell <Inst id of login/0 in juju status>"
    @echo "Tear down: uv run slurm-lab down"
