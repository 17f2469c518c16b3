#!/usr/bin/env bash
# Prepare a machine to run safesend or its tests: idempotent, quiet when nothing changes.
#
#   bash scripts/bootstrap.sh [--for test]  everything the tests need (scripts/test.sh, the default)
#   bash scripts/bootstrap.sh --for run     only what scripts/run-local.sh runs: .venv with the
#                                           deployed runtime's lock (functions/requirements-postgres.txt,
#                                           not the test tools), .venv-tasks, java and the emulators
#                                           (no infra tools, Terraform or chromium; the PostgreSQL
#                                           server only with SAFESEND_STORE=postgres; n8n is never
#                                           installed here)
#   bash scripts/bootstrap.sh --for fast    only .venv: lint and the unit tests (scripts/test.sh --fast)
#   bash scripts/bootstrap.sh --for X --list   print the parts X installs, one a line, and do nothing
#
# The parts:
#   .venv        project deps from the hashed lock requirements-dev.txt (pip --require-hashes;
#                scripts/lock.sh writes it and the functions' locks from their .in files)
#   .venv-tasks  gcloud-tasks-emulator in a venv of its own: it pins protobuf<5,
#                which the project's client libraries cannot use
#   .venv-infra  checkov and check-jsonschema from the hashed lock requirements-infra.txt, plus python-hcl2 in
#                .venv-infra/python-hcl2 (pip --target: checkov's fork installs the same module)
#   .venv-tfplugin  the `tf` library (tools/tf_schema_provider/requirements.txt: protobuf<6) for the
#                offline Terraform provider plugin; terraform itself must be on PATH (apt-get from
#                HashiCorp's repository when configured; else a warning, and its tests fail)
#   java + the Firestore and Pub/Sub emulators of the Google Cloud CLI
#   Debian's chromium for the review console's browser tests (scripts/install-browser.sh)
#   Debian's postgresql for the PostgreSQL job store's tests (scripts/install-postgres.sh)
#
# The venvs are filled by uv (`uv pip install`: parallel downloads, no byte-compiling, a shared
# cache), at the version requirements-dev.txt pins, installed first by pip with that lock's hashes
# into .local/bootstrap-uv (a venv of its own: the deployed runtime's lock does not hold uv). pip
# itself still downloads the provider wheels (uv has no `download`).
# A stamp file in each venv holds the sha256 of what was installed, so a second
# run with unchanged requirements does no install work at all.
#
# Environment: PYTHON (default python3), SAFESEND_GCLOUD_SDK_ROOT (SDK location;
# default: from `gcloud` on PATH, else /usr/lib/google-cloud-sdk).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
TASKS_VENV="$ROOT/.venv-tasks"
INFRA_VENV="$ROOT/.venv-infra"
TFPLUGIN_VENV="$ROOT/.venv-tfplugin"
UV_VENV="$ROOT/.local/bootstrap-uv"
UV="$UV_VENV/bin/uv"
TF_VERSION="1.11.4" # cloudbuild.yaml's _TF_VERSION; tests/infra/test_terraform.py runs it
# Known-good set for the tasks emulator (pinned so CI is reproducible; gcloud-tasks-emulator
# 0.6.2 needs protobuf<5, google-cloud-tasks<3 and grpcio-status<1.63 for that protobuf).
TASKS_REQUIREMENTS="gcloud-tasks-emulator==0.6.2
google-cloud-tasks==2.23.0
google-api-core==2.30.3
protobuf==4.25.9
grpcio==1.85.3
grpcio-status==1.62.3
googleapis-common-protos==1.75.0
PyYAML==6.0.4"

log() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { printf 'bootstrap: ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- what to install
PURPOSE="test"
LIST=0
while (($#)); do
    case "$1" in
        --for) (($# >= 2)) || die "--for needs run, test or fast"; PURPOSE="$2"; shift 2 ;;
        --list) LIST=1; shift ;;
        *) die "usage: bootstrap.sh [--for run|test|fast] [--list]" ;;
    esac
done
case "$PURPOSE" in
    fast) PARTS=(venv) ;;
    run)
        PARTS=(venv tasks emulators)
        # devstack starts a throwaway PostgreSQL server (devstack/postgres.py) only for this store.
        [[ "${SAFESEND_STORE:-firestore}" == postgres ]] && PARTS+=(postgres)
        ;;
    test) PARTS=(venv tasks infra tfplugin emulators chromium postgres) ;;
    *) die "--for takes run, test or fast, not '$PURPOSE'" ;;
esac
if ((LIST)); then
    printf '%s\n' "${PARTS[@]}"
    exit 0
fi

# Serialise concurrent runs (two CI steps, or a developer and a hook) on the same checkout.
if command -v flock >/dev/null 2>&1; then
    lock_id="$(printf '%s' "$ROOT" | sha256sum | cut -c1-16)"
    exec 9>"${TMPDIR:-/tmp}/safesend-bootstrap-$lock_id.lock"
    flock -w 600 9 || die "another bootstrap.sh is still running for $ROOT (waited 600 s)"
fi

# ---------------------------------------------------------------- python
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python >= 3.11"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "Python >= 3.11 required, $PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())')"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
    || die "$PYTHON lacks venv/ensurepip (Debian: apt-get install -y python3-venv)"

# ensure_venv DIR [--without-pip]: create DIR, or recreate it if its interpreter is broken or too old.
# --without-pip for a venv that uv fills and nothing runs pip in: ensurepip installed pip there from
# its bundled wheel, ~5.7 CPU-s per venv on every fresh clone (the gate's, CI's) for nothing.
ensure_venv() {
    local dir="$1" without_pip=()
    [[ "${2:-}" == --without-pip ]] && without_pip=(--without-pip)
    if [[ -x "$dir/bin/python" ]] \
        && "$dir/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
        return 0
    fi
    log "creating ${dir#"$ROOT"/}"
    "$PYTHON" -m venv --clear "${without_pip[@]}" "$dir"
}

# install_if_changed DIR STAMP_VALUE ARGS...: `uv pip install ARGS` into DIR's interpreter unless
# DIR's stamp already matches.
install_if_changed() {
    local dir="$1" want="$2"
    shift 2
    local stamp="$dir/.safesend-bootstrap.sha256"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    log "installing into ${dir#"$ROOT"/} (uv output only on error)"
    # uv does not byte-compile (pip would compile every installed module, checkov alone thousands):
    # a run imports a fraction, compiled on first import, and the gate keeps its bytecode under
    # PYTHONPYCACHEPREFIX (scripts/test.sh), where a venv's __pycache__ folders are never read.
    local out
    if ! out="$("$UV" pip install --quiet --python "$dir/bin/python" "$@" 2>&1)"; then
        printf '%s\n' "$out" >&2
        die "uv pip install into ${dir#"$ROOT"/} failed"
    fi
    printf '%s\n' "$want" >"$stamp.tmp"
    mv -f "$stamp.tmp" "$stamp"
}

# uv_requirement: requirements-dev.txt's `uv==X` line with its hashes, as a requirements file.
uv_requirement() {
    awk '/^uv==/ { on = 1 } on { print; if ($0 !~ /\\$/) exit }' "$ROOT/requirements-dev.txt"
}

# ensure_uv: the pinned uv in .local/bootstrap-uv, installed by pip with the lock's hashes.
ensure_uv() {
    [[ -f requirements-dev.txt ]] || die "requirements-dev.txt missing in $ROOT"
    local requirement want
    requirement="$(uv_requirement)"
    [[ "$requirement" == uv==* && "$requirement" == *--hash=* ]] || die "requirements-dev.txt pins no uv with hashes"
    want="$(python_tag "$PYTHON") $(printf '%s\n' "$requirement" | sha256sum | cut -d' ' -f1)"
    if [[ -x "$UV" && -f "$UV_VENV/.safesend-bootstrap.sha256" && "$(cat "$UV_VENV/.safesend-bootstrap.sha256")" == "$want" ]]; then
        return 0
    fi
    log "installing ${requirement%% *} into .local/bootstrap-uv"
    mkdir -p "$ROOT/.local"
    "$PYTHON" -m venv --clear "$UV_VENV"
    local out
    if ! out="$("$UV_VENV/bin/python" -m pip install --no-compile --quiet --disable-pip-version-check \
            --require-hashes --no-deps -r <(printf '%s\n' "$requirement") 2>&1)"; then
        printf '%s\n' "$out" >&2
        die "pip install of uv into .local/bootstrap-uv failed"
    fi
    "$UV" --version >/dev/null 2>&1 || die ".local/bootstrap-uv/bin/uv does not run; delete .local/bootstrap-uv and run again"
    printf '%s\n' "$want" >"$UV_VENV/.safesend-bootstrap.sha256"
}

python_tag() { "$1" -c 'import sys; print(sys.implementation.cache_tag, sys.version.split()[0])'; }

# requirements_digest FILE...: sha256 over the files and everything they pull in with -r/-c.
requirements_digest() {
    "$PYTHON" - "$ROOT" "$@" <<'PY'
import hashlib, re, sys
from pathlib import Path
root = Path(sys.argv[1])
todo, seen = [root / a for a in sys.argv[2:]], []
while todo:
    path = todo.pop(0).resolve()
    if path in seen:
        continue
    if not path.is_file():
        sys.exit(f"bootstrap: ERROR: requirements file {path} not found")
    seen.append(path)
    for line in path.read_text().splitlines():
        m = re.match(r"\s*(?:-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)", line)
        if m:
            todo.append(path.parent / m.group(1))
digest = hashlib.sha256()
for path in seen:
    name = path.relative_to(root) if path.is_relative_to(root) else path
    digest.update(f"{name}\0".encode() + path.read_bytes() + b"\0")
print(digest.hexdigest())
PY
}

# ---------------------------------------------------------------- .venv
part_venv() {
    [[ -f requirements.txt ]] || die "requirements.txt missing in $ROOT"
    [[ -f requirements-dev.txt ]] || die "requirements-dev.txt missing in $ROOT"
    ensure_venv "$VENV"
    main_stamp="$(python_tag "$VENV/bin/python") $(requirements_digest requirements-dev.txt requirements.txt)"
    if [[ "$PURPOSE" == run ]]; then
        # run-local.sh needs the deployed runtime only (devstack imports nothing more; psycopg for
        # SAFESEND_STORE=postgres): its hashed lock, a fifth of the dev set. The dev set holds the
        # same pins, so a .venv made for the tests serves too; the tests add the rest later.
        [[ -f "$VENV/.safesend-bootstrap.sha256" && "$(cat "$VENV/.safesend-bootstrap.sha256")" == "$main_stamp" ]] \
            && return 0
        run_stamp="$(python_tag "$VENV/bin/python") $(requirements_digest functions/requirements-postgres.txt)"
        install_if_changed "$VENV" "$run_stamp" --require-hashes -r functions/requirements-postgres.txt
        return 0
    fi
    install_if_changed "$VENV" "$main_stamp" --require-hashes -r requirements-dev.txt
}

# ---------------------------------------------------------------- .venv-tasks
part_tasks() {
    ensure_venv "$TASKS_VENV" --without-pip
    tasks_stamp="$( { python_tag "$TASKS_VENV/bin/python"; printf '%s\n' "$TASKS_REQUIREMENTS"; } | sha256sum | cut -d' ' -f1)"
    # shellcheck disable=SC2086 # one requirement per word on purpose
    install_if_changed "$TASKS_VENV" "$tasks_stamp" $TASKS_REQUIREMENTS
    "$TASKS_VENV/bin/python" -I -c 'import gcloud_tasks_emulator.server' 2>/dev/null \
        || die ".venv-tasks cannot import gcloud_tasks_emulator; delete $TASKS_VENV and run again"
}

# ---------------------------------------------------------------- .venv-infra
part_infra() {
    # Tools for tests/infra (offline checks of infra/ and cloudbuild*.yaml). The requirement after
    # "#target:" in requirements-infra.in goes into its own directory, not the venv (see that file).
    [[ -f requirements-infra.txt ]] || die "requirements-infra.txt missing in $ROOT"
    ensure_venv "$INFRA_VENV"
    hcl2_requirement="$(sed -n 's/^#target:[[:space:]]*//p' requirements-infra.in)"
    [[ -n "$hcl2_requirement" ]] || die "requirements-infra.in has no '#target: python-hcl2==...' line"
    infra_stamp="$(python_tag "$INFRA_VENV/bin/python") $(requirements_digest requirements-infra.txt requirements-infra.in)"
    infra_stamp_file="$INFRA_VENV/.safesend-bootstrap.sha256"
    if [[ ! -f "$infra_stamp_file" || "$(cat "$infra_stamp_file")" != "$infra_stamp" ]]; then
        rm -rf "$INFRA_VENV/python-hcl2"
        log "installing $hcl2_requirement into .venv-infra/python-hcl2"
        # shellcheck disable=SC2086 # one requirement per word on purpose
        if ! out="$("$UV" pip install --quiet --python "$INFRA_VENV/bin/python" \
                --target "$INFRA_VENV/python-hcl2" $hcl2_requirement 2>&1)"; then
            printf '%s\n' "$out" >&2
            die "uv pip install --target .venv-infra/python-hcl2 failed"
        fi
    fi
    install_if_changed "$INFRA_VENV" "$infra_stamp" --require-hashes -r requirements-infra.txt
    "$INFRA_VENV/bin/python" -I -c 'import sys; sys.path.insert(0, sys.argv[1]); import hcl2.api' "$INFRA_VENV/python-hcl2" 2>/dev/null \
        || die ".venv-infra/python-hcl2 cannot import hcl2; delete $INFRA_VENV and run again"
    [[ -x "$INFRA_VENV/bin/checkov" && -x "$INFRA_VENV/bin/check-jsonschema" ]] \
        || die ".venv-infra lacks checkov or check-jsonschema; delete $INFRA_VENV and run again"

    # The provider packages infra/schema/regenerate.py reads (tests/infra checks the committed snapshots
    # are exactly what they produce): downloaded once into .venv-infra/schema-wheels.
    wheel_dir="$INFRA_VENV/schema-wheels"
    mkdir -p "$wheel_dir"
    # The Python code stays at column 0: an indented `python -c` line is an IndentationError, and a
    # failing command substitution in `for ... in` would silently download nothing.
    wheels="$("$INFRA_VENV/bin/python" -c "
import sys; sys.path.insert(0, 'infra/schema'); import regenerate
print(' '.join(r for r, _, _ in regenerate.WHEELS))")" || die "infra/schema/regenerate.py lists no wheels"
    local missing_wheels=()
    for requirement in $wheels; do
        name="${requirement%%==*}"; version="${requirement##*==}"
        compgen -G "$wheel_dir/${name//-/_}-$version-*.whl" >/dev/null || missing_wheels+=("$requirement")
    done
    if ((${#missing_wheels[@]})); then # one pip process for all of them
        log "downloading ${missing_wheels[*]} into .venv-infra/schema-wheels"
        "$INFRA_VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: -d "$wheel_dir" "${missing_wheels[@]}" >/dev/null 2>&1 \
            || die "pip download ${missing_wheels[*]} failed (PyPI is needed once)"
    fi
}

# ---------------------------------------------------------------- .venv-tfplugin + terraform
part_tfplugin() {
    # tests/infra/test_terraform.py runs real Terraform offline against the pinned providers' schemas,
    # served from those wheels by tools/tf_schema_provider (the `tf` library, in a venv of its own).
    ensure_venv "$TFPLUGIN_VENV" --without-pip
    tfplugin_stamp="$(python_tag "$TFPLUGIN_VENV/bin/python") $(requirements_digest tools/tf_schema_provider/requirements.txt)"
    install_if_changed "$TFPLUGIN_VENV" "$tfplugin_stamp" -r tools/tf_schema_provider/requirements.txt
    "$TFPLUGIN_VENV/bin/python" -I -c 'import tf.runner, tf.provider' 2>/dev/null \
        || die ".venv-tfplugin cannot import tf; delete $TFPLUGIN_VENV and run again"
    if ! command -v "${SAFESEND_TERRAFORM:-terraform}" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        # Only where HashiCorp's apt repository is configured; otherwise the message below.
        tf_sudo=()
        [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1 && tf_sudo=(sudo -n)
        "${tf_sudo[@]}" apt-get install -y -qq "terraform=$TF_VERSION-1" >/dev/null 2>&1 || true
    fi
    if ! command -v "${SAFESEND_TERRAFORM:-terraform}" >/dev/null 2>&1; then
        # Not fatal here (other test runs need no Terraform); tests/infra/test_terraform.py fails with this.
        log "WARNING: terraform not found: tests/infra/test_terraform.py will fail. Install Terraform $TF_VERSION:
        curl -fsSLo /tmp/tf.zip https://releases.hashicorp.com/terraform/$TF_VERSION/terraform_${TF_VERSION}_linux_amd64.zip
        unzip -o /tmp/tf.zip terraform -d /usr/local/bin
        or HashiCorp's apt repository (https://developer.hashicorp.com/terraform/install), or set SAFESEND_TERRAFORM"
    fi
}

# ---------------------------------------------------------------- java + emulators
part_emulators() {
    sdk_root() {
        if [[ -n "${SAFESEND_GCLOUD_SDK_ROOT:-}" ]]; then
            printf '%s\n' "$SAFESEND_GCLOUD_SDK_ROOT"
            return
        fi
        local gcloud candidate
        if gcloud="$(command -v gcloud 2>/dev/null)"; then
            candidate="$(dirname "$(dirname "$(readlink -f "$gcloud")")")"
            if [[ -d "$candidate/platform" ]]; then
                printf '%s\n' "$candidate"
                return
            fi
        fi
        printf '%s\n' /usr/lib/google-cloud-sdk
}

java_ok() {
    local java="java"
    [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]] && java="$JAVA_HOME/bin/java"
    command -v "$java" >/dev/null 2>&1 && "$java" -version >/dev/null 2>&1
}

SDK="$(sdk_root)"
FIRESTORE_JAR="$SDK/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
PUBSUB_BIN="$SDK/platform/pubsub-emulator/bin/cloud-pubsub-emulator"

missing_packages() {
    local pkgs=()
    java_ok || pkgs+=(default-jre-headless)
    [[ -f "$FIRESTORE_JAR" ]] || pkgs+=(google-cloud-cli-firestore-emulator)
    [[ -x "$PUBSUB_BIN" ]] || pkgs+=(google-cloud-cli-pubsub-emulator)
    printf '%s\n' "${pkgs[@]}"
}

mapfile -t missing < <(missing_packages | sed '/^$/d')
if ((${#missing[@]})) && command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 && sudo_cmd=(sudo -n)
    fi
    log "missing: ${missing[*]}; trying apt-get install"
    if ! "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
        "${sudo_cmd[@]}" apt-get update -qq >/dev/null 2>&1 || true
        "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || log "apt-get install failed"
    fi
fi

java_ok || die "java not found or not runnable: the emulators need Java 11+ (apt-get install -y default-jre-headless, or set JAVA_HOME)"
[[ -f "$FIRESTORE_JAR" ]] || die "Firestore emulator missing: expected $FIRESTORE_JAR
    install: apt-get install -y google-cloud-cli-firestore-emulator (or: gcloud components install cloud-firestore-emulator)
    or set SAFESEND_GCLOUD_SDK_ROOT to the Google Cloud SDK directory"
[[ -x "$PUBSUB_BIN" ]] || die "Pub/Sub emulator missing: expected $PUBSUB_BIN
    install: apt-get install -y google-cloud-cli-pubsub-emulator (or: gcloud components install pubsub-emulator)
    or set SAFESEND_GCLOUD_SDK_ROOT to the Google Cloud SDK directory"
}

# ---------------------------------------------------------------- chromium (the console's browser tests)
part_chromium() {
    bash "$ROOT/scripts/install-browser.sh"
}

# ---------------------------------------------------------------- PostgreSQL (the second job store's tests)
part_postgres() {
    bash "$ROOT/scripts/install-postgres.sh"
}

# The parts run side by side: each venv is uv's work (downloads, unpacking) in a directory of its
# own, and the system parts (apt-get; they share dpkg's lock) run one after another beside them.
# A fresh clone's venvs took ~3 min one after another with pip on the 2-core CI machine, mostly
# waiting on the network and the disk. Each part's messages are held and printed whole when it ends, in order.
case " ${PARTS[*]} " in
    *" venv "* | *" tasks "* | *" infra "* | *" tfplugin "*) ensure_uv ;;
esac
logs="$(mktemp -d "${TMPDIR:-/tmp}/safesend-bootstrap.XXXXXX")"
trap 'rm -rf "$logs"' EXIT
groups=()
system=()
for part in "${PARTS[@]}"; do
    case "$part" in
        venv | tasks | infra | tfplugin) groups+=("$part") ;;
        *) system+=("$part") ;;
    esac
done
((${#system[@]})) && groups+=("${system[*]}")
pids=()
for group in "${groups[@]}"; do
    # A subshell per group: `die` ends only its group, whose status the wait below reads.
    # shellcheck disable=SC2086 # the system group is its parts, one a word, in order
    (for part in $group; do "part_$part"; done) >"$logs/${group// /-}" 2>&1 &
    pids+=("$!")
done
failed=()
for i in "${!groups[@]}"; do
    status=0
    wait "${pids[$i]}" || status=$?
    cat "$logs/${groups[$i]// /-}" >&2
    ((status == 0)) || failed+=("${groups[$i]}")
done
((${#failed[@]} == 0)) || die "failed: ${failed[*]} (messages above)"
log "ok for $PURPOSE (${PARTS[*]})"
