#!/usr/bin/env bash
# Builds the node link's tests with ThreadSanitizer, in a build folder of its own, and runs
# them: a data race in the link's thread, the node server's or their callers' fails the run
# (exit 66), as does a failed test. scripts/test.sh runs it after ctest. Extra arguments go to
# the test program (Catch2), e.g. scripts/tsan.sh "a link loses*".
#   BBCLUSTER_TSAN_BUILD_DIR  the build folder (default build-tsan/)
#   BBCLUSTER_PYTHON          a Python with torch, whose libtorch CMake finds (default the
#                             environment scripts/setup.sh made); nothing built here links it
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BBCLUSTER_TSAN_BUILD_DIR:-$here/build-tsan}
python=${BBCLUSTER_PYTHON:-${BBCLUSTER_HOME:-$HOME/.cache/bbcluster}/venv/bin/python}
log() { printf '[tsan] %s\n' "$*" >&2; }
[ -x "$python" ] || { log "no Python with torch at $python: run scripts/setup.sh first"; exit 1; }

start=$(date +%s)
# Debug: no -O2 of Release; BBCLUSTER_TSAN adds -fsanitize=thread -O1 -g to every target.
cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBBCLUSTER_TSAN=ON \
  -DBBCLUSTER_PYTHON="$python" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target bb_link_tsan_tests >&2
built=$(date +%s)
log "the build took $((built - start)) s"

# The first report ends the run with exit code 66: a race cannot pass as a run that only
# printed something. CAF and ZeroMQ are Debian's libraries, not instrumented: what they
# synchronise among themselves TSan does not see, and the suppressions name only them.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$here/scripts/tsan.supp ${TSAN_OPTIONS:-}"
rc=0
"$build_dir/tests/bb_link_tsan_tests" "$@" || rc=$?
log "the tests took $(( $(date +%s) - built )) s"
case $rc in
  0) log "no data race reported" ;;
  66) log "ThreadSanitizer reported a data race (above)" ;;
  *) log "the tests failed (exit $rc)" ;;
esac
exit $rc
