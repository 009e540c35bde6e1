#!/usr/bin/env bash
# Installs the Node clients the contract tests call Conclave with, each at the versions pinned in its
# folder's package.json and package-lock.json under http/testdata, into that folder's node_modules:
# the official OpenAI and Anthropic SDKs, the Vercel AI SDK (ai, with @ai-sdk/openai) and LangChain's
# OpenAI chat model (@langchain/openai, with @langchain/core). `npm ci` installs exactly the locked
# versions and nothing else; it needs Node.js and npm (scripts/services.sh installs them from Debian
# when missing).
#
#   scripts/node-clients.sh          install each, or leave an install of the pinned version alone
#   scripts/node-clients.sh --force  install each again from its lock file
set -euo pipefail

testdata="$(cd "$(dirname "$0")/.." && pwd)/http/testdata"
log() { printf 'node-clients: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { log "error: node is not installed (scripts/services.sh installs it)"; exit 1; }
command -v npm >/dev/null 2>&1 || { log "error: npm is not installed (scripts/services.sh installs it)"; exit 1; }

# Each folder, and the package whose pinned version says whether it is installed.
for client in openai-node:openai anthropic-node:@anthropic-ai/sdk aisdk-node:ai langchain-node:@langchain/openai; do
  dir="$testdata/${client%%:*}" pkg="${client#*:}"
  pinned=$(node -p 'require(process.argv[1]).dependencies[process.argv[2]]' "$dir/package.json" "$pkg")
  installed=$(node -p 'try { require(process.argv[1]).version } catch { "" }' "$dir/node_modules/$pkg/package.json")
  if [ "${1:-}" != --force ] && [ "$installed" = "$pinned" ]; then
    log "$pkg $pinned already installed in $dir/node_modules"
    continue
  fi
  log "installing $pkg $pinned into $dir/node_modules (node $(node --version), npm $(npm --version))"
  # The folder's .npmrc keeps registry addresses out of the lock file when it is made again.
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  log "installed $pkg $(node -p 'require(process.argv[1]).version' "$dir/node_modules/$pkg/package.json")"
done
