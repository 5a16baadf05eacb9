#!/bin/bash
# A real Slurm on this one host, to try the recipes here before a site's cluster: Debian's Slurm and
# MUNGE packages, one partition, every file in one directory. By default one node (this host, all its
# CPUs); MICROAGG_SLURM_NODES=N makes N nodes of it (one slurmd each, every one with all the CPUs and
# 1/N of the memory), so that multi-node jobs (srun across nodes) run for real on one machine.
# Nothing under /etc is changed and no system service is started; the daemons run as root.
#
#   deploy/slurm/one-host-slurm.sh start DIR     # prints: export SLURM_CONF=DIR/slurm.conf
#   export SLURM_CONF=DIR/slurm.conf
#   sbatch --nodes=1 --cpus-per-task=2 --mem=6G deploy/slurm/microagg-export.sbatch JOB.toml
#   deploy/slurm/one-host-slurm.sh stop DIR
#
# Needs the packages `slurm-wlm` and `munge` (Debian 12: Slurm 22.05): `apt-get install -y slurm-wlm
# munge`, or set MICROAGG_SLURM_INSTALL=1 and `start` installs them. Ports: 16817 (slurmctld) and
# 16818 (slurmd; the nodes of MICROAGG_SLURM_NODES take the next ones), or MICROAGG_SLURM_PORT and
# those after it. tests/test_slurm.py runs both recipes on it.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$(realpath -m "$2")
port=${MICROAGG_SLURM_PORT:-16817}

stop() {
    local file pid
    for file in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/run/munged.pid"; do
        if [ -s "$file" ]; then
            pid=$(cat "$file")
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$file"
    done
}

case $action in
stop)
    stop
    exit 0
    ;;
start) ;;
*) usage ;;
esac

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    if [ "${MICROAGG_SLURM_INSTALL:-0}" = 1 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
    else
        echo "Slurm is not installed: apt-get install -y slurm-wlm munge (or MICROAGG_SLURM_INSTALL=1)" >&2
        exit 3
    fi
fi
PATH=$PATH:/usr/sbin

n_nodes=${MICROAGG_SLURM_NODES:-1}
[[ $n_nodes =~ ^[1-9][0-9]*$ ]] || { echo "MICROAGG_SLURM_NODES must be a positive integer" >&2; exit 2; }
mkdir -p "$dir"/{munge,run,log,state,spool}
chmod 711 "$dir/munge"  # munged wants its socket's directory searchable by all
if [ ! -s "$dir/munge/munge.key" ]; then
    head -c 1024 /dev/urandom > "$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
fi

host=$(hostname -s)
cpus=$(nproc)
# what Slurm may hand out: the host's memory less 2 GiB for the daemons and the submitting shell (MB)
memory=$(awk -v n="$n_nodes" '/MemTotal/ { printf "%d", ($2 / 1024 - 2048) / n }' /proc/meminfo)
nodes=()
if [ "$n_nodes" = 1 ]; then
    nodes=("$host")
else
    for i in $(seq "$n_nodes"); do nodes+=("$host-$i"); done
fi
cat > "$dir/slurm.conf" <<EOF
# one-host Slurm written by deploy/slurm/one-host-slurm.sh (for trying the recipes, not for production)
ClusterName=microagg-one-host
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
EOF
for i in "${!nodes[@]}"; do
    echo "NodeName=${nodes[i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + i))" \
        "CPUs=$cpus RealMemory=$memory State=UNKNOWN"
done >> "$dir/slurm.conf"
echo "PartitionName=local Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP" >> "$dir/slurm.conf"

stop  # a previous start in the same directory
munged --force --key-file "$dir/munge/munge.key" --socket "$dir/munge/munge.socket" \
    --pid-file "$dir/run/munged.pid" --log-file "$dir/log/munged.log" --seed-file "$dir/munge/munge.seed"
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i
for node in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$node"
    slurmd -f "$SLURM_CONF" -N "$node"
done

# ready when every node is idle (its slurmd registered with slurmctld)
for _ in $(seq 60); do
    state=$(sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ "$state" = "idle " ]; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.5
done
echo "Slurm did not come up within 30 s (node states: ${state:-none}); logs in $dir/log" >&2
stop
exit 4
