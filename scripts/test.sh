#!/usr/bin/env bash
# Sets up (scripts/setup.sh: packages, Python with torch, build) and runs every test. Tests
# tagged [gpu] skip themselves on a machine without a GPU. Extra arguments go to ctest, e.g.
# scripts/test.sh -R integration.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BBCLUSTER_BUILD_DIR:-$here/build}
start=$(date +%s)
"$here/scripts/setup.sh"
built=$(date +%s)
echo "[test] setup and build took $((built - start)) s" >&2
cd "$build_dir"
rc=0
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@" || rc=$?
echo "[test] tests took $(( $(date +%s) - built )) s" >&2
exit $rc
