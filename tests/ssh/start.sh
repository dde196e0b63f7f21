#!/usr/bin/env bash
# Starts an sshd on 127.0.0.1:2222 from Debian's openssh-server that admits one key made here,
# for the ssh launcher's test. Idempotent; prints the ssh command to use. Needs root.
set -euo pipefail
state=${BBCLUSTER_SSH_DIR:-/tmp/bbcluster-ssh}
mkdir -p "$state"
if [ ! -x /usr/sbin/sshd ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >&2 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >&2; }
fi
[ -f "$state/host_key" ] || ssh-keygen -q -t ed25519 -N "" -f "$state/host_key"
[ -f "$state/client_key" ] || ssh-keygen -q -t ed25519 -N "" -f "$state/client_key"
cp "$state/client_key.pub" "$state/authorized_keys"
chmod 600 "$state/authorized_keys"
cat > "$state/sshd_config" <<CONF
Port 2222
ListenAddress 127.0.0.1
HostKey $state/host_key
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
StrictModes no
PidFile $state/sshd.pid
CONF
mkdir -p /run/sshd
if ! { [ -f "$state/sshd.pid" ] && kill -0 "$(cat "$state/sshd.pid")" 2>/dev/null; }; then
  /usr/sbin/sshd -f "$state/sshd_config"
fi
command="ssh -p 2222 -i $state/client_key -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
echo "$command" > "$state/command"
echo "$command"
