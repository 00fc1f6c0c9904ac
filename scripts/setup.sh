#!/usr/bin/env bash
# Installs the Debian packages gradsync needs. Idempotent: does nothing when all are present.
#   scripts/setup.sh          everything: the build, the tests, the benchmarks, the Python package
#   scripts/setup.sh --demo   only what `make demo` needs: the CLI, LibTorch, Fashion-MNIST
set -euo pipefail

# What the CLI (`gradsync train` on the embedded default) needs to build and run.
demo_packages=(
  build-essential cmake ninja-build pkg-config ccache
  zlib1g-dev libssl-dev libcurl4-openssl-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  # LibTorch without OpenBLAS falls back to the reference BLAS, ~25x slower.
  libtorch-dev libopenblas0-pthread
  dataset-fashion-mnist
  # The language model's default corpus (--model gpt --dataset text): plain English text.
  fortunes
)
# The rest: tests, sanitizers and fuzzing, the MPI transport and the peers' baselines, the
# Python package, network emulation.
packages=(
  "${demo_packages[@]}"
  clang libclang-rt-14-dev clang-format libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin libgloo-dev iproute2 tcpdump
  python3-torch
  # The Python package (python/, docs/python.md): its extension, tests and pip install.
  pybind11-dev python3-dev python3-pytest python3-venv python3-pip python3-setuptools python3-wheel
  # scripts/gpu_profile.py's models (tests/python/test_gpu_profile.py runs it on the CPU).
  python3-torchvision
  # The remote data store of the multi-level cache (scripts/data_server.sh, docs/data.md).
  nginx
)
case "${1:-}" in
  --demo) packages=("${demo_packages[@]}") ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
