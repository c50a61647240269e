#!/bin/sh
# Black-box tests of chunked prefill and the prefix cache's spill folder: tests/js/cache.test.mjs
# starts and restarts `dspark serve` on models/pycoder itself.
set -u
D=${DSPARK:-build/dspark}
[ -d models/pycoder ] || { echo "skipped: models/pycoder is absent"; exit 0; }
[ -d tests/js/node_modules/openai ] || {
    echo "skipped: the openai SDK is absent (npm ci --prefix tests/js)"
    exit 0
}
DSPARK=$D node tests/js/cache.test.mjs
