#!/bin/sh
# bench/run_spec.sh: the speculative-decoding benchmarks of docs/perf.md ("Speculative decoding
# on the CPU"): baseline, n-gram lookup, draft-model, DSpark and DFlash decoding of
# models/pycoder over the chat, code, math and copy-heavy prompt sets, greedy, 2 threads; then
# the no-fire check and the max-draft sweeps of the same section.
#
#   sh bench/run_spec.sh [main|nofire|sweeps|block|all]   (default: main)
#
# Tables go to stdout, JSON to build/bench/spec-*.json. Other processes using the CPU skew every
# figure (and favour speculation: a preempted decode step costs more than a wide verify round),
# so each run first waits for three quiet seconds in a row; the benchmark itself reports the CPU
# share other processes took per trial. Re-run when it says the figures are disturbed.
set -eu
cd "$(dirname "$0")/.."

make -s build/dspark
mkdir -p build/bench
what=${1:-main}

# Waits until three 2-second windows in a row were at least 95% idle (at most ten minutes).
wait_quiet() {
    q=0 i=0
    while [ $q -lt 3 ] && [ $i -lt 300 ]; do
        set -- $(head -1 /proc/stat)
        t0=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle0=$5
        sleep 2
        set -- $(head -1 /proc/stat)
        t1=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle1=$5
        if [ $(( (idle1 - idle0) * 100 )) -ge $(( (t1 - t0) * 95 )) ]; then q=$((q + 1)); else q=0; fi
        i=$((i + 1))
    done
    [ $q -ge 3 ] || echo "warning: the machine stayed busy; figures below are skewed" >&2
}

bench() { # name, flags...
    name=$1
    shift
    wait_quiet
    echo "== $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
    ./build/dspark benchmark --threads 2 --temperature 0 --json "build/bench/spec-$name.json" "$@"
}

case $what in main | all)
    # the table of docs/perf.md: 20 prompts per file, 128 new tokens, 5 trials
    bench main --modes baseline,lookup,draft,dspark,dflash --limit 20 --max-new-tokens 128 \
        --trials 5 --widths 17 ;;
esac
case $what in nofire | all)
    # short outputs, so that some prompts never give the n-gram index a match
    bench nofire --modes baseline,lookup --categories chat,math,code --limit 40 \
        --max-new-tokens 32 --trials 7 ;;
esac
case $what in sweeps | all)
    bench sweep-draft --modes baseline,draft:1,draft:2,draft:3,draft:4,draft:6,draft-nolookup:3 \
        --categories code --limit 10 --max-new-tokens 128 --trials 3
    bench sweep-lookup --modes baseline,lookup:3,lookup:6,lookup:10,lookup:15 --categories copy \
        --limit 30 --max-new-tokens 128 --trials 3 ;;
esac
case $what in block | all)
    bench block --modes baseline,dspark,dspark:3,dspark:5,dspark-nolookup,dflash,dflash-nolookup \
        --limit 10 --max-new-tokens 128 --trials 3 ;;
esac
