#!/bin/sh
# bench/run.sh: builds the benchmarks, writes the random-weight model if missing, and runs the
# kernel-only and end-to-end CPU benchmarks at 1 and 2 threads.
#
#   sh bench/run.sh [MODEL_DIR] [extra bench_forward flags]
#
# MODEL_DIR defaults to $DSPARK_BENCH_DIR/qwen3-0.6b ($DSPARK_BENCH_DIR: /tmp/dspark-bench);
# the weights are never written inside the repository. Other processes using the CPU skew
# every figure, so the script waits (up to a minute) for the machine to be idle first.
set -eu
cd "$(dirname "$0")/.."

BENCH_DIR=${DSPARK_BENCH_DIR:-/tmp/dspark-bench}
MODEL=${1:-$BENCH_DIR/qwen3-0.6b}
[ $# -gt 0 ] && shift
OUT=build/bench
CC=${CC:-cc}
CFLAGS="-O3 -march=native -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Werror -Isrc -Ibench -pthread"
# The sources the model needs, compiled directly so unrelated modules cannot break the bench.
SRC="src/base/*.c src/tensor/*.c src/format/*.c src/backend/*.c src/backend/cpu/*.c src/model/*.c"

mkdir -p "$OUT"
$CC $CFLAGS -o "$OUT/mkmodel" bench/mkmodel.c -lm
# shellcheck disable=SC2086
$CC $CFLAGS -o "$OUT/bench_matmul" bench/bench_matmul.c $SRC -lcjson -lxxhash -lm
# shellcheck disable=SC2086
$CC $CFLAGS -o "$OUT/bench_forward" bench/bench_forward.c $SRC -lcjson -lxxhash -lm

if [ ! -f "$MODEL/model.safetensors" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$OUT/mkmodel" "$MODEL"
fi

# Waits until the CPUs were at least 95% idle over one second, for at most 60 seconds.
wait_idle() {
    i=0
    while [ $i -lt 60 ]; do
        set -- $(head -1 /proc/stat)
        t0=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle0=$5
        sleep 1
        set -- $(head -1 /proc/stat)
        t1=$(($2 + $3 + $4 + $5 + $6 + $7 + $8)); idle1=$5
        if [ $(( (idle1 - idle0) * 100 )) -ge $(( (t1 - t0) * 95 )) ]; then return 0; fi
        i=$((i + 1))
    done
    echo "warning: the machine stayed busy; figures below are skewed" >&2
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
echo "model: $MODEL"
wait_idle
"$OUT/bench_matmul" "$MODEL" 5
wait_idle
"$OUT/bench_matmul" "$MODEL" 5 --huge
wait_idle
"$OUT/bench_forward" "$MODEL" "$@"
