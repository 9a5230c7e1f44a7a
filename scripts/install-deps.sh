#!/usr/bin/env bash
# Installs every Debian package berth's build and tests need (and the
# packages given as arguments). Idempotent: does
# nothing (and needs no network) when everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  # a compiler cache every build and clone on the machine shares, and a
  # faster linker (cmake/fast_build.cmake, docs/building.md)
  ccache mold
  libcaf-dev
  # berth tls and TLS between berth processes (CAF's TLS module, caf::openssl, is
  # built from third_party/caf_openssl against libcaf-dev's core and io)
  libssl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev sqlite3
  doctest-dev libcli11-dev
  nlohmann-json3-dev libyaml-cpp-dev
  prometheus-cpp-dev
  libspdlog-dev
  # berthd's allocator (jemalloc): glibc's malloc took a quarter of the
  # leader's CPU registering volumes (bench/README.md, run 13)
  libjemalloc-dev
  libreadline-dev tmux
  python3
  # tests/foreign_plugin/plugin.py, a CSI plugin in Python (integration.foreign_plugin)
  python3-grpcio python3-protobuf python3-grpc-tools
  prometheus
  # tests/integration/test_ui.py drives the web UI in a headless browser
  # over the DevTools protocol (a websocket)
  chromium python3-websocket
)
# Extra packages for one target, e.g. `make fuzz`: clang libclang-rt-14-dev.
PACKAGES+=("$@")

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
