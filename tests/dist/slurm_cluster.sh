#!/usr/bin/env bash
# -----------------------------------------------------------------------------
# slurm_cluster.sh -- start/stop a private, REAL one-node Slurm cluster.
#
# Used by the distributed (tests/dist) ctest tests, which run things like
#     SLURM_CONF=<dir>/slurm.conf srun -n 2 <program>
# against a throw-away cluster made only of this machine.
#
# Usage:
#     slurm_cluster.sh start <dir>    # create <dir>, start munged+slurmctld+slurmd,
#                                     # wait until the node is idle
#     slurm_cluster.sh stop  <dir>    # stop what `start <dir>` started (idempotent)
#     slurm_cluster.sh status <dir>   # exit 0 if all three daemons are alive
#
# Exit codes of `start`: 0 ok, 1 the cluster did not come up (daemon logs are
# printed), 2 usage error, 77 a needed program is not installed (ctest
# SKIP_RETURN_CODE convention).
#
# Design notes
#  * Nothing system-wide is touched: the munge key, socket, pid, log and seed
#    files, the slurm.conf, state/spool directories, pid and log files all live
#    in <dir> (or, only for a long <dir>, in a short runtime directory under
#    /tmp, see short_runtime_dir()). /etc/munge/munge.key and /etc/slurm are
#    never read: slurm is pointed at our munged via AuthInfo=socket=... and at
#    an empty plugstack via PlugStackConfig.
#  * The daemons are started directly (no systemd: containers often lack it)
#    and daemonize themselves; all their fds are redirected so a calling
#    ctest never waits for a pipe held open by a daemon.
#  * Ports are picked free at start time (not the default 6817/6818), so a
#    system Slurm, or another test cluster in another <dir>, does not clash.
#  * `stop` only kills processes whose pid comes from our pid files (or a /proc
#    scan) AND whose command line is exactly our binary with our <dir>-specific
#    config/key file: it never kills unrelated daemons.
# -----------------------------------------------------------------------------
set -u

SKIP=77
WAIT_SECS=${SLURM_CLUSTER_WAIT_SECS:-60}   # bounded wait for the node to go idle

die()  { echo "slurm_cluster.sh: $*" >&2; exit 1; }
skip() { echo "slurm_cluster.sh: SKIP: $*" >&2; exit "$SKIP"; }
usage() { echo "usage: $0 {start|stop|status} <dir>" >&2; exit 2; }

[ $# -eq 2 ] || usage
CMD=$1
# Absolute path: it is written into slurm.conf and daemons chdir elsewhere.
DIR=$(realpath -m -- "$2") || usage
if [ -z "$DIR" ] || [ "$DIR" = / ]; then die "refusing to use '$2' as cluster directory"; fi

CONF=$DIR/slurm.conf
NODE=$(hostname -s 2>/dev/null || hostname)

# Runtime dir: holds the UNIX sockets (munge socket; slurmd spool dir, where
# slurmstepd creates <node>_<job>.<step> sockets). A UNIX socket path must fit
# in sun_path (108 bytes), so if <dir> is long (deep ctest build trees) we use
# a short, <dir>-specific directory under /tmp instead. Its location is
# recorded in <dir>/runtime_dir so `stop` can find and remove it.
short_runtime_dir() {
    if [ ${#DIR} -le 60 ]; then
        echo "$DIR/run"
    else
        echo "/tmp/mlip-slurm-$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)"
    fi
}

# --- locating programs -------------------------------------------------------
# Prefer PATH, but the daemons live in /usr/sbin, which is not always in PATH
# of non-root shells/ctest environments.
find_prog() {
    local p
    p=$(PATH="$PATH:/usr/sbin:/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin" command -v "$1" 2>/dev/null) || return 1
    [ -f "$p" ] && [ -x "$p" ] || return 1
    # Keep the path as found (do NOT resolve Debian's alternatives symlinks):
    # it is argv[0] of the daemon, which `stop` matches against.
    echo "$p"
}

# --- process helpers ---------------------------------------------------------
# Print the pids of processes whose argv[0] is exactly $1 and that have an
# argument exactly equal to $2 (our config/key file). Pure /proc scan, no
# regular expressions, so odd characters in <dir> cannot widen the match.
find_our_pids() {
    local bin=$1 marker=$2 p args
    for p in /proc/[0-9]*; do
        [ -r "$p/cmdline" ] || continue
        args=$(tr '\0' '\n' < "$p/cmdline" 2>/dev/null) || continue
        [ -n "$args" ] || continue
        [ "$(head -n1 <<<"$args")" = "$bin" ] || continue
        grep -Fxq -- "$marker" <<<"$args" && echo "${p#/proc/}"
    done
}

# Pid stored in pid file $1 (digits only; empty if the file is missing).
read_pid() { [ -f "$1" ] && tr -dc '0-9' 2>/dev/null < "$1"; }

# True if pid $1 is alive and is $2 started with argument $3.
is_ours() {
    local pid=$1 bin=$2 marker=$3 args
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    args=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
    [ "$(head -n1 <<<"$args")" = "$bin" ] && grep -Fxq -- "$marker" <<<"$args"
}

# stop_daemon NAME BIN MARKER PIDFILE: TERM, wait up to 15 s, then KILL.
stop_daemon() {
    local name=$1 bin=$2 marker=$3 pidfile=$4 pids="" pid alive
    pid=$(read_pid "$pidfile")
    is_ours "$pid" "$bin" "$marker" && pids=$pid
    # Also catch instances whose pid file is missing/stale (e.g. a start that
    # was interrupted), still anchored on full binary path + our file.
    for pid in $(find_our_pids "$bin" "$marker"); do
        case " $pids " in *" $pid "*) ;; *) pids="$pids $pid" ;; esac
    done
    pids=${pids# }   # $pids/$alive are intentionally word-split lists below
    if [ -n "$pids" ]; then
        echo "stopping $name (pid $pids)"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null
        for _ in $(seq 1 150); do
            alive=""
            for pid in $pids; do is_ours "$pid" "$bin" "$marker" && alive="$alive $pid"; done
            [ -z "$alive" ] && break
            sleep 0.1
        done
        if [ -n "$alive" ]; then
            echo "$name did not exit on SIGTERM, sending SIGKILL to$alive"
            # shellcheck disable=SC2086
            kill -KILL $alive 2>/dev/null
            sleep 0.5
        fi
    fi
    rm -f "$pidfile"
}

# --- free ports ----------------------------------------------------------------
port_in_use() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        ss -Htan 2>/dev/null | awk '{print $4}' | grep -Eq "[:.]$port\$"
    else
        # Fallback: something accepts a connection on it -> in use.
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}
# Random port in 20000..59999 that nothing listens on / is connected from right
# now. There is a small window before slurm binds it; start_once detects
# "Address already in use" and do_start retries with new ports.
# Sets PORT (no command substitution: PICKED_PORTS must survive between calls
# so the two ports differ).
pick_port() {
    for _ in $(seq 1 200); do
        PORT=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
        case " ${PICKED_PORTS:-} " in *" $PORT "*) continue ;; esac
        if ! port_in_use "$PORT"; then
            PICKED_PORTS="${PICKED_PORTS:-} $PORT"
            return 0
        fi
    done
    return 1
}

# -----------------------------------------------------------------------------
do_stop() {
    local RT MUNGED SLURMCTLD SLURMD SCANCEL
    RT=$(cat "$DIR/runtime_dir" 2>/dev/null || short_runtime_dir)
    MUNGED=$(find_prog munged || echo /usr/sbin/munged)
    SLURMCTLD=$(find_prog slurmctld || echo /usr/sbin/slurmctld)
    SLURMD=$(find_prog slurmd || echo /usr/sbin/slurmd)

    # Cancel leftover jobs first (e.g. a test killed mid-srun) so slurmd tears
    # down their slurmstepd processes cleanly. Bounded so stop never hangs.
    if [ -f "$CONF" ] && SCANCEL=$(find_prog scancel) && \
       is_ours "$(read_pid "$DIR/slurmctld.pid")" "$SLURMCTLD" "$CONF"; then
        SLURM_CONF=$CONF timeout 10 "$SCANCEL" --quiet --user=root >/dev/null 2>&1 || true
        # slurmd needs a moment to kill the steps.
        sleep 0.5
    fi

    # Order: compute daemon, controller, then munged (both need munge to
    # exchange their shutdown messages).
    stop_daemon slurmd    "$SLURMD"    "$CONF"           "$DIR/slurmd.pid"
    stop_daemon slurmctld "$SLURMCTLD" "$CONF"           "$DIR/slurmctld.pid"
    stop_daemon munged    "$MUNGED"    "--key-file=$DIR/munge/munge.key" "$DIR/munge/munged.pid"

    # Remove the short runtime dir if it is outside <dir> (sockets only).
    case "$RT" in
        /tmp/mlip-slurm-*) rm -rf -- "$RT" ;;
    esac
    return 0
}

do_status() {
    local MUNGED SLURMCTLD SLURMD ok=0
    MUNGED=$(find_prog munged) && SLURMCTLD=$(find_prog slurmctld) && SLURMD=$(find_prog slurmd) || return 1
    is_ours "$(read_pid "$DIR/munge/munged.pid")" "$MUNGED" "--key-file=$DIR/munge/munge.key" || { echo "munged not running"; ok=1; }
    is_ours "$(read_pid "$DIR/slurmctld.pid")" "$SLURMCTLD" "$CONF" || { echo "slurmctld not running"; ok=1; }
    is_ours "$(read_pid "$DIR/slurmd.pid")" "$SLURMD" "$CONF" || { echo "slurmd not running"; ok=1; }
    [ $ok -eq 0 ] && echo "running (SLURM_CONF=$CONF)"
    return $ok
}

dump_logs() {
    local f
    echo "---------------- slurm_cluster.sh: daemon logs ($DIR) ----------------" >&2
    for f in "$DIR/munge/munged.log" "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" \
             "$DIR/log/munged.out" "$DIR/log/slurmctld.out" "$DIR/log/slurmd.out"; do
        [ -s "$f" ] || continue
        echo "=== $f (last 60 lines) ===" >&2
        tail -n 60 "$f" >&2
    done
    if [ -n "${SINFO:-}" ] && [ -f "$CONF" ]; then
        echo "=== sinfo ===" >&2
        SLURM_CONF=$CONF timeout 10 "$SINFO" -N -l >&2 2>&1 || true
    fi
}

# One attempt to bring the cluster up. Returns 0 when the node is idle,
# 1 on failure, 3 if a port turned out to be taken (caller retries).
start_once() {
    local RT CTLD_PORT SLURMD_PORT NCPU state

    RT=$(short_runtime_dir)
    rm -rf -- "$DIR/state" "$DIR/log" "$RT/spool"
    # munge/ must be owned by root and not group/world-writable: munged
    # refuses (or, with --force, complains about) insecure directories.
    mkdir -p "$DIR" "$DIR/state" "$DIR/log" "$DIR/munge" "$RT" "$RT/spool" || return 1
    chmod 0700 "$DIR/munge"
    # Socket dir: root-owned, not writable by others, but traversable (munged
    # warns "Socket is inaccessible" otherwise).
    chmod 0755 "$RT"
    echo "$RT" > "$DIR/runtime_dir"

    # ---- munge -------------------------------------------------------------
    # Private key: never /etc/munge/munge.key. munged wants it 0400/0600.
    if [ ! -s "$DIR/munge/munge.key" ]; then
        if MUNGEKEY=$(find_prog mungekey); then
            "$MUNGEKEY" --create --force --keyfile="$DIR/munge/munge.key" >/dev/null 2>&1
        fi
        if [ ! -s "$DIR/munge/munge.key" ]; then
            dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none || return 1
        fi
    fi
    chmod 0600 "$DIR/munge/munge.key"
    # --force: munged running as root, and/or parent dirs of <dir> that munged
    # considers insecure (e.g. a group-writable build tree), would otherwise
    # make it refuse to start. Socket/pid/log/seed are all private; the key
    # file path is also our `stop` marker for munged.
    rm -f "$RT/munge.socket" "$RT/munge.socket.lock"
    "$MUNGED" --force \
        --socket="$RT/munge.socket" \
        --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed" \
        </dev/null >"$DIR/log/munged.out" 2>&1 \
        || { echo "munged failed to start" >&2; return 1; }
    for _ in $(seq 1 50); do [ -S "$RT/munge.socket" ] && break; sleep 0.1; done
    [ -S "$RT/munge.socket" ] || { echo "munged socket $RT/munge.socket did not appear" >&2; return 1; }

    # ---- slurm.conf --------------------------------------------------------
    PICKED_PORTS=""
    pick_port || { echo "no free port found" >&2; return 1; }
    CTLD_PORT=$PORT
    pick_port || { echo "no free port found" >&2; return 1; }
    SLURMD_PORT=$PORT
    # GNU nproc honours OMP_NUM_THREADS (the tests set it to 1): ask for the online CPUs.
    NCPU=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
    : > "$DIR/plugstack.conf"   # empty: ignore /etc/slurm/plugstack.conf(.d)

    cat > "$CONF" <<EOF
# Generated by tests/dist/slurm_cluster.sh -- private one-node test cluster.
# (slurm-wlm $("$SLURMCTLD" -V 2>/dev/null | awk '{print $2}'))
ClusterName=mlip-test
# Controller and the only compute node are this machine. NodeAddr=127.0.0.1 so
# nothing depends on how the hostname resolves (only loopback traffic).
SlurmctldHost=$NODE(127.0.0.1)
# Non-default ports, picked free at start time: no clash with a system Slurm
# (6817/6818) or with another test cluster.
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# We run as root and want no user switching/privilege dropping.
SlurmUser=root
SlurmdUser=root
# Authentication through OUR munged (AuthInfo socket=), never /run/munge.
# Slurm 22.05 uses the same AuthInfo socket for cred/munge (job credentials).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$RT/munge.socket
# All state, spool, pid and log files private to this cluster directory.
# SlurmdSpoolDir holds slurmstepd UNIX sockets -> must be a short path.
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$RT/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Empty private plugstack: the system /etc/slurm/plugstack.conf includes
# plugstack.conf.d/*.conf, which must not influence the tests.
PlugStackConfig=$DIR/plugstack.conf
# No cgroups (containers usually cannot use them): plain /proc process
# tracking, no task binding/affinity.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Schedule by CPU only (CR_CPU): memory is not a consumable resource, so jobs
# never wait for/are refused memory on a node with RealMemory left at default.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# A node that was DOWN (e.g. previous run's slurmd killed) returns to service
# as soon as its slurmd registers with a valid config.
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
# No accounting / job completion / energy plugins and no database.
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# No mail program in containers; avoids a startup error message.
MailProg=/bin/true
# Fast turnaround for tests.
SlurmdTimeout=60
SlurmctldTimeout=60
InactiveLimit=0
MinJobAge=30
KillWait=5
Waittime=0
# The node. CPUs = nproc here; RealMemory left at its default (1 MB), which
# is harmless with CR_CPU. State=UNKNOWN: becomes IDLE once slurmd registers.
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$NCPU State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

    # ---- slurmctld / slurmd ------------------------------------------------
    # -f: our config (also the `stop` marker). -i: ignore state files (the
    # state dir was wiped anyway; fresh cluster every start). Both daemonize.
    SLURM_CONF=$CONF "$SLURMCTLD" -f "$CONF" -i \
        </dev/null >"$DIR/log/slurmctld.out" 2>&1 \
        || { echo "slurmctld failed to start" >&2; return 1; }
    # -N: node name explicitly (in case `hostname` differs from `hostname -s`).
    SLURM_CONF=$CONF "$SLURMD" -f "$CONF" -N "$NODE" \
        </dev/null >"$DIR/log/slurmd.out" 2>&1 \
        || { echo "slurmd failed to start" >&2; return 1; }

    # ---- wait for the node to be idle (bounded) ----------------------------
    local deadline=$(( SECONDS + WAIT_SECS ))
    state=""
    while [ $SECONDS -lt $deadline ]; do
        state=$(SLURM_CONF=$CONF timeout 5 "$SINFO" -h -n "$NODE" -o '%t' 2>/dev/null | head -n1)
        case "$state" in
            idle) echo "node $NODE is idle after $(( SECONDS - START_T )) s"; return 0 ;;
        esac
        # A port that got taken between pick_port and bind: retry with others.
        if grep -qs -i 'address already in use' "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log"; then
            echo "a picked port was taken, retrying with other ports" >&2
            return 3
        fi
        sleep 0.5
    done
    echo "node $NODE not idle after ${WAIT_SECS} s (last sinfo state: '${state:-none}')" >&2
    return 1
}

do_start() {
    local prog rc attempt
    # ---- prerequisites: missing -> 77 (ctest "skipped") ------------------
    for prog in munged slurmctld slurmd slurmstepd srun sinfo; do
        find_prog "$prog" >/dev/null || skip "'$prog' not installed (need Debian packages slurm-wlm + munge)"
    done
    for prog in realpath cksum nproc timeout; do
        command -v "$prog" >/dev/null 2>&1 || skip "'$prog' not found"
    done
    if [ "$(id -u)" != 0 ]; then
        # SlurmUser/SlurmdUser=root and munged --force as root are assumed.
        skip "must run as root to start a private Slurm cluster"
    fi
    MUNGED=$(find_prog munged); SLURMCTLD=$(find_prog slurmctld)
    SLURMD=$(find_prog slurmd); SINFO=$(find_prog sinfo)
    START_T=$SECONDS

    # Re-runnable: whatever a previous `start <dir>` left running is stopped
    # first (only processes tied to <dir>), then we start from a clean state.
    do_stop >/dev/null

    for attempt in 1 2 3; do
        start_once; rc=$?
        [ $rc -eq 0 ] && break
        if [ $rc -ne 3 ] || [ $attempt -eq 3 ]; then
            dump_logs
            do_stop >/dev/null
            exit 1
        fi
        do_stop >/dev/null
    done

    echo "Slurm test cluster running in $DIR"
    echo "export SLURM_CONF=$CONF"
    echo "# e.g.: SLURM_CONF=$CONF srun -n 2 hostname"
    echo "# stop: $0 stop $DIR"
    return 0
}

case "$CMD" in
    start)  do_start ;;
    stop)   do_stop; exit 0 ;;
    status) do_status; exit $? ;;
    *)      usage ;;
esac
