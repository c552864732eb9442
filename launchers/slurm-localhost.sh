#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost (Debian 12's slurm 22.05, run as root, no
# systemd or cgroups), for tests and for trying `launcher=slurm` without a cluster.
#
#   bash launchers/slurm-localhost.sh up [--accounting]   install, configure, start, wait idle
#   bash launchers/slurm-localhost.sh down                 cancel jobs, stop every daemon
#   bash launchers/slurm-localhost.sh status               sinfo, or "not running" (exit 1)
#   eval "$(bash launchers/slurm-localhost.sh env)"        export SLURM_CONF for clients
#
# Everything (config, state, spool, pid and log files) lives in ${RACE_SLURM_DIR:-/tmp/race-slurm}.
# --accounting adds slurmdbd + MariaDB so `sacct` works: submitit uses sacct to notice jobs
# that die without writing a result (scancel, node loss); without it job.result() on such a
# job waits forever, so poll with job.done(force_check=True) under a deadline instead.
set -euo pipefail

DIR=${RACE_SLURM_DIR:-/tmp/race-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
DAEMONS="slurmd slurmctld slurmdbd mariadb munged"   # stop order; start order is reversed

usage() { echo usage: >&2; sed -n '5,8s/^#   /  /p' "$0" >&2; exit 2; }
log() { echo "slurm-localhost: $*" >&2; }
pid_alive() { [[ -f $DIR/$1.pid ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }
running() { pid_alive slurmctld && pid_alive slurmd && sinfo -h >/dev/null 2>&1; }
node_idle() { [[ $(sinfo -h -N -o %t) == idle ]]; }
wait_for() {   # wait_for WHAT COMMAND...: retry COMMAND for 60 s
    local what=$1 i; shift
    for i in $(seq 120); do "$@" >/dev/null 2>&1 && return; sleep 0.5; done
    log "$what not ready after 60 s (logs in $DIR)"; return 1
}

install_packages() {   # apt only for what is missing; refresh the lists once if they are stale
    local missing=() p
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    local apt=(apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}")
    export DEBIAN_FRONTEND=noninteractive
    "${apt[@]}" >"$DIR/apt.log" 2>&1 || { apt-get update -q >>"$DIR/apt.log" 2>&1 &&
        "${apt[@]}" >>"$DIR/apt.log" 2>&1; } || { tail -20 "$DIR/apt.log" >&2; exit 1; }
}

write_slurm_conf() {   # $1: 1 with accounting
    # The node line is what slurmd itself measures (minus UpTime, which is not a setting).
    # RealMemory is lowered 2%: a node reporting less than configured is drained.
    local node mem
    node=$(slurmd -C | grep '^NodeName=')
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
    node=$(sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 98 / 100))/" <<<"$node")" NodeAddr=127.0.0.1"
    local host=${node#NodeName=}; host=${host%% *}
    cat >"$CONF" <<EOF
# Written by launchers/slurm-localhost.sh; rewritten on every "up".
ClusterName=race-local
SlurmctldHost=$host(127.0.0.1)
# slurmd must be root to start jobs as their submitters; slurmctld runs as root too, so the
# scratch folder needs no chown to Debian's slurm user.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# Credentials expire in 10 s (default 120): a requeued job may not restart before its old
# credential expires, so this is what makes a requeue take seconds instead of two minutes.
AuthInfo=cred_expire=10
# No cgroups in a container: track job processes by parent pid, bind no tasks, gather no
# per-job usage (jobacct_gather/linux is possible but adds polling for nothing we read).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# Schedule single CPUs (not whole nodes or cores) so several small jobs share the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Requests over a partition limit (more CPUs than the node has, ...) fail at sbatch instead
# of pending forever.
EnforcePartLimits=ALL
# Batch jobs are requeueable by default (submitit's Checkpointable requeues itself); a job
# past its limit gets SIGKILL 5 s after SIGTERM (default 30); finished jobs leave squeue
# after 30 s (default 300); a node that was DOWN rejoins as soon as its slurmd registers.
JobRequeue=1
KillWait=5
MinJobAge=30
ReturnToService=2
# Schedule at once on submit (batch_sched_delay, default 3 s) and run the main scheduler
# every 2 s (default 60): a requeued job only becomes eligible cred_expire+1 s later, an
# event nothing else wakes the scheduler for, so it would wait up to a minute to restart.
SchedulerParameters=batch_sched_delay=0,sched_interval=2
MailProg=/bin/true   # there is no mail here (the default /bin/mail is not installed)
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
EOF
    if [[ $1 == 1 ]]; then
        printf '%s\n' "AccountingStorageType=accounting_storage/slurmdbd" \
            "AccountingStorageHost=localhost" "JobCompType=jobcomp/none" >>"$CONF"
    fi
    printf '%s\n' "$node" "PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

start_accounting() {   # MariaDB with its data in the scratch folder, then slurmdbd
    local db=$DIR/mariadb   # mariadbd runs as mysql: its pid and log files live in its folder
    install -d -o mysql -g mysql "$db" /run/mysqld
    [[ -d $db/data ]] || mariadb-install-db --user=mysql --datadir="$db/data" \
        --auth-root-authentication-method=socket >"$db/install.log" 2>&1
    mariadbd --user=mysql --datadir="$db/data" --pid-file="$db/mariadb.pid" --skip-networking \
        --socket=/run/mysqld/mysqld.sock --log-error="$db/mariadb.log" </dev/null >/dev/null 2>&1 &
    ln -sfn "$db/mariadb.pid" "$DIR/mariadb.pid"
    wait_for MariaDB mariadb -e 'select 1'
    # slurmdbd (running as root) reaches MariaDB over the socket as root: no password to keep.
    mariadb -e 'CREATE DATABASE IF NOT EXISTS slurm_acct_db'
    cat >"$DIR/slurmdbd.conf" <<EOF
DbdHost=localhost
SlurmUser=root
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
EOF
    chmod 600 "$DIR/slurmdbd.conf"   # slurmdbd refuses a config others can read
    slurmdbd   # finds slurmdbd.conf next to $SLURM_CONF
    wait_for slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster race-local >/dev/null 2>&1 || true   # registers root's association
}

up() {
    local acct=0
    [[ ${1:-} == --accounting ]] && acct=1
    [[ ${1:-} && $acct == 0 ]] && usage
    if running; then log "already up"; echo "export SLURM_CONF=$CONF"; return; fi
    down >/dev/null 2>&1 || true   # clear half-started leftovers
    trap 'down >/dev/null 2>&1' EXIT   # and leave none if this start fails
    local t0=$SECONDS
    mkdir -p "$DIR/state" "$DIR/spool"
    install_packages slurmctld slurmd slurm-client munge
    ((acct)) && install_packages slurmdbd mariadb-server
    # Clients without SLURM_CONF read /etc/slurm/slurm.conf; point it here unless it is real.
    if [[ ! -e /etc/slurm/slurm.conf || -L /etc/slurm/slurm.conf ]]; then
        mkdir -p /etc/slurm && ln -sfn "$CONF" /etc/slurm/slurm.conf
    fi

    # munged refuses to run as root and wants its socket folder owned by munge.
    [[ -s /etc/munge/munge.key ]] || {
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
    install -d -o munge -g munge /run/munge
    install -d -o munge -g munge -m 700 "$DIR/munge"
    if ! munge -n >/dev/null 2>&1; then   # reuse a munged that is already serving (not ours to stop)
        runuser -u munge -- munged --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log"
        ln -sfn "$DIR/munge/munged.pid" "$DIR/munged.pid"
    fi

    write_slurm_conf "$acct"
    ((acct)) && start_accounting
    slurmctld
    slurmd
    wait_for "idle node" node_idle || { sinfo -N -o '%N %t %E' >&2; tail -5 "$DIR"/slurm*.log >&2; exit 1; }
    log "up in $((SECONDS - t0)) s ($(sinfo -h -o '%P %D nodes, %c cpus'))"
    trap - EXIT
    echo "export SLURM_CONF=$CONF"
}

down() {
    # Cancel jobs first: slurmstepd and job processes outlive slurmd by design.
    if pid_alive slurmctld; then
        scancel --quiet --partition=debug 2>/dev/null || true
        for _ in $(seq 40); do [[ -z $(squeue -h -t R,CG 2>/dev/null) ]] && break; sleep 0.5; done
    fi
    local d pid
    for d in $DAEMONS; do
        pid_alive "$d" || continue
        pid=$(cat "$DIR/$d.pid")
        kill "$pid"
        for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        log "stopped $d ($pid)"
    done
    return 0
}

case ${1:-} in
    up) shift; up "$@" ;;
    down) down ;;
    status) running && sinfo || { echo "not running"; exit 1; } ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) usage ;;
esac
