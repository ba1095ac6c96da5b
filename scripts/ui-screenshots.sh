#!/usr/bin/env bash
# Writes a PNG of each page of the web UI (/ui/) from the demo's data set, for a reviewer to
# look at: starts `sundial demo` (its own server on the embedded store, the example jobs and
# workflows firing against a local receiver), waits until they have history, then has
# headless Chromium (Debian's `chromium`) render each page at 1280x900.
#
#   bash scripts/ui-screenshots.sh [OUT_DIR]      # default: target/ui-screenshots
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/ui-screenshots}"
mkdir -p "$out"
if ! command -v chromium >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
fi
cargo build --quiet -p sundial
bin="${CARGO_TARGET_DIR:-target}/debug/sundial"
log=$(mktemp)
"$bin" demo --duration 300s >"$log" 2>&1 &
demo=$!
trap 'kill $demo 2>/dev/null || true; rm -f "$log"' EXIT
api=""
for _ in $(seq 1 300); do
    api=$(grep -o 'API on http://[0-9.:]*' "$log" | head -1 | sed 's/API on //') || true
    [ -n "$api" ] && break
    sleep 0.1
done
[ -n "$api" ] || { echo "ui-screenshots.sh: the demo did not start:" >&2; cat "$log" >&2; exit 1; }
echo "demo API at $api; letting its jobs and workflows run for 25 s"
sleep 25
json() { curl -fsS "$api$1"; }
pick() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
job=$(json /v1/namespaces/demo/jobs | pick 'd["items"][0]["name"]')
execution=$(json "/v1/namespaces/demo/jobs/$job/executions?limit=20" | pick 'next(e["id"] for e in d["items"] if e["state"] != "scheduled")')
workflow=etl
run=$(json "/v1/namespaces/demo/workflows/$workflow/runs" | pick 'd["items"][0]["id"]')
shoot() {
    chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size=1280,900 --virtual-time-budget=2000 \
        --screenshot="$out/$1.png" "$api$2" >/dev/null 2>&1
    echo "$out/$1.png  $2"
}
shoot overview /ui/
shoot jobs /ui/namespaces/demo/jobs
shoot job "/ui/namespaces/demo/jobs/$job"
shoot execution "/ui/namespaces/demo/executions/$execution"
shoot dead-letters /ui/namespaces/demo/dead-letters
shoot workflows /ui/namespaces/demo/workflows
shoot workflow "/ui/namespaces/demo/workflows/$workflow"
shoot run "/ui/namespaces/demo/runs/$run"
shoot cluster /ui/cluster
