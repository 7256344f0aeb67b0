#!/usr/bin/env bash
# The README's two commands: set up a fresh Debian 12 / Ubuntu 24.04 machine
# (build dependencies through apt-get), bootstrap, build out of tree in
# build/, then either run the demo or the test suite.  Re-running is fast:
# nothing is installed, configured or rebuilt that is already up to date.
#
#   tools/dev.sh demo     the main job on the embedded default model
#   tools/dev.sh check    make check (what CI runs)
#   tools/dev.sh build    set-up and build only
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${LLMQ_BUILD_DIR:-$top/build}
jobs=$(nproc 2>/dev/null || echo 2)

say() { printf '==> %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else say "need root for: $*  (run as root or install sudo)"; exit 1; fi
}

# msgpack-c's -dev package is libmsgpack-dev on Debian 12 and libmsgpack-c-dev on Ubuntu 24.04.
msgpack_pkg() {
    if apt-cache show libmsgpack-c-dev >/dev/null 2>&1; then echo libmsgpack-c-dev
    else echo libmsgpack-dev; fi
}

install_deps() {
    local want="build-essential autoconf automake libtool pkg-config libzmq3-dev libsqlite3-dev
                libutf8proc-dev sqlite3 python3 python3-zmq python3-msgpack python3-jsonschema $*"
    local missing=()
    for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if ! dpkg -s libmsgpack-dev >/dev/null 2>&1 && ! dpkg -s libmsgpack-c-dev >/dev/null 2>&1; then
        missing+=(msgpack)
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing build dependencies: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    missing=("${missing[@]/#msgpack/$(msgpack_pkg)}")
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

configure_and_build() {
    cd "$top"
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        say "bootstrapping (autoreconf)"
        ./autogen.sh >/dev/null 2>&1 || ./autogen.sh
    fi
    mkdir -p "$build"
    cd "$build"
    if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
        say "configuring in $build"
        "$top/configure" --quiet ${LLMQ_CONFIGURE_FLAGS:-}
    fi
    say "building with $jobs jobs"
    make -s -j"$jobs"
}

run_check() {
    cd "$build"
    say "running the test suite (make check)"
    local rc=0
    make -s -j"$jobs" check || rc=$?
    # One closing line for whoever reads the log: counts from Automake's harness.
    local pass fail skip
    pass=$(grep -h '^# PASS:' test-suite.log 2>/dev/null | awk '{s+=$3} END {print s+0}')
    fail=$(grep -hE '^# (FAIL|ERROR|XPASS):' test-suite.log 2>/dev/null | awk '{s+=$3} END {print s+0}')
    skip=$(grep -h '^# SKIP:' test-suite.log 2>/dev/null | awk '{s+=$3} END {print s+0}')
    if [ "$rc" -ne 0 ]; then
        say "failures; the logs of failing tests follow"
        for f in $(find . -name '*.log' ! -name test-suite.log ! -name config.log); do
            if grep -qE '^:test-result: (FAIL|ERROR)' "${f%.log}.trs" 2>/dev/null; then
                echo "---- $f"; tail -n 60 "$f"
            fi
        done
    fi
    echo "${pass} passed, ${fail} failed, ${skip} skipped"
    return "$rc"
}

# The lines changed since .ci/format-base (the commit from which formatting is
# enforced) must follow .clang-format.  A tree without that history (a
# tarball, a shallow clone) cannot be checked, and says so.
run_format_check() {
    cd "$top"
    local base
    base=$(cat .ci/format-base)
    if ! git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1; then
        say "format check skipped: commit $base (.ci/format-base) is not in this tree's history"
        return 0
    fi
    say "checking the format of the lines changed since $base"
    tools/format-check.sh "$base"
}

run_demo() {
    cd "$top"
    exec "$top/tools/demo.sh" "$build"
}

case "${1:-}" in
    demo)  install_deps; configure_and_build; run_demo ;;
    check) install_deps clang-format; configure_and_build
           rc=0; run_check || rc=$?; run_format_check || rc=$?; exit "$rc" ;;
    build) install_deps; configure_and_build ;;
    *) echo "usage: $0 demo|check|build" >&2; exit 2 ;;
esac
