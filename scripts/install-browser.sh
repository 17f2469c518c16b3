#!/usr/bin/env bash
# Install the browser the console's real-browser tests drive: Debian's headless Chromium.
#
#   bash scripts/install-browser.sh          # idempotent: does nothing when /usr/bin/chromium runs
#
# Playwright (requirements-dev.txt) never downloads a browser of its own here: the tests launch
# Debian's /usr/bin/chromium through `executable_path` (tests/integration/test_console_browser.py).
# Needs root (or passwordless sudo) the first time only. SAFESEND_CHROMIUM overrides the binary
# checked (the tests read the same variable).
set -euo pipefail

CHROMIUM="${SAFESEND_CHROMIUM:-/usr/bin/chromium}"

log() { printf 'install-browser: %s\n' "$*" >&2; }
die() { printf 'install-browser: ERROR: %s\n' "$*" >&2; exit 1; }

works() { [[ -x "$CHROMIUM" ]] && timeout 30 "$CHROMIUM" --headless --no-sandbox --version >/dev/null 2>&1; }

if works; then
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "$CHROMIUM not found and this is not a Debian-like system: install Chromium and set SAFESEND_CHROMIUM"

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null \
        || die "$CHROMIUM not found: run as root (or with sudo): apt-get update && apt-get install -y chromium"
    SUDO=(sudo -n)
fi

# Serialise with another run (two CI steps on one machine); apt itself also locks.
if command -v flock >/dev/null 2>&1; then
    exec 8>"${TMPDIR:-/tmp}/safesend-install-browser.lock"
    flock -w 900 8 || die "another install-browser.sh is still running (waited 900 s)"
    works && exit 0
fi

log "installing Debian's chromium (apt-get; output only on error)"
export DEBIAN_FRONTEND=noninteractive
out="$(timeout 600 "${SUDO[@]}" apt-get update -q 2>&1)" || { printf '%s\n' "$out" >&2; die "apt-get update failed"; }
out="$(timeout 1200 "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core 2>&1)" \
    || { printf '%s\n' "$out" >&2; die "apt-get install chromium failed"; }

works || die "chromium was installed but '$CHROMIUM --headless --version' does not run"
log "$("$CHROMIUM" --version 2>/dev/null || echo chromium) ready"
