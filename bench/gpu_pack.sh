#!/bin/sh
# bench/gpu_pack.sh: what bench/run_gpu.sh runs on the GPU machine, built here and packed into
# one archive: test_gpu, bench_gpu and dspark (make CUDA=1, for any x86-64-v4 CPU: the GPU
# machine's CPU need not be this one's), the shared libraries they need that such a machine
# may lack, and ../shared's golden data and prompt sets. With LAB=1 also the measuring builds
# of bench_gpu that run_gpu.sh's bound and stamps steps run (results wrong or slowed, timings
# only): LAB_BUILDS picks them (default "nw lab1 lab2"; st: block stamps; u1, w6: other
# register batch widths, results right, for run_gpu.sh's bound step; nm: without the
# attention merge kernel, results wrong; x2: 30-32-row passes reading one n-tile per
# ldmatrix, as before 2026-12-02's measurement, results right; r4, r16, r32: attention
# items of that many rows, results right). Each adds ~2.7 MB
# to the archive, and a device call carries 64 MiB with the tracked files (~50 MB).
#
# A device call carries the tracked files (~50 MB) and at most ~14 MB more, so for timing runs
# BENCH_ONLY=1 packs bench_gpu (and the LAB builds) with the libraries alone (~4 MB), and
# AB=FILE adds FILE, a bench_gpu built from another commit, as bench_gpu_old: the two then
# alternate on one machine start. BINS picks the binaries of a full pack (default
# "tests/test_gpu bench_gpu dspark"; without dspark a pack and an AB binary fit together).
#
#   [LAB=1 [LAB_BUILDS="nw lab1 lab2 st"]] [BENCH_ONLY=1 | BINS="..."] [AB=FILE] \
#       sh bench/gpu_pack.sh [ARCHIVE]
#                                               (default .gpupack/gpu.txz)
#
# Then, on the GPU machine: PACK=ARCHIVE BIN=.gbin STEPS="..." sh bench/run_gpu.sh
set -eu
cd "$(dirname "$0")/.."
ARCHIVE=${1:-.gpupack/gpu.txz}
OPT="-O3 -march=x86-64-v4"
BINS=${BINS:-"tests/test_gpu bench_gpu dspark"}
[ "${BENCH_ONLY:-0}" = 1 ] && BINS=bench_gpu
# shellcheck disable=SC2046 # one target per binary
make CUDA=1 BUILD=build/gpu OPT="$OPT" -j2 $(for b in $BINS; do echo "build/gpu/$b"; done)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in $BINS; do strip -g -o "$tmp/$(basename $b)" "build/gpu/$b"; done
if [ -n "${AB:-}" ]; then strip -g -o "$tmp/bench_gpu_old" "$AB"; fi
# the commit built, and whether the tree differed from it (run_gpu.sh's info step prints it)
{
    git log -1 --format='%h %s' | cut -c1-100
    git diff --quiet HEAD -- src bench tests Makefile || echo "(with uncommitted changes)"
} >"$tmp/COMMIT"
if [ "${LAB:-0}" = 1 ]; then
    for name in ${LAB_BUILDS:-nw lab1 lab2}; do
        case $name in
        nw) v=-DDSPARK_LAB_NOWAIT ;;
        lab1) v=-DDSPARK_LAB_MM=1 ;;
        lab2) v=-DDSPARK_LAB_MM=2 ;;
        st) v=-DDSPARK_LAB_STAMPS ;;
        u1) v=-DMM_U8_MAX=1 ;; # 1 row: eight k-tiles a batch
        w6) v=-DMM_U4_MAX=6 ;; # 17-32 rows: two k-tiles a batch
        nm) v=-DDSPARK_LAB_NOMERGE ;; # no attention merge kernel (results wrong)
        x2) v=-DMM_LDM_X4=0 ;; # 30-32 rows: ldmatrix.x2, one n-tile at a time (results right)
        g1 | g2 | g3) v=-DDSPARK_LAB_MMG4=${name#g} ;; # prompt tiles: products alone, copies
        # alone, no epilogue (results wrong; gemm.cu)
        q2 | q3 | q4) v=-DDSPARK_LAB_QKV=${name#q} ;; # q|k|v's epilogue without its norm's sum,
        # its stores, or the input norm's sums (results wrong; mm.cuh)
        r4 | r16 | r32) v=-DATT_ROWS=${name#r} ;; # rows per attention item (results right)
        *) echo "unknown LAB_BUILDS entry $name (nw lab1 lab2 st u1 w6 nm x2 g1 g2 g3 q2 q3 q4 r4 r16 r32)" >&2 && exit 2 ;;
        esac
        make CUDA=1 BUILD="build/gpu$name" NVCC="nvcc $v" OPT="$OPT" -j2 \
            "build/gpu$name/bench_gpu"
        strip -g -o "$tmp/bench_gpu_$name" "build/gpu$name/bench_gpu"
    done
fi
# the libraries outside the C and C++ runtimes and CUDA's, which the GPU machine has
for b in $BINS; do ldd "build/gpu/$b"; done | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart)\.so' |
    while read -r lib; do cp -L "$lib" "$tmp/"; done
if [ "${BENCH_ONLY:-0}" != 1 ]; then
    [ -d ../shared/golden ] && cp -r ../shared/golden "$tmp/golden"
    [ -d ../shared/bench/prompts ] && cp -r ../shared/bench/prompts "$tmp/prompts"
fi
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$tmp" -cf - . | xz -9e -T2 >"$ARCHIVE"
ls -l "$ARCHIVE"
