#!/usr/bin/env bash
# Runs schemathesis (PyPI) against a live `sundial server` from its own document
# (GET /v1/openapi.json): generated requests for every operation, failing on any 5xx answer
# and on any answer that breaks the document's schemas. Installs schemathesis when it is
# missing; builds (or finds built) the debug binary. scripts/test.sh runs it
# after the test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v schemathesis >/dev/null 2>&1; then
    python3 -m pip install --quiet 'schemathesis>=4,<5'
fi
cargo build --quiet -p sundial
bin="${CARGO_TARGET_DIR:-target}/debug/sundial"
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" server --listen "127.0.0.1:$port" --database-url "sqlite://$dir/db.sqlite" >"$dir/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
ready=0
for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    echo "schemathesis.sh: the server did not become ready; its log:" >&2
    cat "$dir/server.log" >&2
    exit 1
fi
# A fixed seed, so a failure here is reproduced by running this script again. It runs in the
# temporary directory, where its example database and caches (.schemathesis/) go and are
# removed with it: the checkout stays as it was.
cd "$dir"
schemathesis run "http://127.0.0.1:$port/v1/openapi.json" \
    --checks not_a_server_error,response_schema_conformance \
    --max-examples 30 --seed 20261202 --no-color
