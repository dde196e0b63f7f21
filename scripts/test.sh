#!/usr/bin/env bash
# Sets up (scripts/setup.sh: packages, Python with torch, build) and runs every test. Tests
# tagged [gpu] skip themselves on a machine without a GPU: ctest counts them as skipped and
# the end of the run lists each with its reason. Then the node link's tests under
# ThreadSanitizer (scripts/tsan.sh). Extra arguments go to ctest, e.g.
# scripts/test.sh -R integration (and leave out the ThreadSanitizer run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BBCLUSTER_BUILD_DIR:-$here/build}
start=$(date +%s)
"$here/scripts/setup.sh" --all
built=$(date +%s)
echo "[test] setup and build took $((built - start)) s" >&2
# The launchers' tests need a Slurm and an sshd: one-machine ones from Debian's packages (as root).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  "$here/tests/slurm/start.sh" >/dev/null || echo "[test] no Slurm could be started; its test will skip" >&2
  "$here/tests/ssh/start.sh" >/dev/null || echo "[test] no sshd could be started; its test will skip" >&2
fi
# report.html's test renders the page in a headless Chromium (Debian's package).
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  echo "[test] installing chromium for the report.html test" >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >&2 \
    || echo "[test] no chromium could be installed; the report.html rendering test will skip" >&2
fi
cd "$build_dir"
rc=0
# A test that cannot run here exits 77 (ctest: "Skipped", never "Passed") and says why here.
export BB_TEST_SKIP_LOG="$build_dir/skipped_tests.txt"
rm -f "$BB_TEST_SKIP_LOG"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@" || rc=$?
if [ -s "$BB_TEST_SKIP_LOG" ]; then
  echo "[test] $(wc -l < "$BB_TEST_SKIP_LOG") tests skipped, and why:" >&2
  sed 's/^/[test]   /' "$BB_TEST_SKIP_LOG" >&2
fi
echo "[test] tests took $(( $(date +%s) - built )) s" >&2
# The node link's tests again under ThreadSanitizer, in a build of their own; not when ctest
# was given a selection.
if [ $# -eq 0 ]; then
  tsan_started=$(date +%s)
  echo "[test] the node link's tests under ThreadSanitizer (scripts/tsan.sh)" >&2
  "$here/scripts/tsan.sh" || rc=$?
  echo "[test] scripts/tsan.sh took $(( $(date +%s) - tsan_started )) s" >&2
fi
exit $rc
