#!/usr/bin/env bash
# Installs the official OpenAI Node SDK that the contract tests call Conclave with (http/
# contract_node_test.go), at the version pinned in http/testdata/openai-node/package.json and
# package-lock.json, into that folder's node_modules. `npm ci` installs exactly the locked version and
# nothing else; it needs Node.js and npm (scripts/services.sh installs them from Debian when missing).
#
#   scripts/openai-node.sh          install, or leave an install of the pinned version alone
#   scripts/openai-node.sh --force  install again from the lock file
set -euo pipefail

dir="$(cd "$(dirname "$0")/.." && pwd)/http/testdata/openai-node"
log() { printf 'openai-node: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { log "error: node is not installed (scripts/services.sh installs it)"; exit 1; }
command -v npm >/dev/null 2>&1 || { log "error: npm is not installed (scripts/services.sh installs it)"; exit 1; }

pinned=$(node -p 'require(process.argv[1]).dependencies.openai' "$dir/package.json")
installed=$(node -p 'try { require(process.argv[1]).version } catch { "" }' "$dir/node_modules/openai/package.json")
if [ "${1:-}" != --force ] && [ "$installed" = "$pinned" ]; then
  log "openai $pinned already installed in $dir/node_modules"
  exit 0
fi
log "installing openai $pinned into $dir/node_modules (node $(node --version), npm $(npm --version))"
# The folder's .npmrc keeps registry addresses out of the lock file when it is made again.
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
log "installed openai $(node -p 'require(process.argv[1]).version' "$dir/node_modules/openai/package.json")"
