#!/usr/bin/env bash
# Build the n8n community node package (integrations/n8n, n8n-nodes-safesend) from source, the way
# n8n's own tooling does, and pack it: the tarball a user installs into n8n.
#
#   bash scripts/n8n-node-build.sh OUT_DIR    # prints the path of OUT_DIR/n8n-nodes-safesend-<v>.tgz
#
# Steps, on the pinned Node of scripts/n8n-install.sh (installs n8n and that Node first if missing):
#   npm ci (package-lock.json, npm registry only; install scripts off: .npmrc), n8n-node lint (n8n's
#   eslint rules for community nodes, strict), n8n-node build (the type check: it empties dist/ and
#   runs the package's tsc, which fails on any type error; a `tsc --noEmit` before it checked the same
#   files with the same tsconfig again, 3 CPU-s), npm pack.
# npm ci is skipped when node_modules matches package-lock.json (a stamp holds its sha256).
# The whole build is skipped when a finished one of the same inputs is kept (SAFESEND_N8N_HOME/node-builds/
# KEY: the sha256 of every file of integrations/n8n but node_modules/, dist/ and the ignored outputs,
# of this script, and of the Node and n8n install, all that lint, tsc and npm pack read): its tarball
# is copied to OUT_DIR. Only a build that passed lint and the type check is kept, so a kept one means
# both passed on these exact bytes. A fresh clone (as the CI gate runs) otherwise paid npm ci, lint,
# tsc and pack each time: ~68 CPU-s of the node e2e module's ~177 on the 2-core machine (2026-12-02).
# SAFESEND_N8N_NODE_BUILD_FRESH=1 builds anyway (and keeps the result).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
PKG="$ROOT/integrations/n8n"
OUT="${1:?usage: n8n-node-build.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"

eval "$(bash "$ROOT/scripts/n8n-install.sh" --env)"
export PATH="$(dirname "$SAFESEND_N8N_NODE"):$PATH"
cd "$PKG"

# inputs: every input of the build, one line each (path and sha256), for the cache key.
inputs() {
    find . \( -path ./node_modules -o -path ./dist \) -prune -o -type f ! -name '*.tgz' ! -name '*.tsbuildinfo' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum
    # this script's bytes, not its path: every clone lives elsewhere (the gate's fresh clone built
    # again each time while the path was part of the key)
    sha256sum <"$ROOT/scripts/n8n-node-build.sh"
    printf '%s\n' "$SAFESEND_N8N_HOME" "$(node --version)"
}
CACHE="$SAFESEND_N8N_HOME/node-builds"
KEY="$(inputs | sha256sum | cut -c1-64)"
kept=("$CACHE/$KEY"/*.tgz)
if [[ "${SAFESEND_N8N_NODE_BUILD_FRESH:-}" != 1 && -f "${kept[0]}" ]]; then
    cp "${kept[0]}" "$OUT/"
    touch "$CACHE/$KEY" # recently used: kept by the pruning below
    printf 'n8n-node-build: inputs unchanged since a passing build (%s): its tarball reused\n' "${KEY:0:12}" >&2
    printf '%s\n' "$OUT/$(basename "${kept[0]}")"
    exit 0
fi

run() {
    local what="$1" out
    shift
    if ! out="$("$@" 2>&1)"; then
        printf '%s\n' "$out" | tail -n 60 >&2
        printf 'n8n-node-build: %s failed\n' "$what" >&2
        exit 1
    fi
}

want="$(sha256sum package-lock.json | cut -c1-64) $(node --version)"
if [[ "$(cat node_modules/.safesend-ci 2>/dev/null)" != "$want" ]]; then
    run "npm ci" npm ci --no-audit --no-fund --loglevel=error
    printf '%s\n' "$want" >node_modules/.safesend-ci
fi
run "lint (n8n-node lint)" npx --no-install n8n-node lint
run "type check and build (n8n-node build)" npx --no-install n8n-node build
tgz="$(npm pack --silent --pack-destination "$OUT" | tail -n 1)"
# Kept for the next build of the same inputs: written aside, then renamed (another build may race it);
# only the 5 most recently used are kept.
[[ "$(inputs | sha256sum | cut -c1-64)" == "$KEY" ]] || { printf '%s\n' "$OUT/$tgz"; exit 0; } # changed meanwhile
mkdir -p "$CACHE"
tmp="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
cp "$OUT/$tgz" "$tmp/"
mv -T "$tmp" "$CACHE/$KEY" 2>/dev/null || rm -rf "$tmp"
find "$CACHE" -mindepth 1 -maxdepth 1 -name '.tmp.*' -mmin +60 -exec rm -rf {} +
ls -1dt "$CACHE"/*/ | tail -n +6 | xargs -r rm -rf
printf '%s\n' "$OUT/$tgz"
