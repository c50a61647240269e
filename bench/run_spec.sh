#!/bin/sh
# bench/run_spec.sh: the speculative-decoding benchmark of docs/perf.md ("Speculative decoding on
# the CPU"): baseline, n-gram lookup and draft-model decoding of models/pycoder over the chat,
# code, math and copy-heavy prompt sets, greedy, 2 threads.
#
#   sh bench/run_spec.sh [extra dspark benchmark flags]
#
# Writes the table to stdout and the JSON to build/bench/spec.json. Other processes using the
# CPU skew every figure, so the script waits (up to two minutes) for the machine to be idle
# first and prints the load average before and after; re-run when the range% column is wide.
set -eu
cd "$(dirname "$0")/.."

make -s build/dspark
mkdir -p build/bench

# Waits until the CPUs were at least 90% idle over two seconds, for at most 120 seconds.
wait_idle() {
    i=0
    while [ $i -lt 60 ]; do
        set -- $(head -1 /proc/stat)
        t0=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle0=$5
        sleep 2
        set -- $(head -1 /proc/stat)
        t1=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle1=$5
        if [ $(( (idle1 - idle0) * 100 )) -ge $(( (t1 - t0) * 90 )) ]; then return 0; fi
        i=$((i + 1))
    done
    echo "warning: the machine stayed busy; figures below are skewed" >&2
}

wait_idle
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
./build/dspark benchmark --modes baseline,lookup,draft --limit 20 --max-new-tokens 128 \
    --trials 5 --threads 2 --temperature 0 --json build/bench/spec.json "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
