#!/usr/bin/env bash
# Makes PostgreSQL, Redis and an OpenSSH server available on loopback for Conclave's tests, on a fresh
# Debian machine as on one where they already run: installs the Debian packages that are missing,
# starts what is stopped, creates the test role and database, and leaves running services alone. It
# also installs Node.js and the pinned OpenAI and Anthropic Node SDKs that the contract tests call
# Conclave with (scripts/node-clients.sh).
set -euo pipefail

PGPORT=${PGPORT:-5432}
REDIS_PORT=${REDIS_PORT:-6379}
SSH_PORT=${SSH_PORT:-22}
TEST_DB=${CONCLAVE_TEST_DB:-conclave_test}
TEST_ROLE=${CONCLAVE_TEST_ROLE:-conclave}

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1; then
  as_root() { sudo -n "$@"; }
else
  die "run as root or install sudo: packages and services need root"
fi

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # port, name
  for _ in $(seq 1 50); do
    listening "$1" && return 0
    sleep 0.2
  done
  die "$2 is not listening on 127.0.0.1:$1"
}

missing=()
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
# The dashboard's browser tests drive Debian's headless Chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The contract tests run the Node clients (scripts/node-clients.sh installs them).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PostgreSQL
if listening "$PGPORT"; then
  log "postgresql already listening on $PGPORT"
else
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$version" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    log "creating postgresql $version cluster"
    as_root pg_createcluster "$version" main >/dev/null
  fi
  log "starting postgresql $version"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  wait_for "$PGPORT" postgresql
fi
psql_admin() { as_root runuser -u postgres -- psql -p "$PGPORT" -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$TEST_ROLE'")" != 1 ]; then
  log "creating role $TEST_ROLE"
  psql_admin -c "CREATE ROLE $TEST_ROLE LOGIN PASSWORD '$TEST_ROLE' CREATEDB"
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$TEST_DB'")" != 1 ]; then
  log "creating database $TEST_DB"
  psql_admin -c "CREATE DATABASE $TEST_DB OWNER $TEST_ROLE"
fi

# Redis: nothing kept on disk, loopback only.
if listening "$REDIS_PORT"; then
  log "redis already listening on $REDIS_PORT"
else
  log "starting redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/conclave-tests.log
  wait_for "$REDIS_PORT" redis
fi

# OpenSSH server on loopback. Tests that need a specific user and key start their own sshd from the
# same binary with a throwaway configuration; this one proves the installation works.
if listening "$SSH_PORT"; then
  log "sshd already listening on $SSH_PORT"
else
  log "starting sshd on 127.0.0.1:$SSH_PORT"
  as_root ssh-keygen -A >/dev/null
  as_root mkdir -p /run/sshd
  as_root /usr/sbin/sshd -o ListenAddress=127.0.0.1 -p "$SSH_PORT"
  wait_for "$SSH_PORT" sshd
fi

# The OpenAI and Anthropic Node SDKs, the Vercel AI SDK and LangChain, at the versions the repository
# pins.
"$(dirname "$0")/node-clients.sh"

log "ready: postgresql 127.0.0.1:$PGPORT (database $TEST_DB, role $TEST_ROLE), redis 127.0.0.1:$REDIS_PORT, sshd 127.0.0.1:$SSH_PORT, the OpenAI and Anthropic Node SDKs, the Vercel AI SDK and LangChain"
