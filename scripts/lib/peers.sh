# Sourced by scripts/bench: what `scripts/bench peers` needs beside raftsched's own virtualenv.
#   ensure_peers_venv    — .venv-peers with Celery (+ redis client) and Dask distributed
#   ensure_redis_server  — the Debian package redis-server, apt-installed when missing and root
#   ensure_etcd_server   — Debian's etcd-server + etcd-client (etcd, etcdctl), the same way
# Neither is fatal: each prints a loud reason and the benchmark skips only that peer.
PEERS_VENV="${RAFTSCHED_PEERS_VENV:-$ROOT/.venv-peers}"
PEERS_REQUIREMENTS="$ROOT/scripts/lib/peers-requirements.txt"

loud() {
    echo "################################################################################" >&2
    echo "# $*" >&2
    echo "################################################################################" >&2
}

ensure_peers_venv() {
    local python
    if [ ! -x "$PEERS_VENV/bin/python" ]; then
        python="$(find_python)" || return 1
        echo "creating virtualenv $PEERS_VENV for the peers ($($python --version))" >&2
        "$python" -m venv "$PEERS_VENV" || return 1
        "$PEERS_VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
    fi
    local stamp="$PEERS_VENV/.peers-installed"
    local want
    want="$(sha256sum "$PEERS_REQUIREMENTS" | cut -d' ' -f1)"
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
    echo "installing Celery, redis and Dask distributed into $PEERS_VENV" >&2
    local log="$PEERS_VENV/pip-install.log"
    if ! "$PEERS_VENV/bin/python" -m pip install --quiet -r "$PEERS_REQUIREMENTS" >"$log" 2>&1; then
        tail -20 "$log" >&2
        loud "pip could not install the peers into $PEERS_VENV (log: $log)"
        return 1
    fi
    echo "$want" >"$stamp"
}

ensure_redis_server() { ensure_system_command redis-server redis-server; }

# etcd-server (the etcd daemon) and etcd-client (etcdctl, to find the leader): Debian's 3.4.
ensure_etcd_server() {
    ensure_system_command etcd etcd-server etcd-client && ensure_system_command etcdctl etcd-client
}

# ensure_system_command COMMAND PACKAGE... — apt-get install the packages when COMMAND is missing.
ensure_system_command() {
    local command="$1"; shift
    command -v "$command" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        loud "$command is missing and cannot be installed here (not root or no apt-get)"
        return 1
    fi
    echo "installing system packages: $*" >&2
    local log="${TMPDIR:-/tmp}/raftsched-apt-$command.log"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1; then
        # A fresh machine may have no package lists yet.
        if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; } \
            >>"$log" 2>&1; then
            loud "apt-get could not install $* (log: $log)"
            return 1
        fi
    fi
    command -v "$command" >/dev/null 2>&1 || { loud "$* installed but $command is not on PATH"; return 1; }
}
