#!/usr/bin/env bash
# Installs what softib's tests, CI and fuzzing need and is missing. Idempotent and
# non-interactive; quick when everything is already present.
#
#   tshark        tests/tshark_agreement.rs compares `softib pcap decode` with Wireshark's
#                 dissector (Debian package; the wireshark-common "non-root capture"
#                 debconf question is answered "no" ahead of time).
#   valgrind      instruction-count measurements.
#   Open MPI, MPICH, mpi4py   scripts/mpi.sh (MPI programs over softib through UCX).
#   cargo-fuzz    coverage-guided fuzzing with libFuzzer (scripts/fuzz.sh). Built from
#                 crates.io into the cargo home once; later runs find it there.
#
# Environment: SOFTIB_SKIP_FUZZ_DEPS=1 skips cargo-fuzz.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
CARGO_FUZZ_VERSION="${CARGO_FUZZ_VERSION:-0.13.2}"

log() { printf 'install-deps: %s\n' "$*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        log "not root and no sudo: cannot install Debian packages"; fi
fi

# --- Debian packages ---------------------------------------------------------------------
missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# softib's libibverbs.so.1 runs Debian's own RDMA tools and bindings unmodified
# (scripts/verbs-tools.sh, crates/softib-verbs/tests): the programs, rdma-core's headers (the
# ABI reference of the layout test) and pyverbs.
command -v ibv_rc_pingpong >/dev/null 2>&1 || missing+=(ibverbs-utils)
command -v ib_write_bw >/dev/null 2>&1 || missing+=(perftest)
command -v rping >/dev/null 2>&1 || missing+=(rdmacm-utils)
[ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
# softib's librdmacm.so.1 is tested through rdma-core's <rdma/rdma_cma.h>.
[ -f /usr/include/rdma/rdma_cma.h ] || missing+=(librdmacm-dev)
[ -d /usr/lib/python3/dist-packages/pyverbs ] || missing+=(python3-pyverbs)
# UCX runs unmodified on softib (crates/softib-cli/tests/ucx.rs: ucx_info, ucx_perftest).
command -v ucx_perftest >/dev/null 2>&1 || missing+=(ucx-utils)
# MPI on softib (scripts/mpi.sh): Open MPI and MPICH, each with its compiler's headers, and
# mpi4py for Debian's python3 (built on Open MPI).
command -v mpirun.openmpi >/dev/null 2>&1 || missing+=(openmpi-bin)
[ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || missing+=(libopenmpi-dev)
command -v mpirun.mpich >/dev/null 2>&1 || missing+=(mpich)
[ -f /usr/include/x86_64-linux-gnu/mpich/mpi.h ] || missing+=(libmpich-dev)
[ -d /usr/lib/python3/dist-packages/mpi4py ] || missing+=(python3-mpi4py)
# libfabric's verbs provider (crates/softib-cli/tests/libfabric.rs: fi_info, fi_pingpong,
# and a C program built against <rdma/fabric.h>; scripts/libfabric.sh).
command -v fi_pingpong >/dev/null 2>&1 || missing+=(libfabric-bin)
[ -f /usr/include/rdma/fabric.h ] || missing+=(libfabric-dev)
# libFuzzer is C++ built by the cc crate: needs a C++ compiler.
command -v c++ >/dev/null 2>&1 || missing+=(g++)

if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    # Answer wireshark-common's question (allow non-root capture?) before it is asked.
    echo "wireshark-common wireshark-common/install-setuid boolean false" \
        | $SUDO debconf-set-selections
    apt_install() {
        $SUDO apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            "$@" >/tmp/softib-apt-install.log 2>&1
    }
    # Refresh the package lists only when they are absent or the install fails on them.
    if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1 || ! apt_install "${missing[@]}"; then
        $SUDO apt-get update -qq >/tmp/softib-apt-update.log 2>&1 \
            || { cat /tmp/softib-apt-update.log; exit 1; }
        apt_install "${missing[@]}" || { tail -n 40 /tmp/softib-apt-install.log; exit 1; }
    fi
fi
log "tshark: $(tshark --version 2>/dev/null | head -n1)"

# --- cargo-fuzz ----------------------------------------------------------------------------
if [ "${SOFTIB_SKIP_FUZZ_DEPS:-0}" != 1 ]; then
    cargo_home="${CARGO_HOME:-$HOME/.cargo}"
    if [ -x "$cargo_home/bin/cargo-fuzz" ] || command -v cargo-fuzz >/dev/null 2>&1; then
        :
    else
        log "building cargo-fuzz $CARGO_FUZZ_VERSION from crates.io (one time, 30-60 s)"
        start=$(date +%s)
        # Its own target dir: keeps the project's target dirs out of it and is removed after.
        tmp_target="$(mktemp -d)"
        if ! CARGO_TARGET_DIR="$tmp_target" cargo install --quiet --locked \
            cargo-fuzz --version "$CARGO_FUZZ_VERSION" >/tmp/softib-cargo-fuzz.log 2>&1; then
            tail -n 40 /tmp/softib-cargo-fuzz.log
            rm -rf "$tmp_target"
            exit 1
        fi
        rm -rf "$tmp_target"
        log "cargo-fuzz built in $(( $(date +%s) - start )) s"
    fi
    log "cargo-fuzz: $(cargo fuzz --version 2>/dev/null)"
fi
