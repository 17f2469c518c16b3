#!/usr/bin/env bash
# Install the PostgreSQL server the Postgres job store is tested and benchmarked against: Debian's.
#
#   bash scripts/install-postgres.sh      # idempotent: does nothing when a server binary runs
#
# The tests never use a system cluster: devstack/postgres.py runs initdb into a temporary directory
# and starts `postgres` on a free 127.0.0.1 port, then stops it by its process group. As root it
# runs them as the `postgres` system user (PostgreSQL refuses to run as root), which Debian's
# package creates. Needs root (or passwordless sudo) the first time only.
# SAFESEND_POSTGRES_BIN overrides the directory holding initdb and postgres (the tests read the
# same variable); SAFESEND_POSTGRES_USER the user they run as when started by root.
set -euo pipefail

log() { printf 'install-postgres: %s\n' "$*" >&2; }
die() { printf 'install-postgres: ERROR: %s\n' "$*" >&2; exit 1; }

bin_dir() {
    if [[ -n "${SAFESEND_POSTGRES_BIN:-}" ]]; then
        printf '%s\n' "$SAFESEND_POSTGRES_BIN"
        return
    fi
    # The newest major version Debian installed (/usr/lib/postgresql/<major>/bin).
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5n | tail -n1 || true)"
    printf '%s\n' "$dir"
}

works() {
    local dir
    dir="$(bin_dir)"
    [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/postgres" ]] || return 1
    timeout 30 "$dir/postgres" --version >/dev/null 2>&1 || return 1
    if [[ "$(id -u)" == 0 ]]; then
        id -u "${SAFESEND_POSTGRES_USER:-postgres}" >/dev/null 2>&1 || return 1
        command -v setpriv >/dev/null 2>&1 || return 1
    fi
}

if works; then
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "no PostgreSQL server binaries found and this is not a Debian-like system: install PostgreSQL and set SAFESEND_POSTGRES_BIN to the directory holding initdb and postgres"

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null \
        || die "PostgreSQL not found: run as root (or with sudo): apt-get update && apt-get install -y postgresql"
    SUDO=(sudo -n)
fi

# Serialise with another run (two CI steps on one machine); apt itself also locks.
if command -v flock >/dev/null 2>&1; then
    exec 8>"${TMPDIR:-/tmp}/safesend-install-postgres.lock"
    flock -w 900 8 || die "another install-postgres.sh is still running (waited 900 s)"
    works && exit 0
fi

log "installing Debian's postgresql (apt-get; output only on error)"
export DEBIAN_FRONTEND=noninteractive
out="$(timeout 600 "${SUDO[@]}" apt-get update -q 2>&1)" || { printf '%s\n' "$out" >&2; die "apt-get update failed"; }
# util-linux provides setpriv (dropping root for the server); it is essential on Debian, listed for safety.
out="$(timeout 1200 "${SUDO[@]}" apt-get install -y -q --no-install-recommends postgresql util-linux 2>&1)" \
    || { printf '%s\n' "$out" >&2; die "apt-get install postgresql failed"; }

works || die "postgresql was installed but no runnable initdb/postgres was found under /usr/lib/postgresql/*/bin"
log "$("$(bin_dir)/postgres" --version) ready in $(bin_dir)"
