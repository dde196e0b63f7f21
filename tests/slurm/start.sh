#!/usr/bin/env bash
# Starts a one-machine Slurm cluster (munge, slurmctld and slurmd on this host) from Debian's
# slurm-wlm packages, for the Slurm launcher's test. Idempotent; prints the folder it uses.
# Needs root (it writes /etc/munge and starts daemons). Stop it with tests/slurm/stop.sh.
set -euo pipefail
state=${BBCLUSTER_SLURM_DIR:-/tmp/bbcluster-slurm}
mkdir -p "$state"/{spool,ctld,log}
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2; }
fi

# munge: one key, the daemon running.
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c "/usr/sbin/munged" || /usr/sbin/munged --force

cat > /etc/slurm/slurm.conf <<CONF
ClusterName=bbcluster-test
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmdSpoolDir=$state/spool
StateSaveLocation=$state/ctld
SlurmUser=root
SlurmdUser=root
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
rm -f /etc/slurm/cgroup.conf

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed|alloc"; then
    echo "$state"
    exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "slurm did not come up; see $state/log" >&2
exit 1
