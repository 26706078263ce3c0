#!/usr/bin/env bash
# `npm test`: the whole suite, unit and integration, on real etcd, dockerd, registry and Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-test-packages.sh
npm run build
npx tap "$@" dist/test/unit/*.test.js dist/test/integration/*.test.js
