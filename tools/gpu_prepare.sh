#!/usr/bin/env bash
# Prepares .gpu-deps/: the Debian packages anvil's build needs (headers, CMake/pkg-config files
# and their runtime libraries) for the GPU machine, which has nvcc, CMake and ninja but none of
# our -dev packages and no network. Run here (a Debian bookworm machine with network) before a
# GPU session; tools/gpu_check.sh unpacks the folder with `dpkg -x` into a private prefix there.
# MPI is left out on purpose: the GPU check builds with -DANVIL_ENABLE_MPI=OFF (one GPU, one
# rank), which keeps the carried folder small. Idempotent: an existing .deb is not fetched again.
# Also copied, for cuDNN attention: the cuDNN frontend's headers from .deps/venv
# (scripts/install-deps.sh) into .gpu-deps/cudnn-frontend/include, and this machine's cuDNN 9
# headers (cudnn*.h of the CUDA toolkit) into .gpu-deps/cudnn/include, used there only when
# neither the toolkit nor pip's nvidia-cudnn wheel on the GPU machine has its own (~4 MB).
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
deps_dir="$repo_root/.gpu-deps"

# -dev packages the top-level CMakeLists.txt finds, then the runtime libraries they link to.
packages=(
  libfmt-dev libfmt9
  nlohmann-json3-dev
  libcli11-dev
  libtomlplusplus-dev libtomlplusplus3
  libxxhash-dev libxxhash0
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libutf8proc-dev libutf8proc2
  googletest libgtest-dev libgmock-dev
  libdnnl-dev libdnnl2 ocl-icd-libopencl1
  pkgconf pkgconf-bin libpkgconf3
  libisal-dev libisal2
  zlib1g-dev libzstd-dev libzstd1 liblzma-dev liblzma5
  libcsv-dev libcsv3
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
)

mkdir -p "$deps_dir"
exclude_file="$(git -C "$repo_root" rev-parse --git-path info/exclude 2>/dev/null || echo "$repo_root/.git/info/exclude")"
case "$exclude_file" in /*) ;; *) exclude_file="$repo_root/$exclude_file" ;; esac
mkdir -p "$(dirname "$exclude_file")"
if ! grep -qx '/.gpu-deps/' "$exclude_file" 2>/dev/null; then
  echo '/.gpu-deps/' >>"$exclude_file"
fi

missing=()
for package in "${packages[@]}"; do
  compgen -G "$deps_dir/${package}_*.deb" >/dev/null || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "gpu_prepare: downloading ${#missing[@]} packages into $deps_dir"
  (cd "$deps_dir" && apt-get download "${missing[@]}")
fi

for package in "${packages[@]}"; do
  compgen -G "$deps_dir/${package}_*.deb" >/dev/null ||
    { echo "gpu_prepare: error: $package was not downloaded" >&2; exit 1; }
done

frontend_header=$(compgen -G "$repo_root/.deps/venv/lib/python3*/site-packages/include/cudnn_frontend.h" | head -1 || true)
if [ -z "$frontend_header" ]; then
  echo "gpu_prepare: error: no cuDNN frontend headers in .deps/venv (run scripts/install-deps.sh)" >&2
  exit 1
fi
rm -rf "$deps_dir/cudnn-frontend" && mkdir -p "$deps_dir/cudnn-frontend"
cp -r "$(dirname "$frontend_header")" "$deps_dir/cudnn-frontend/include"
cuda_include=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include
if compgen -G "$cuda_include/cudnn_version.h" >/dev/null; then
  rm -rf "$deps_dir/cudnn" && mkdir -p "$deps_dir/cudnn/include"
  cp "$cuda_include"/cudnn*.h "$deps_dir/cudnn/include/"
else
  echo "gpu_prepare: warning: no cuDNN headers in $cuda_include; the GPU machine must have its own"
fi
echo "gpu_prepare: $(ls "$deps_dir"/*.deb | wc -l) packages and the cuDNN headers, $(du -sh "$deps_dir" | cut -f1) in $deps_dir"
