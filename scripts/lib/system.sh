# apt_install MISSING [--no-install-recommends] PACKAGE...: install the packages with apt-get
# when we are root (after `apt-get update` if the first try fails: a fresh machine may have no
# package lists yet), output in $TMPDIR/raftsched-apt.log; otherwise say MISSING in a warning.
# Never fatal.
apt_install() {
    local missing="$1"
    shift
    local options=(-y -q)
    if [ "${1:-}" = --no-install-recommends ]; then
        options+=("$1")
        shift
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "warning: $missing (not root or no apt-get)" >&2
        return 0
    fi
    echo "installing system packages: $*" >&2
    local log="${TMPDIR:-/tmp}/raftsched-apt.log"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install "${options[@]}" "$@" >>"$log" 2>&1; then
        if ! { apt-get update -q && apt-get install "${options[@]}" "$@"; } >>"$log" 2>&1; then
            echo "warning: apt-get could not install $* (log: $log)" >&2
        fi
    fi
}

# Sourced by scripts/test and jepsen-style/run: the system packages the fault-injection harness
# needs (iptables for partitions, iproute2 and util-linux for namespaces) and the metrics tests
# need (prometheus: promtool lints the exposition and the alert rules, a real Prometheus scrapes
# a dev cluster; its Debian service is not started), installed with apt-get when missing and we
# are root. Never fatal: without them the harness and those tests say what is missing.
ensure_system_packages() {
    local missing=()
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
    command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    [ ${#missing[@]} -eq 0 ] && return 0
    apt_install "missing system packages ${missing[*]}" "${missing[@]}"
}

# The Slurm integration tests and `scripts/demo --slurm` (raftsched/dev/slurm.py, through
# tests/support/slurm.py and `raftsched dev up --slurm`) start a private single-node Slurm: the
# Debian packages slurm-wlm (slurmctld, slurmd, the client commands) and munge (munged,
# mungekey), installed without recommends when missing and we are root; their Debian services
# are not started. Never fatal: without them those tests skip and say what is missing.
ensure_slurm() {
    local tool
    for tool in sbatch slurmctld slurmd munged mungekey; do
        command -v "$tool" >/dev/null 2>&1 || break
        tool=""
    done
    [ -z "$tool" ] && return 0
    apt_install "$tool missing: slurm-wlm and munge not installed" --no-install-recommends \
        slurm-wlm munge
}

# The web console's browser tests (tests/integration/test_web_console.py) drive Debian's
# chromium headless through Playwright (its own browser downloads are not used), installed
# without recommends when missing and we are root. Never fatal: without it those tests skip and
# say what is missing.
ensure_chromium() {
    [ -x /usr/bin/chromium ] && return 0
    apt_install "/usr/bin/chromium missing: chromium not installed" --no-install-recommends \
        chromium
}
