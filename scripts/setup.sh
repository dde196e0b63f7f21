#!/usr/bin/env bash
# Idempotent setup for bbcluster: Debian packages, a Python environment with PyTorch 2.x
# (outside the checkout, reused when present), and the CMake build.
#
#   scripts/setup.sh            install what is missing and build the programs into build/
#                               (bbcluster, bbnode, bbrunner: what the smoke command runs)
#   scripts/setup.sh --all      the same, and build the tests and benchmarks too (scripts/test.sh)
#   scripts/setup.sh --no-build install only
#   BBCLUSTER_PYTHON=/path/to/python scripts/setup.sh
#                               use an existing Python that already has torch (GPU clusters)
#   BBCLUSTER_HOME              where the project environment lives (default ~/.cache/bbcluster)
#   BBCLUSTER_TORCH_VERSION     torch version installed into the environment (default 2.11.0)
#   BBCLUSTER_SKIP_PACKAGES=1   do not install Debian packages (they are there some other way)
#   BBCLUSTER_CMAKE_ARGS        more arguments for cmake, e.g. -DTORCH_CUDA_ARCH_LIST=9.0
#   BBCLUSTER_BUILD_TYPE        CMake build type (default Release, -O2 without debug information)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${BBCLUSTER_HOME:-$HOME/.cache/bbcluster}
torch_version=${BBCLUSTER_TORCH_VERSION:-2.11.0}
build_dir=${BBCLUSTER_BUILD_DIR:-$here/build}

log() { printf '[setup] %s\n' "$*" >&2; }
setup_started=$(date +%s)
# How long since the previous call, for the log of each long step.
step_started=$setup_started
took() { local now; now=$(date +%s); log "$1 took $((now - step_started)) s"; step_started=$now; }

debian_packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libspdlog-dev libfmt-dev
  catch2 libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  python3-dev python3-venv libcurl4-openssl-dev
  openssh-client
  # the sandbox of kernels and compilers (evaluator.sandbox); setpriv is util-linux's
  bubblewrap util-linux
)

install_debian_packages() {
  [ "${BBCLUSTER_SKIP_PACKAGES:-0}" = 1 ] && { log "not installing packages (BBCLUSTER_SKIP_PACKAGES=1)"; return; }
  command -v dpkg-query >/dev/null || { log "not a Debian system: install the packages by hand: ${debian_packages[*]}"; return; }
  local missing=()
  for p in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "Debian packages present"; return; fi
  log "installing ${#missing[@]} Debian packages (a minute or two): ${missing[*]}"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  log "apt-get update"
  $sudo apt-get update -qq
  log "apt-get install"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  took "installing the packages"
}

has_torch() { "$1" -c 'import torch, sys; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' 2>/dev/null; }

python_with_torch() {
  if [ -n "${BBCLUSTER_PYTHON:-}" ]; then
    has_torch "$BBCLUSTER_PYTHON" || { log "BBCLUSTER_PYTHON=$BBCLUSTER_PYTHON has no torch 2.x"; exit 1; }
    echo "$BBCLUSTER_PYTHON"; return
  fi
  local venv=$home/venv
  if [ -x "$venv/bin/python" ] && has_torch "$venv/bin/python"; then
    log "reusing $venv"; echo "$venv/bin/python"; return
  fi
  log "creating $venv from /usr/bin/python3 and installing torch==$torch_version (large download, once)"
  mkdir -p "$home"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  log "downloading and installing PyTorch $torch_version with numpy (a few minutes; pip shows its progress)"
  "$venv/bin/python" -m pip install --progress-bar on "torch==$torch_version" numpy >&2 \
    || "$venv/bin/python" -m pip install --progress-bar on "torch>=2,<3" numpy >&2
  took "installing PyTorch"
  echo "$venv/bin/python"
}

install_debian_packages
python=$(python_with_torch)
log "python: $python ($("$python" -c 'import torch; print("torch", torch.__version__)'))"
# pyarrow reads BackendBench's .parquet for --data (converted once into a .jsonl cache);
# expecttest lets torch's OpInfo database (the opinfo suite) import; pyzmq and msgpack are
# the Python client's (python/client, tested against bbcluster serve).
for pair in pyarrow:pyarrow expecttest:expecttest zmq:pyzmq msgpack:msgpack; do
  module=${pair%%:*} package=${pair#*:}
  if ! "$python" -c "import $module" 2>/dev/null; then
    log "installing $package into $python"
    "$python" -m pip install -q "$package" >&2 || log "$package not installed: see README"
  fi
done

if [ "${1:-}" != "--no-build" ]; then
  step_started=$(date +%s)
  log "configuring the build in $build_dir"
  # shellcheck disable=SC2086
  # Release at -O2, without debug information: half the compile time of RelWithDebInfo for
  # the files that include ATen, and the same speed of the programs (they wait on the device).
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BBCLUSTER_BUILD_TYPE:-Release}" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DBBCLUSTER_PYTHON="$python" ${BBCLUSTER_CMAKE_ARGS:-} >&2
  if [ "${1:-}" = "--all" ]; then
    log "building everything: programs, tests and benchmarks ([done/total] per step)"
    cmake --build "$build_dir" -j "$(nproc)" >&2
  else
    log "building bbcluster, bbnode and bbrunner ([done/total] per step; the tests come with scripts/test.sh)"
    cmake --build "$build_dir" -j "$(nproc)" --target bbcluster bbnode bbrunner >&2
  fi
  took "the build"
  log "ready after $(( $(date +%s) - setup_started )) s"
fi
