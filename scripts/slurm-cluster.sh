#!/usr/bin/env bash
# slurm-cluster.sh: a single-node Slurm cluster on this machine's loopback, for the
# tests of `portal resume --on slurm` and `portal-run --requeue` (docs/slurm.md).
#
#   scripts/slurm-cluster.sh start BASE    munged + slurmctld + slurmd, all under BASE;
#                                           ready (the node idle) when it returns 0
#   scripts/slurm-cluster.sh stop BASE     cancels the cluster's jobs, stops every
#                                           process that runs with its slurm.conf
#
# After start, `. BASE/env` sets SLURM_CONF for the clients (sbatch, squeue, ...).
# Settings (environment): SLURM_PORT (slurmctld's; slurmd takes the next, default
# 16817), SLURM_CRED_EXPIRE (s, default 5: a requeued job starts again ~6 s after,
# not 121 s).  Packages: slurmctld slurmd slurm-client munge (scripts/setup.sh).
# Partitions: debug (this node, the default) and wide (this node and a node that
# never comes up, State=FUTURE: a partition of 2 nodes, for the check that the job
# store is on a filesystem every node sees).
set -euo pipefail

say() { echo "portal: slurm-cluster: $*" >&2; }
usage() { say "usage: $0 start|stop BASE"; exit 2; }

[ $# -eq 2 ] || usage
action=$1
BASE=$2
case "$BASE" in /*) ;; *) BASE=$(pwd)/$BASE ;; esac
CONF=$BASE/etc/slurm.conf
READY_TRIES=150        # x 0.2 s: the node idle within 30 s (measured: 1.1-1.3 s)
STOP_TRIES=50          # x 0.2 s for a daemon to exit after SIGTERM, then SIGKILL
CANCEL_TRIES=50        # x 0.2 s for the cancelled jobs to leave the queue

# The processes of this cluster: its daemons carry PORTAL_SLURM_BASE=$BASE in their
# environment (and slurmstepd, which slurmd starts, with it), and the jobs are
# their descendants.  Never another's.
MARK="PORTAL_SLURM_BASE=$BASE"
cluster_pids() {  # bash builtins only: a fork per process is seconds on a loaded machine
  local p roots=() stat rest fields entries ppid c
  declare -A children=()
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    { read -r stat < /proc/$p/stat; } 2>/dev/null || continue
    rest=${stat##*) }
    read -r -a fields <<< "$rest"
    ppid=${fields[1]}
    children[$ppid]+=" $p"
    { mapfile -d '' entries < /proc/$p/environ; } 2>/dev/null || continue
    for c in "${entries[@]}"; do
      if [ "$c" = "$MARK" ]; then roots+=("$p"); break; fi
    done
  done
  local queue=("${roots[@]}") seen=" "
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}; queue=("${queue[@]:1}")
    case "$seen" in *" $p "*) continue ;; esac
    seen+="$p "
    echo "$p"
    for c in ${children[$p]:-}; do queue+=("$c"); done
  done
}

stop_pid() {  # NAME PID
  local name=$1 pid=$2 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TRIES; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  say "$name (pid $pid) still runs after SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  local i left p
  if [ -f "$CONF" ] && [ -f "$BASE/run/slurmctld.bgpid" ] && kill -0 "$(cat "$BASE/run/slurmctld.bgpid")" 2>/dev/null; then
    SLURM_CONF=$CONF scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for ((i = 0; i < CANCEL_TRIES; i++)); do
      left=$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null | wc -l) || left=0
      [ "$left" -eq 0 ] && break
      sleep 0.2
    done
  fi
  for d in slurmd slurmctld munged; do
    if [ -f "$BASE/run/$d.bgpid" ]; then
      stop_pid "$d" "$(cat "$BASE/run/$d.bgpid")"
      rm -f "$BASE/run/$d.bgpid"
    fi
  done
  # What is left (slurmstepd outlives slurmd, and so do its jobs).
  for p in $(cluster_pids); do kill -KILL "$p" 2>/dev/null || true; done
}

start() {
  local node hw st i
  for cmd in munged mungekey slurmctld slurmd sinfo; do
    command -v "$cmd" >/dev/null || { say "$cmd not found: install slurmctld slurmd slurm-client munge (scripts/setup.sh)"; exit 1; }
  done
  node=$(hostname -s)
  local port=${SLURM_PORT:-16817}
  mkdir -p "$BASE"/{etc,munge,mungekey,run,state,spool,log}
  chmod 700 "$BASE/mungekey"
  chmod 755 "$BASE/munge"
  [ -f "$BASE/mungekey/munge.key" ] || mungekey --create --keyfile="$BASE/mungekey/munge.key"
  chmod 600 "$BASE/mungekey/munge.key"
  hw=$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]* //")   # CPUs=.. Boards=.. ... RealMemory=..
  cat > "$CONF" <<CONF
ClusterName=portal
SlurmctldHost=${node}(127.0.0.1)
SlurmUser=$(id -un)
SlurmdUser=root
SlurmctldPort=${port}
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$BASE/munge/munge.socket.2,cred_expire=${SLURM_CRED_EXPIRE:-5}
CredType=cred/munge
MailProg=/bin/true
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=${node} NodeAddr=127.0.0.1 ${hw} State=UNKNOWN
NodeName=portal-ghost NodeAddr=127.0.0.2 ${hw} State=FUTURE
PartitionName=debug Nodes=${node} Default=YES MaxTime=INFINITE State=UP
PartitionName=wide Nodes=${node},portal-ghost MaxTime=INFINITE State=UP
CONF
  echo "export SLURM_CONF=$CONF" > "$BASE/env"
  export SLURM_CONF=$CONF
  # Foreground daemons, backgrounded here so that $! is the daemon's pid.
  export PORTAL_SLURM_BASE=$BASE
  munged -F --force --key-file="$BASE/mungekey/munge.key" --socket="$BASE/munge/munge.socket.2" \
    --pid-file="$BASE/munge/munged.pid" --seed-file="$BASE/munge/munged.seed" \
    --log-file="$BASE/log/munged.log" > "$BASE/log/munged.out" 2>&1 &
  echo $! > "$BASE/run/munged.bgpid"
  for ((i = 0; i < READY_TRIES; i++)); do [ -S "$BASE/munge/munge.socket.2" ] && break; sleep 0.2; done
  slurmctld -D -i -f "$CONF" > "$BASE/log/slurmctld.out" 2>&1 &
  echo $! > "$BASE/run/slurmctld.bgpid"
  slurmd -D -f "$CONF" > "$BASE/log/slurmd.out" 2>&1 &
  echo $! > "$BASE/run/slurmd.bgpid"
  st=
  for ((i = 0; i < READY_TRIES; i++)); do
    st=$(sinfo -h -n "$node" -p debug -o %T 2>/dev/null || true)
    [ "$st" = idle ] && return 0
    sleep 0.2
  done
  say "node $node is '${st:-not listed}', not idle, after $((READY_TRIES / 5)) s: see $BASE/log/"
  tail -n 5 "$BASE/log/slurmctld.log" "$BASE/log/slurmd.log" >&2 || true
  stop
  exit 1
}
unset PORTAL_SLURM_BASE

case "$action" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
