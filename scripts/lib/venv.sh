# Sourced by scripts/*: make sure .venv exists and has this checkout installed (with extras).
# Usage: ensure_venv [extra]   — re-installs only when pyproject.toml changed since last time.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${RAFTSCHED_VENV:-$ROOT/.venv}"

# Probe quietly: a pyenv shim exists for every version pyenv knows and prints a "command not
# found" block for a version that is not selected; that is a "no", not something to show.
find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
                >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    echo "error: raftsched needs Python >= 3.11 (none found on PATH; tried python3.13," \
        "python3.12, python3.11, python3)" >&2
    return 1
}

ensure_venv() {
    local extra="${1:-}"
    local python
    if [ ! -x "$VENV/bin/python" ]; then
        python="$(find_python)"
        echo "creating virtualenv $VENV ($($python --version))"
        "$python" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
    fi
    local spec="$ROOT"
    [ -n "$extra" ] && spec="$ROOT[$extra]"
    local stamp="$VENV/.raftsched-installed-$extra"
    local want
    want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "installing raftsched${extra:+[$extra]} into $VENV"
        local log="$VENV/pip-install.log"
        if ! "$VENV/bin/python" -m pip install --quiet -e "$spec" >"$log" 2>&1; then
            cat "$log" >&2
            echo "error: pip install failed (log above, also in $log)" >&2
            return 1
        fi
        echo "$want" >"$stamp"
    fi
}
