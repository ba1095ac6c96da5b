#!/usr/bin/env bash
# A worker that dies holding a burst (BENCHMARKS.md, "A burst held whole"): a server on a fresh
# SQLite file holds N one-off jobs due at one instant (claimed ahead with --claim-ahead 3s),
# is SIGKILLed 1 s before their fire time and restarted on the same file; a loopback receiver
# records every delivery. Prints how many were delivered, how many twice or early, and how late
# the first delivery of each slot was (seconds after the fire time).
#
# Usage: scripts/burst_kill.sh [BINARY] [N]   (default target/release/sundial, 30000)
set -euo pipefail
BIN=$(realpath "${1:-target/release/sundial}")
N=${2:-30000}
DIR=$(mktemp -d)
cd "$DIR"
cat > recv.py <<'PY'
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
out = open(sys.argv[2], "a", buffering=1)
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        if n:
            self.rfile.read(n)
        with lock:
            out.write(json.dumps({"t": time.time(), "p": self.path, "k": self.headers.get("idempotency-key")}) + "\n")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer.request_queue_size = 1024
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
python3 recv.py 18181 deliveries.log & RECV=$!
"$BIN" server --database-url "sqlite://$DIR/k.db" --listen 127.0.0.1:18080 --claim-ahead 3s > srv1.log 2>&1 & SRV=$!
trap 'kill $RECV $SRV 2>/dev/null || true' EXIT
sleep 2
AT=$(( $(date +%s) + 25 ))
python3 - "$AT" "$N" <<'PY'
import datetime, json, sys, urllib.request
at = datetime.datetime.fromtimestamp(int(sys.argv[1]), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
n = int(sys.argv[2])
for b in range(0, n, 1000):
    jobs = [{"name": f"b{i:06d}", "schedule": {"at": at}, "target": {"type": "http", "method": "POST", "url": f"http://127.0.0.1:18181/b{i:06d}"}} for i in range(b, min(b + 1000, n))]
    req = urllib.request.Request("http://127.0.0.1:18080/v1/namespaces/burst/jobs:apply", data=json.dumps({"jobs": jobs}).encode(), headers={"content-type": "application/json"}, method="POST")
    urllib.request.urlopen(req).read()
print(f"created {n} one-off jobs at {at}")
PY
while [ "$(date +%s%N)" -lt $(( (AT - 1) * 1000000000 )) ]; do sleep 0.05; done
kill -9 $SRV; wait $SRV 2>/dev/null || true
echo "killed at $(date -u +%T.%N)"
"$BIN" server --database-url "sqlite://$DIR/k.db" --listen 127.0.0.1:18082 > srv2.log 2>&1 & SRV=$!
for _ in $(seq 1 300); do
  sleep 2
  [ "$(wc -l < deliveries.log)" -ge "$N" ] && break
done
python3 - "$AT" "$N" <<'PY'
import collections, json, sys
at, n = int(sys.argv[1]), int(sys.argv[2])
first, count = {}, collections.Counter()
for line in open("deliveries.log"):
    d = json.loads(line)
    count[d["p"]] += 1
    first[d["p"]] = min(first.get(d["p"], 1e18), d["t"])
late = sorted(t - at for t in first.values())
print(f"delivered {len(first)} of {n}, twice {sum(1 for c in count.values() if c > 1)}, early {sum(1 for x in late if x < 0)}")
if late:
    print(f"lateness s: min {late[0]:.1f} p50 {late[len(late) // 2]:.1f} max {late[-1]:.1f}")
PY
