#!/usr/bin/env bash
# The whole test suite, as README.md's second command and .ci/run run it: starts what the
# tests need (scripts/services.sh) and runs every test binary of the workspace, going on past
# a failing one (--no-fail-fast) so that one failure does not hide the others. Extra arguments
# go to `cargo test` before `--` instead of `--workspace` (e.g. `scripts/test.sh -p sundial-cron`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh
export RUST_BACKTRACE=1
if [ $# -eq 0 ]; then set -- --workspace; fi
cargo test --no-fail-fast "$@" -- --show-output
