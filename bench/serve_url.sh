# bench/serve_url.sh: sourced by the server benchmarks. serve_url LOG PID waits (up to 20 s)
# for the `dspark serve` of PID, whose output goes to LOG, to print its address, and sets
# url; it exits with the log when the server dies or never says where it listens.
# serve_needs [BIN] exits with the fix when the dspark binary (default build/dspark) or the
# JS clients' openai SDK is missing, and makes build/bench for the results.
serve_needs() {
    [ -x "${1:-build/dspark}" ] || { echo "${1:-build/dspark} is missing: run make" >&2; exit 1; }
    [ -d tests/js/node_modules/openai ] || { echo "run: npm ci --prefix tests/js" >&2; exit 1; }
    mkdir -p build/bench
}
serve_url() {
    url=""
    for _ in $(seq 1 200); do
        url=$(sed -n "s/.* on \(http:[^ ]*\) .*/\1/p" "$1")
        [ -n "$url" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    echo "the server did not start:" >&2
    cat "$1" >&2
    exit 1
}
