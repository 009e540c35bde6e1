#!/usr/bin/env bash
# Installs LangChain's OpenAI chat model (@langchain/openai, with @langchain/core) that the contract tests call Conclave with (http/contract_clients_test.go), at the
# versions pinned in http/testdata/langchain-node/package.json and package-lock.json, into that folder's
# node_modules, as scripts/openai-node.sh installs OpenAI's SDK. `npm ci` installs exactly the locked
# versions and nothing else; it needs Node.js and npm (scripts/services.sh installs them).
#
#   scripts/langchain-node.sh          install, or leave an install of the pinned version alone
#   scripts/langchain-node.sh --force  install again from the lock file
set -euo pipefail

dir="$(cd "$(dirname "$0")/.." && pwd)/http/testdata/langchain-node"
log() { printf 'langchain-node: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { log "error: node is not installed (scripts/services.sh installs it)"; exit 1; }
command -v npm >/dev/null 2>&1 || { log "error: npm is not installed (scripts/services.sh installs it)"; exit 1; }

pinned=$(node -p 'require(process.argv[1]).dependencies[process.argv[2]]' "$dir/package.json" "@langchain/openai")
installed=$(node -p 'try { require(process.argv[1]).version } catch { "" }' "$dir/node_modules/@langchain/openai/package.json")
if [ "${1:-}" != --force ] && [ "$installed" = "$pinned" ]; then
  log "@langchain/openai $pinned already installed in $dir/node_modules"
  exit 0
fi
log "installing @langchain/openai $pinned into $dir/node_modules (node $(node --version), npm $(npm --version))"
# The folder's .npmrc keeps registry addresses out of the lock file when it is made again.
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
log "installed @langchain/openai $(node -p 'require(process.argv[1]).version' "$dir/node_modules/@langchain/openai/package.json")"
