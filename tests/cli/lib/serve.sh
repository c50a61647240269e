# tests/cli/lib/serve.sh: sourced by the CLI tests that start `dspark serve` (run from the
# repository root). wait_url LOG PID waits while the server of PID lives, up to 5 minutes (a
# server that calibrates for --max-draft auto listens after it: seconds, longer under the
# sanitizers), for LOG to say where it listens, and sets URL; it returns 1 with URL empty when
# the server died or never said.
wait_url() {
    URL=""
    for _ in $(seq 1 3000); do
        URL=$(sed -n "s/.* on \(http:[^ ]*\) .*/\1/p" "$1" 2>/dev/null)
        [ -n "$URL" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
