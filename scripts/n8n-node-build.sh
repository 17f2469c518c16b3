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
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
PKG="$ROOT/integrations/n8n"
OUT="${1:?usage: n8n-node-build.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"

eval "$(bash "$ROOT/scripts/n8n-install.sh" --env)"
export PATH="$(dirname "$SAFESEND_N8N_NODE"):$PATH"
cd "$PKG"

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
printf '%s\n' "$OUT/$tgz"
