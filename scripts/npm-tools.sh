#!/usr/bin/env bash
# Installs the npm packages the tests use (tests/tools/package.json and its
# lock: the OpenAPI validator of integration.http_api) into DIR, once; npm
# comes from Debian when the machine has none.  usage: npm-tools.sh DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
if [ -f "$dir/node_modules/@apidevtools/swagger-parser/package.json" ] &&
   cmp -s "$src/tests/tools/package-lock.json" "$dir/package-lock.json"; then
  exit 0
fi
if ! command -v npm >/dev/null; then bash "$src/scripts/install-deps.sh" nodejs npm; fi
mkdir -p "$dir"
cp "$src/tests/tools/package.json" "$src/tests/tools/package-lock.json" "$dir/"
npm ci --no-audit --no-fund --prefix "$dir"
