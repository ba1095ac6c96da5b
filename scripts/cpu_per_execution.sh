#!/usr/bin/env bash
# CPU time per execution, by thread of the server process, of the bench process and of all
# PostgreSQL processes, during a steady load the machine keeps up with.
#
# Runs `sundial bench steady --rate RATE --duration 30s` with the rest of the arguments, and
# reads utime + stime (in clock ticks) from /proc/<pid>/task/<tid>/stat 10 s after the start
# and again 15 s later; each thread's difference over the executions due in those 15 s
# (RATE * 15) is its CPU per execution, in microseconds. Threads that exited inside the window
# are not counted; PostgreSQL backends are summed by process. The bench's JSON line follows.
#
# Usage (from the repository root, after `cargo build --release -p sundial`):
#   scripts/cpu_per_execution.sh 5000
#   scripts/cpu_per_execution.sh 4000 --database-url postgres://root@127.0.0.1:5432/bench_s
# SUNDIAL_BIN names another binary (default target/release/sundial).
set -euo pipefail
rate=${1:?usage: cpu_per_execution.sh RATE [bench arguments]}
shift
bin=${SUNDIAL_BIN:-target/release/sundial}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" bench steady --rate "$rate" --duration 30s "$@" >"$out" 2>/dev/null &
bench=$!
sleep 10
server=$(pgrep -f "server --node-id bench-$bench" | head -n1)
snapshot() {
  for t in /proc/"$server"/task/*; do
    echo "server:$(tr ' ' _ <"$t/comm"):${t##*/} $(awk '{print $14 + $15}' "$t/stat")"
  done
  echo "bench $(awk '{print $14 + $15}' /proc/"$bench"/stat)"
  for p in $(pgrep -x postgres || true); do
    echo "postgres:$p $(awk '{print $14 + $15}' /proc/"$p"/stat 2>/dev/null || echo 0)"
  done
}
before=$(snapshot)
sleep 15
after=$(snapshot)
wait "$bench"
python3 - "$rate" "$(getconf CLK_TCK)" "$before" "$after" <<'PY'
import sys
rate, hz = int(sys.argv[1]), int(sys.argv[2])
parse = lambda text: dict((k, int(v)) for k, v in (l.split() for l in text.splitlines()))
before, after = parse(sys.argv[3]), parse(sys.argv[4])
executions = rate * 15
spent = {k: (v - before[k]) / hz / executions * 1e6 for k, v in after.items() if k in before}
postgres = sum(v for k, v in spent.items() if k.startswith('postgres:'))
for k, v in sorted(spent.items(), key=lambda kv: -kv[1]):
    if not k.startswith('postgres:') and v >= 0.5:
        print(f'{k:40s} {v:7.1f} µs per execution')
if postgres:
    print(f'{"postgres (all processes)":40s} {postgres:7.1f} µs per execution')
PY
tail -n1 "$out"
