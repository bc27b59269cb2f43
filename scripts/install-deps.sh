#!/usr/bin/env bash
# Installs the Debian packages anvil's build, tests and demo need. Idempotent: packages that
# are already installed are skipped, and `apt-get update` runs once, only when something is
# missing. Then pyarrow (Apache Arrow's C++ Parquet reader, for Parquet input to anvil prepare;
# Debian 12 packages no Arrow) and the cuDNN frontend's headers (nvidia-cudnn-frontend: the
# header-only C++ graph API behind the CUDA backend's cuDNN attention; its Python dependencies
# are not needed) go into the virtual environment .deps/venv with pip, unless they are there
# already; CMake finds both there. The build itself never touches the network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev                       # unit tests
  nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev libxxhash-dev
  libpcre2-dev                       # Unicode regex (with JIT) for tokenizer pre-splitting
  libutf8proc-dev                    # Unicode normalization (NFC, NFD, NFKC, NFKD) for tokenizers
  libcsv-dev                         # CSV parsing of the MMLU benchmark files
  zlib1g-dev libzstd-dev liblzma-dev # compressed corpora (.gz, .zst, .xz) for anvil prepare
  gzip zstd xz-utils                 # the tests compress their corpora with these
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (Event protobufs)
  libisal-dev                        # their CRC32C (ISA-L's crc32_iscsi)
  libopenblas-dev libdnnl-dev        # GEMM libraries for the optimized CPU backend
  libopenmpi-dev openmpi-bin         # multi-process training and its tests
  fortunes                           # the sample corpus for the demo
  python3-venv python3-pip           # .deps/venv, which holds pyarrow
)
# Its wheel is manylinux_2_28 (built with the C++11 ABI), so g++ links against its libraries.
pyarrow_pin="pyarrow==26.0.1"
cudnn_frontend_pin="nvidia-cudnn-frontend==1.32.0"
venv="$(cd "$(dirname "$0")/.." && pwd)/.deps/venv"

install_pyarrow() {
  if "$venv/bin/python" -c "import pyarrow" 2>/dev/null; then return 0; fi
  echo "install-deps: installing $pyarrow_pin into $venv"
  # Parquet input is optional: without pyarrow the build goes on and says Parquet is OFF.
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "$pyarrow_pin"; }; then
    echo "install-deps: warning: could not install $pyarrow_pin; anvil builds without Parquet input"
  fi
}

install_cudnn_frontend() {
  if compgen -G "$venv/lib/python3*/site-packages/include/cudnn_frontend.h" >/dev/null; then return 0; fi
  echo "install-deps: installing the headers of $cudnn_frontend_pin into $venv"
  # cuDNN attention is optional: without the headers the CUDA backend builds without it.
  if ! { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } ||
     ! "$venv/bin/pip" install -q --no-deps "$cudnn_frontend_pin"; then
    echo "install-deps: warning: could not install $cudnn_frontend_pin; CUDA builds without cuDNN attention"
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  install_pyarrow
  install_cudnn_frontend
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_pyarrow
install_cudnn_frontend
