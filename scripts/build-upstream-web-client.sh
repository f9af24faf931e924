#!/usr/bin/env bash
# Builds SimpleX's own browser SMP client (smp-web, unmodified) from the archive in
# ../shared/upstream/, for the interoperability tests in tests/upstream/.
#
# Usage: scripts/build-upstream-web-client.sh [ARCHIVE_DIR] [CACHE_DIR]
#   ARCHIVE_DIR  where simplexmq-smp-web-*.tar.gz lives (default: ../shared/upstream)
#   CACHE_DIR    where it is unpacked and built (default: $SMP_UPSTREAM_CACHE, else
#                ~/.cache/smp-router/upstream-web); outside the repository, so no line of
#                the third-party code is ever committed.
#
# The build follows ../shared/upstream/README.md: npm install --ignore-scripts (the emsdk
# post-install would download emscripten; the SMP client never imports the wasm module it
# builds), the link xftp-web's "pretest" step makes, then tsc for the client and its REPL
# driver. A stamp file records the archive's checksum, so a second run is a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHIVE_DIR=${1:-../shared/upstream}
CACHE_DIR=${2:-${SMP_UPSTREAM_CACHE:-$HOME/.cache/smp-router/upstream-web}}

archive=$(ls "$ARCHIVE_DIR"/simplexmq-smp-web-*.tar.gz 2>/dev/null | head -n 1 || true)
if [ -z "$archive" ]; then
    echo "build-upstream-web-client: no simplexmq-smp-web-*.tar.gz in $ARCHIVE_DIR" >&2
    exit 2
fi
command -v npm >/dev/null || { echo "build-upstream-web-client: npm is missing" >&2; exit 2; }

sum=$(sha256sum "$archive" | cut -d' ' -f1)
stamp="$CACHE_DIR/.built-$sum"
repl="$CACHE_DIR/simplexmq-smp-web/smp-web/dist-test/client-repl.js"
if [ -f "$stamp" ] && [ -f "$repl" ]; then
    echo "$CACHE_DIR/simplexmq-smp-web/smp-web"
    exit 0
fi

rm -rf "$CACHE_DIR/simplexmq-smp-web"
mkdir -p "$CACHE_DIR"
tar -xzf "$archive" -C "$CACHE_DIR"
root="$CACHE_DIR/simplexmq-smp-web"
{
    cd "$root/xftp-web"
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error
    npx tsc
    ln -sf ../../../libsodium-sumo/dist/modules-sumo-esm/libsodium-sumo.mjs \
        node_modules/libsodium-wrappers-sumo/dist/modules-sumo-esm/libsodium-sumo.mjs
    cd "$root/smp-web"
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error
    # Only the double ratchet imports the emscripten module; in its place a module that
    # throws if it is ever loaded (its type declarations are the archive's own).
    mkdir -p dist/wasm
    cp cbits/sntrup761.d.mts dist/wasm/
    printf '%s\n' 'export default function createSntrup761() { throw new Error("sntrup761 is not built here"); }' \
        > dist/wasm/sntrup761.mjs
    npx tsc
    npx tsc -p tsconfig.test.json
} >&2
touch "$stamp"
echo "$root/smp-web"
