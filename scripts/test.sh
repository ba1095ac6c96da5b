#!/usr/bin/env bash
# The whole test suite, as README.md's second command and .ci/run run it: starts what the
# tests need (scripts/services.sh) and runs every test binary of the workspace, going on past
# a failing one (--no-fail-fast) so that one failure does not hide the others. Extra arguments
# go to `cargo test` before `--` instead of `--workspace` (e.g. `scripts/test.sh -p sundial-cron`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh
export RUST_BACKTRACE=1
whole=0
if [ $# -eq 0 ]; then whole=1; set -- --workspace; fi
status=0
cargo test --no-fail-fast "$@" -- --show-output || status=$?
# The whole suite also holds the live server to its OpenAPI document.
if [ "$whole" = 1 ]; then bash scripts/schemathesis.sh || status=1; fi
exit "$status"
