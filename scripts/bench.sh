#!/usr/bin/env bash
# Runs softib-wire's throughput benchmark (crates/softib-wire/benches/wire.rs).
#
# Usage: scripts/bench.sh [--quick] [--json] [--rounds N] [--round-ms MS] [FILTER...]
#
# Every result is a ratio against a baseline timed in alternating rounds of the same run
# (crc32fast::hash, memcpy), so results compare across machines and noisy runs; bare ns/op and
# Mop/s are printed for context only. Honours CARGO_TARGET_DIR.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
exec cargo bench -p softib-wire --bench wire -- "$@"
