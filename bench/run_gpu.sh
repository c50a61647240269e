#!/bin/sh
# bench/run_gpu.sh: the CUDA backend's checks and benchmarks in one go, on the GPU machine.
# Expects test_gpu, bench_gpu (built with `make CUDA=1`) and the shared libraries they need
# in $BIN (default .gpu); writes logs to $OUT (default /tmp/dspark-gpu). STEPS picks what runs
# (default all): info test testexact testkv sanitize pycoder spec 8b cpucheck variants torch
# (test: test_gpu, and bench/wgmma_bits.cu and bench/silu_bits.cu where nvcc is there;
# testexact: test_gpu with every model's matmul inputs as three bf16 terms, exact products, as
# on the CPU; testkv: test_gpu with K/V caches in bf16; race, ncu, serve,
# ttft, ab, bound, stamps and prompt on request; NCU_KERNEL, NCU_SKIP, NCU_COUNT and NCU_ARGS pick the launches ncu profiles, by
# mangled name, of `bench_gpu --lab`); serve runs `dspark serve --gpu` on models/pycoder in
# each of SERVE_MODES and drives it with bench/concurrency.py (1, 4, 16, 64 concurrent clients against serialised);
# spec runs `dspark benchmark --gpu $SPEC_ARGS` (needs $BIN/dspark and the prompt sets in
# ../shared/bench/prompts, copied there from $BIN/prompts when missing, as ../shared/golden is
# from $BIN/golden for test_gpu's drafter checks); variants reruns the 8B
# decode (and VARIANT_ARGS, e.g. --batch 1,16) with each VARIANTS entry (VAR=value,
# comma-separated settings) in the environment; ab runs $BIN/bench_gpu_old (gpu_pack.sh's AB=)
# and $BIN/bench_gpu in turn, AB_ROUNDS times (default 2), with AB_ARGS (default the decode
# contexts 512, 4,096 and 16,384 at B=1 and 16); ttft runs bench/ttft.py (a follow-up turn
# over a ~2,000-token cached prefix against a cold prompt) on `dspark serve --gpu` for
# models/pycoder and for the 8B shape (given pycoder's tokenizer); bound runs measuring builds
# of bench_gpu found in $BIN (results wrong, timings only) beside the normal one on the 8B
# shape: bench_gpu_nw (no kernel waits: make CUDA=1 BUILD=build/gpunw
# NVCC="nvcc -DDSPARK_LAB_NOWAIT" build/gpunw/bench_gpu), bench_gpu_lab1 and bench_gpu_lab2
# (the decode matmuls without their epilogues, and without their split sums too:
# NVCC="nvcc -DDSPARK_LAB_MM=1" or =2), or BOUND_BINS' (e.g. bench_gpu_u1 bench_gpu_w6: gpu_pack.sh's
# other register batch widths, results right); stamps runs bench_gpu_st (NVCC="nvcc -DDSPARK_LAB_STAMPS")
# and prints bench/stamps.py's table for each pass. $PACK may name a .tgz or .txz of those
# files, unpacked into $BIN.
# The Qwen3-8B-shaped random
# model is generated there by bench/mkmodel.c into $M8B (default /tmp/m8b).
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/dspark-gpu}
M8B=${M8B:-/tmp/m8b}
STEPS=${STEPS:-"info test testexact testkv sanitize pycoder spec 8b cpucheck torch"}
BENCH_ARGS=${BENCH_ARGS:-"--ctx 512,4096 --long 4096"}
if [ -f "${PACK:-}" ]; then # binaries carried packed
    mkdir -p "$BIN" && tar -C "$BIN" -xf "$PACK"
fi
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
# serve LOG ARGS...: starts `dspark serve --gpu ARGS` logging to LOG, sets spid, and url once
# it listens (empty when it never says so within 120 s)
serve() {
    log=$1
    shift
    "$BIN/dspark" serve --gpu --port 0 --threads 8 "$@" >"$log" 2>&1 &
    spid=$!
    url=""
    for _ in $(seq 1 600); do
        url=$(sed -n 's/.* on \(http:[^ ]*\) .*/\1/p' "$log")
        [ -n "$url" ] && break
        sleep 0.2
    done
}
t0=$(date +%s)
stamp() { echo "== $1 ($(($(date +%s) - t0)) s)"; }

if { has 8b || has variants || has ab || has ncu || has torch || has ttft || has bound ||
    has stamps || has prompt; } &&
    [ ! -f "$M8B/model.safetensors" ]; then
    # in the background while the tests run
    (gcc -O2 -o /tmp/mkmodel bench/mkmodel.c -lm &&
        /tmp/mkmodel "$M8B" --layers 36 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
            --ffn 12288 --vocab 151936 --untied) >"$OUT/mkmodel.log" 2>&1 &
    MK=$!
fi
if has info; then
    stamp info
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    # the commit the binaries were built at (gpu_pack.sh), which a copied checkout's .git may
    # not be
    if [ -f "$BIN/COMMIT" ]; then
        echo "binaries built at $(cat "$BIN/COMMIT")"
    else
        git log -1 --format='commit %h %s' 2>/dev/null || true
    fi
fi
if [ ! -d ../shared/golden ] && [ -d "$BIN/golden" ]; then # the drafters' reference data
    mkdir -p ../shared && cp -r "$BIN/golden" ../shared/
fi
if has test || has testexact || has testkv || has sanitize; then # test_gpu's model with 8 query heads per kv
    # head, and its model with a 300,000-token vocabulary (draws on the device)
    [ -f /tmp/dspark-g8/model.safetensors ] || { gcc -O2 -o /tmp/mkmodel-t bench/mkmodel.c -lm &&
        /tmp/mkmodel-t /tmp/dspark-g8 --layers 2 --hidden 256 --heads 16 --kv-heads 2 \
            --head-dim 64 --ffn 512 --vocab 1024 >/dev/null; }
    [ -f /tmp/dspark-v300k/model.safetensors ] || { gcc -O2 -o /tmp/mkmodel-t bench/mkmodel.c -lm &&
        /tmp/mkmodel-t /tmp/dspark-v300k --layers 1 --hidden 64 --heads 2 --kv-heads 1 \
            --head-dim 32 --ffn 128 --vocab 300000 >/dev/null; }
fi
if has test; then
    stamp test_gpu
    timeout 180 "$BIN/test_gpu" 2>&1 | tee "$OUT/test_gpu.log"
    # the prompt kernel's rows equal decode steps only while wgmma sums as mma.sync does
    stamp wgmma_bits
    if command -v nvcc >/dev/null &&
        nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_bits bench/wgmma_bits.cu; then
        timeout 120 /tmp/wgmma_bits 2>&1 | tee "$OUT/wgmma_bits.log"
    fi
    # and only while the prompt kernels' SwiGLU quotient is the division's bits (silu_mul8)
    stamp silu_bits
    if command -v nvcc >/dev/null &&
        nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o /tmp/silu_bits bench/silu_bits.cu; then
        timeout 60 /tmp/silu_bits 2>&1 | tee "$OUT/silu_bits.log"
    fi
fi
if has testexact; then
    stamp "test_gpu, matmul inputs as three bf16 terms (exact products)"
    DSPARK_GPU_INPUTS=exact timeout 180 "$BIN/test_gpu" 2>&1 | tee "$OUT/test_gpu_exact.log"
fi
if has testkv; then
    stamp "test_gpu, K/V caches in bf16"
    DSPARK_GPU_KV=bf16 timeout 180 "$BIN/test_gpu" 2>&1 | tee "$OUT/test_gpu_kv16.log"
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
    stamp compute-sanitizer
    timeout 150 compute-sanitizer --tool memcheck --print-limit 20 "$BIN/test_gpu" gpu_golden \
        gpu_multi_sequence gpu_shared_cache gpu_gemm_exact gpu_block_pycoder gpu_attention_buffers \
        gpu_attention_one gpu_attention_merge gpu_attention_prompt gpu_attention_many_steps gpu_many_heads_per_kv gpu_attention_loads_ahead \
        gpu_cache_trim gpu_inputs_bf16 gpu_sample_summary gpu_chunk_rows gpu_split_pairs gpu_merge_warp gpu_kv_bf16 \
        >"$OUT/memcheck.log" 2>&1
    tail -4 "$OUT/memcheck.log"
fi
if has race && command -v compute-sanitizer >/dev/null; then
    # racecheck on the attention kernels (the one-launch GEMM off: racecheck reports hazards on
    # any ring of bulk copies, as bench/racecheck_probe.cu shows for a correct one).
    # gpu_attention_buffers runs both attention kernels with the loads ahead on (the default),
    # steps of one row included; gpu_attention_loads_ahead runs the same kernels over many more
    # passes and does not finish under racecheck in 7 minutes, so it is left out
    stamp racecheck
    DSPARK_GPU_GEMM=0 timeout 240 compute-sanitizer --tool racecheck --print-limit 10 \
        "$BIN/test_gpu" gpu_attention_buffers >"$OUT/racecheck.log" 2>&1
    grep -E "RACECHECK SUMMARY|checks" "$OUT/racecheck.log"
    if command -v nvcc >/dev/null && nvcc -O2 -arch=sm_90 -Isrc -o /tmp/racecheck_probe bench/racecheck_probe.cu; then
        timeout 60 compute-sanitizer --tool racecheck /tmp/racecheck_probe 0 2>&1 | tail -2
    fi
fi
if has pycoder; then
    stamp "bench pycoder"
    timeout 60 "$BIN/bench_gpu" models/pycoder --quick 2>&1 | tee "$OUT/bench_pycoder.log"
fi
if has spec; then
    stamp "speculative modes on pycoder"
    if [ ! -d ../shared/bench/prompts ] && [ -d "$BIN/prompts" ]; then
        mkdir -p ../shared/bench && cp -r "$BIN/prompts" ../shared/bench/
    fi
    # shellcheck disable=SC2086 # SPEC_ARGS (e.g. --gpu-inputs bf16) split on purpose
    timeout 330 "$BIN/dspark" benchmark --gpu ${SPEC_ARGS:-} \
        --modes "${SPEC_MODES:-baseline,lookup,draft,dspark,dflash}" --limit 10 \
        --max-new-tokens 128 --trials 3 --threads 8 --widths 17 --json "$OUT/gpu-spec.json" \
        2>&1 | grep -v '^progress' | tee "$OUT/gpu-spec.log"
fi
[ -n "${MK:-}" ] && { stamp "waiting for the 8B model"; wait "$MK"; cat "$OUT/mkmodel.log"; }
if has 8b; then
    stamp "bench 8B"
    CHECK=""
    has cpucheck && CHECK="--cpu-check 16"
    # shellcheck disable=SC2086
    timeout 300 "$BIN/bench_gpu" "$M8B" $BENCH_ARGS $CHECK 2>&1 | tee "$OUT/bench_8b.log"
fi
if has variants; then
    for v in ${VARIANTS:-DSPARK_GPU_PDL=0 DSPARK_GPU_GRAPHS=0}; do
        stamp "variant $v"
        echo "== $v" >>"$OUT/variants.log"
        # shellcheck disable=SC2046,SC2086 # settings and arguments split on purpose
        env $(echo "$v" | tr , ' ') timeout 120 "$BIN/bench_gpu" "$M8B" --decode-only \
            ${VARIANT_ARGS:-} 2>&1 | tee -a "$OUT/variants.log" | grep -E "decode|batch| 16: |attention |attn "
    done
fi
if has ab && [ -x "$BIN/bench_gpu_old" ]; then # gpu_pack.sh AB=: the two builds alternating
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        for b in bench_gpu_old bench_gpu; do
            stamp "ab $r $b"
            echo "== $r $b" >>"$OUT/ab.log"
            # shellcheck disable=SC2086 # arguments split on purpose
            timeout 120 "$BIN/$b" "$M8B" ${AB_ARGS:---ctx 512,4096,16384 --decode-only --batch 1,16} \
                2>&1 | tee -a "$OUT/ab.log" | grep -E "decode B=1|batch B=|prefill| 16: "
        done
    done
fi
if has bound; then # measuring builds, each run beside the normal one
    for b in ${BOUND_BINS:-bench_gpu_nw bench_gpu_lab1 bench_gpu_lab2}; do
        [ -x "$BIN/$b" ] || continue
        for exe in "$b" bench_gpu; do
            stamp "bound: $exe"
            echo "== $exe" >>"$OUT/bound.log"
            timeout 80 "$BIN/$exe" "$M8B" --lab --batch 1,16 2>&1 | tee -a "$OUT/bound.log" |
                grep -E "decode B=1|^ +[0-9]+: |batch B=16"
        done
    done
fi
if has stamps && [ -x "$BIN/bench_gpu_st" ]; then # when each matmul block passed its phases
    stamp "block stamps"
    DSPARK_LAB_STAMPS="$OUT/stamps" timeout 80 "$BIN/bench_gpu_st" "$M8B" --lab --batch 1,16 \
        >"$OUT/stamps.log" 2>&1
    for f in "$OUT"/stamps-*.txt; do [ -f "$f" ] && python3 bench/stamps.py "$f" --qwen3-8b --blocks; done
fi
if has serve; then
    for mode in $(echo "${SERVE_MODES:-baseline,lookup,draft,dspark,dflash}" | tr , ' '); do
        stamp "serve --gpu --mode $mode"
        serve "$OUT/serve-$mode.log" --model models/pycoder --mode "$mode" --max-batch 64 \
            --max-queue 128
        [ -n "$url" ] && timeout 240 python3 bench/concurrency.py --url "$url" \
            --levels 1,4,16,64 --requests 64 --json "$OUT/serve-$mode.json"
        kill $spid 2>/dev/null
        wait $spid 2>/dev/null
    done
fi
if has ttft; then
    cp models/pycoder/tokenizer.json models/pycoder/tokenizer_config.json "$M8B/"
    for m in models/pycoder "$M8B"; do
        stamp "time to first token of a follow-up turn, serve --gpu, $m"
        serve "$OUT/serve-ttft.log" --model "$m"
        # shellcheck disable=SC2046
        [ -n "$url" ] && timeout 240 python3 bench/ttft.py --url "$url" \
            $([ "$m" = "$M8B" ] && echo --logprobs) --json "$OUT/ttft-$(basename "$m").json"
        kill $spid 2>/dev/null
        wait $spid 2>/dev/null
    done
fi
if has prompt; then # the prompt matmuls: prefill, one launch's bits against a launch per 32
    # rows (also with every tile that fits split between block pairs), and each k_mmg4 launch's
    # time in a 512-token pass (two layers: q|k|v's full tiles and its last wave split, o,
    # gate/up, down); with PROMPT_SASS=1 also the SASS stall summary of launch PROMPT_SKIP
    # (default 3, gate/up) by bench/ncu_stalls.py
    stamp "prompt matmuls"
    timeout 120 "$BIN/bench_gpu" "$M8B" --ctx 512 --long 4096 --prefill-only 2>&1 |
        tee "$OUT/prompt.log" | grep prefill
    for split in 1 2; do
        DSPARK_GPU_GEMM4=2 DSPARK_GPU_SPLIT=$split timeout 120 "$BIN/bench_gpu" "$M8B" --ctx 512 \
            --gemm-check 2>&1 | tee -a "$OUT/prompt.log" | grep differ
    done
    if command -v ncu >/dev/null; then
        timeout 120 ncu --clock-control none -k regex:k_mmg4 -c 10 --metrics gpu__time_duration.sum \
            --csv --page raw "$BIN/bench_gpu" "$M8B" --ctx 1 --long 512 --probe 512,1 \
            >"$OUT/prompt-times.csv" 2>&1
        python3 bench/ncu_times.py "$OUT/prompt-times.csv"
        if [ "${PROMPT_SASS:-0}" = 1 ]; then
            timeout 180 ncu --clock-control none --set full --import-source yes -k regex:k_mmg4 \
                --launch-skip "${PROMPT_SKIP:-3}" -c 1 -o "$OUT/prompt" -f "$BIN/bench_gpu" "$M8B" \
                --ctx 1 --long 512 --probe 512,1 >/dev/null 2>&1
            ncu -i "$OUT/prompt.ncu-rep" --page source --csv --print-source sass \
                >"$OUT/prompt-sass.csv" 2>&1
            python3 bench/ncu_stalls.py "$OUT/prompt-sass.csv" --top 300
        fi
    fi
fi
if has ncu && command -v ncu >/dev/null; then # NCU_COUNT kernels matching NCU_KERNEL
    stamp ncu
    # shellcheck disable=SC2086 # NCU_ARGS split on purpose
    timeout 300 ncu --clock-control none -k "regex:${NCU_KERNEL:-k_mm}" --kernel-name-base mangled \
        --launch-skip "${NCU_SKIP:-0}" --launch-count "${NCU_COUNT:-4}" --import-source yes \
        --section SpeedOfLight --section WarpStateStats --section Occupancy \
        --section MemoryWorkloadAnalysis --section SourceCounters --section LaunchStats \
        -o "$OUT/ncu" -f "$BIN/bench_gpu" "$M8B" ${NCU_ARGS:---lab} >"$OUT/ncu.log" 2>&1
    ncu -i "$OUT/ncu.ncu-rep" --page details >"$OUT/ncu-details.txt" 2>&1
    ncu -i "$OUT/ncu.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu-source.csv" 2>&1
    grep -E "k_mm|Duration|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Achieved Occ" \
        "$OUT/ncu-details.txt" | head -60
fi
if has torch; then
    stamp "transformers anchor"
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-300} python3 bench/torch_anchor.py "$M8B" \
        --ctx 512 --new 48 ${TORCH_ARGS:-} 2>&1 | grep -v Warning | tee "$OUT/torch.log"
fi
stamp "done"
