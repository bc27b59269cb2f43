#!/usr/bin/env bash
# The CUDA check for one H200, in one go (under 8 minutes): unpack the carried build
# dependencies, configure and build with CUDA, run the CUDA op conformance and CUDA/NCCL unit
# tests, the kernel micro-benchmark (bench/kernels/cuda_kernel_bench: each kernel at the 1.5B
# shapes against the copy bandwidth and GEMM ceiling), a training smoke test (GPU bf16 vs CPU
# f32 loss over the first 50 steps), and the benchmark against PyTorch; writes
# $OUT/gpu_summary.md (paste it into the issue note) and the logs next to it.
#
# Prepare here (network machine):   bash tools/gpu_prepare.sh      # fills .gpu-deps/ (~15 MB)
# Run on the GPU (the device tool): run(command="bash tools/gpu_check.sh",
#                                       carry=[".gpu-deps"], timeout_s=600)
# Options through the environment: GPU_CHECK_BENCH=full|quick|1.5B|off (default full: the 1.5B
# and the small config; 1.5B: that one alone), GPU_CHECK_IMPLS (gpu_compare.py --impls),
# GPU_CHECK_TESTS (the test binaries to run, default all three), GPU_CHECK_KERNELS=off (skip
# the kernel micro-benchmark), GPU_CHECK_DEADLINE (seconds
# the whole script may take, default 460: the benchmark is cut to fit), GPU_CHECK_JOBS (default:
# all cores).
#
# Smoke-test tolerance (bf16): for each of the 50 steps |loss_gpu - loss_cpu_f32| <=
# 0.02 * loss_cpu_f32 + 0.02. The CPU bf16 run's distance to CPU f32 is printed beside it as
# the yardstick of what bf16 alone changes.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# Everything is written under $work; $OUT (what the device tool sends back: at most 8 files)
# gets the summary, the op suite's log and one archive of the rest, checkpoints left out.
OUT=${OUT:-$repo/gpu-check-out}
final_out=$OUT
OUT=/tmp/anvil-gpu-check
rm -rf "$OUT" && mkdir -p "$OUT" "$final_out"
pack_results() {
  cp "$OUT/gpu_summary.md" "$final_out/" 2>/dev/null
  cp "$OUT/test_backend.log" "$final_out/" 2>/dev/null
  tar -C "$OUT" --exclude='*.safetensors' --exclude='checkpoints' -czf "$final_out/gpu_check.tar.gz" .
}
trap pack_results EXIT
summary=$OUT/gpu_summary.md
jobs=${GPU_CHECK_JOBS:-$(nproc)}
bench_mode=${GPU_CHECK_BENCH:-full}
build=$repo/build-gpu
prefix=/tmp/anvil-gpu-deps
python=${GPU_CHECK_PYTHON:-$(command -v python3)}
start=$(date +%s)
deadline=${GPU_CHECK_DEADLINE:-460}
status_line() {
  printf -- '- %s: %s (%ss)\n' "$1" "$2" "$(($(date +%s) - start))" >>"$summary"
  cp "$summary" "$final_out/" 2>/dev/null  # kept even if the device tool cuts the run short
}

{
  echo "# anvil GPU check"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "- nvcc: $(nvcc --version 2>&1 | grep -o 'release [0-9.]*' || echo missing), cmake: $(cmake --version | head -1)"
  echo
  echo "## Steps"
} >"$summary"

# ---- 1. dependencies: dpkg -x into a private prefix (never into /), .pc files re-rooted.
if ! compgen -G ".gpu-deps/*.deb" >/dev/null; then
  status_line "dependencies" "FAILED: .gpu-deps/ is empty (run tools/gpu_prepare.sh and carry .gpu-deps)"
  exit 1
fi
rm -rf "$prefix" && mkdir -p "$prefix"
for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
for pc in "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] && sed -E -i "s#^([A-Za-z_]+)=/usr(/|$)#\1=$prefix/usr\2#" "$pc"
done
export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Header-only packages found by #include alone (CLI11) need the prefix on the compiler's path.
export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
pkg_config_flag=()
if ! command -v pkg-config >/dev/null; then
  pkg_config_flag=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
fi
status_line "dependencies" "unpacked $(ls .gpu-deps/*.deb | wc -l) packages into $prefix"

# NCCL is not part of the CUDA toolkit: where the toolkit lacks it, use the copy PyTorch's
# wheels installed (nvidia-nccl-*), which ships the header and only a versioned library name.
nccl_flags=()
cuda_lib_dir=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
if ! compgen -G "$cuda_lib_dir/libnccl.so*" >/dev/null && ! compgen -G "/usr/lib/x86_64-linux-gnu/libnccl.so*" >/dev/null; then
  nccl_lib=$(find /opt /usr/local /usr/lib -name 'libnccl.so*' 2>/dev/null | sort | head -1)
  nccl_header=$(find /opt /usr/local /usr/include -name nccl.h 2>/dev/null | head -1)
  if [ -n "$nccl_lib" ] && [ -n "$nccl_header" ]; then
    nccl_flags=(-DANVIL_NCCL_LIBRARY="$nccl_lib" -DANVIL_NCCL_INCLUDE_DIR="$(dirname "$nccl_header")")
    export LD_LIBRARY_PATH=$(dirname "$nccl_lib"):$LD_LIBRARY_PATH
  fi
fi
status_line "nccl" "${nccl_flags[*]:-found beside the CUDA toolkit}"

# cuDNN attention: the frontend's headers are carried (.gpu-deps/cudnn-frontend); cuDNN's own
# headers come from the toolkit, else from pip's nvidia-cudnn wheel (PyTorch's), else the carried
# copy; the library is found at run time (ANVIL_CUDNN_PATH is set to the wheel's lib folder when
# the toolkit has none). anvil runs without it, on its own kernels, if none is found.
cudnn_flags=()
[ -f .gpu-deps/cudnn-frontend/include/cudnn_frontend.h ] &&
  cudnn_flags+=(-DANVIL_CUDNN_FRONTEND_INCLUDE_DIR="$repo/.gpu-deps/cudnn-frontend/include")
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
pip_cudnn=$("$python" -c 'import os, nvidia.cudnn as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0])' 2>/dev/null)
if [ ! -f "$cuda_root/include/cudnn_version.h" ]; then
  if [ -n "$pip_cudnn" ] && [ -f "$pip_cudnn/include/cudnn_version.h" ]; then
    cudnn_flags+=(-DANVIL_CUDNN_INCLUDE_DIR="$pip_cudnn/include")
  elif [ -f .gpu-deps/cudnn/include/cudnn_version.h ]; then
    cudnn_flags+=(-DANVIL_CUDNN_INCLUDE_DIR="$repo/.gpu-deps/cudnn/include")
  fi
fi
if ! compgen -G "$cuda_root/lib64/libcudnn.so.9*" >/dev/null && ! ldconfig -p 2>/dev/null | grep -q libcudnn.so.9 &&
   [ -n "$pip_cudnn" ] && [ -f "$pip_cudnn/lib/libcudnn.so.9" ]; then
  export ANVIL_CUDNN_PATH=$pip_cudnn/lib
fi
status_line "cudnn" "build flags: ${cudnn_flags[*]:-toolkit headers}; library: ${ANVIL_CUDNN_PATH:-toolkit or system search}"

# ---- 2. configure and build (MPI off: one GPU, one rank; the .debs carry no MPI).
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_ENABLE_MPI=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" "${pkg_config_flag[@]}" "${nccl_flags[@]}" \
    "${cudnn_flags[@]}" >"$OUT/configure.log" 2>&1; then
  status_line "configure" "FAILED (configure.log)"
  tail -30 "$OUT/configure.log"
  exit 1
fi
status_line "configure" "$(grep -o 'anvil summary:.*' "$OUT/configure.log")"
build_start=$(date +%s)
# Only what the check runs: the CLI, the three test binaries that touch the device and the
# kernel micro-benchmark.
if ! cmake --build "$build" -j "$jobs" --target anvil test_backend test_backend_cuda \
    test_comm_nccl cuda_kernel_bench >"$OUT/build.log" 2>&1; then
  status_line "build" "FAILED (build.log)"
  grep -E "error|FAILED" "$OUT/build.log" | head -30
  exit 1
fi
status_line "build" "ok in $(($(date +%s) - build_start))s"
"$build/anvil" info >"$OUT/info.log" 2>&1
echo "  - anvil info: $(grep -i cuda "$OUT/info.log" | head -2 | tr '\n' ' ')" >>"$summary"

# ---- 3. conformance and CUDA/NCCL unit tests, each binary run directly (ctest would need
# every test binary built). The op driver runs every op on every compiled backend, cuda included.
ctest_rc=0
for binary in ${GPU_CHECK_TESTS:-test_backend test_backend_cuda test_comm_nccl}; do
  path=$(find "$build/tests" -name "$binary" -type f | head -1)
  timeout 300 "$path" --gtest_color=no >"$OUT/$binary.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && ctest_rc=$rc
  status_line "$binary" "exit $rc; $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|^\[  SKIPPED \] [0-9]+' "$OUT/$binary.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$binary.log" | sort -u | head -20 | sed 's/^/  - /' >>"$summary"
done
grep -h "\[ops\] cuda" "$OUT/test_backend.log" | sort -u | head -3 | sed 's/^/  - /' >>"$summary"
# Attention paths forced one by one (tests/backend_cuda/attention_paths_test.cpp), cuDNN's version.
grep -hE "^\[attention\]|CudaAttentionPaths\.[A-Za-z]+ \(|cuDNN (not loadable|attention unavailable|has no plan)" \
  "$OUT/test_backend_cuda.log" 2>/dev/null | sort -u | head -12 | sed 's/^/  - /' >>"$summary"
echo "  - cuda checks printed by the op driver: $(grep -c ' on cuda:' "$OUT/test_backend.log")" >>"$summary"

# ---- 3b. kernel micro-benchmark: every memory-bound kernel, the fused classifier and
# attention at the 1.5B shapes, with the copy bandwidth and GEMM ceiling of this run.
if [ "${GPU_CHECK_KERNELS:-on}" != off ]; then
  timeout 150 "$build/bench/kernels/cuda_kernel_bench" >"$OUT/kernel_bench.md" \
    2>"$OUT/kernel_bench.log"
  status_line "kernel micro-benchmark" "exit $? (kernel_bench.md, kernel_bench.log)"
  { echo; cat "$OUT/kernel_bench.md"; echo; } >>"$summary"
fi

# ---- 4. training smoke test: the tiny model, 50 steps, synthetic data, same seed.
smoke_run() {  # name backend dtype
  timeout 150 "$build/anvil" train --backend "$2" --run-dir "$OUT/smoke-$1" --resume never \
    --data.synthetic=true --training.steps=50 --training.eval_steps=0 \
    --checkpoint.every=0 --training.dtype="$3" --logging.every=10 >"$OUT/smoke-$1.log" 2>&1
}
smoke_rc=0
for run in "cpu-f32 cpu f32" "cpu-bf16 cpu bf16" "cuda-bf16 cuda bf16"; do
  smoke_run $run || smoke_rc=$?
done
"$python" - "$OUT" >>"$summary" 2>&1 <<'EOF'
import json, os, sys
out = sys.argv[1]
def losses(name):
    path = os.path.join(out, f"smoke-{name}", "metrics.jsonl")
    if not os.path.exists(path):
        return None
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {r["step"]: r["loss"] for r in rows if r.get("type") == "train"}
ref, cpu_bf16, gpu = losses("cpu-f32"), losses("cpu-bf16"), losses("cuda-bf16")
if not ref or not gpu:
    print("- smoke test: FAILED, a run wrote no metrics (smoke-*.log)")
    sys.exit(0)
steps = sorted(set(ref) & set(gpu))
bad = [s for s in steps if abs(gpu[s] - ref[s]) > 0.02 * ref[s] + 0.02]
worst = max(steps, key=lambda s: abs(gpu[s] - ref[s]))
yard = max(abs(cpu_bf16[s] - ref[s]) for s in steps if s in cpu_bf16) if cpu_bf16 else float("nan")
verdict = "PASS" if len(steps) == 50 and not bad else "FAIL"
print(f"- smoke test (tiny model, 50 steps, GPU bf16 vs CPU f32): {verdict}; {len(steps)} steps "
      f"compared, {len(bad)} outside |d| <= 0.02*loss+0.02; worst step {worst}: "
      f"{gpu[worst]:.4f} vs {ref[worst]:.4f}; CPU bf16 vs f32 worst |d| {yard:.4f}")
print(f"  - loss at steps 1/10/50: cpu f32 {ref.get(1, float('nan')):.4f}/{ref.get(10, float('nan')):.4f}/"
      f"{ref.get(50, float('nan')):.4f}, cuda bf16 {gpu.get(1, float('nan')):.4f}/"
      f"{gpu.get(10, float('nan')):.4f}/{gpu.get(50, float('nan')):.4f}")
EOF
if [ $smoke_rc -ne 0 ]; then
  for log in "$OUT"/smoke-*.log; do
    grep -i "error" "$log" | tail -n 1 | sed "s#^#  - $(basename "$log"): #" >>"$summary"
  done
fi

# ---- 5. benchmark (bench/gpu_compare.py writes its own Markdown section).
if [ "$bench_mode" != off ]; then
  elapsed=$(($(date +%s) - start))
  budget=$((deadline - elapsed - 60))  # no run starts in the last minute
  bench_flags=(--anvil "$build/anvil" --time-budget "$budget" --markdown "$OUT/bench.md"
               --json "$OUT/bench.json"
               --impls "${GPU_CHECK_IMPLS:-anvil,torch-compile,anvil-offload,torch-eager}"
               --profile)
  [ "$bench_mode" = quick ] && bench_flags+=(--quick)
  [ "$bench_mode" = 1.5B ] && bench_flags+=(--only 1.5B)
  PYTHONUNBUFFERED=1 timeout $((deadline - elapsed)) "$python" bench/gpu_compare.py \
    "${bench_flags[@]}" >"$OUT/bench.log" 2>&1
  status_line "benchmark" "exit $? (bench.log)"
  [ -f "$OUT/bench.md" ] && { echo; cat "$OUT/bench.md"; } >>"$summary"
  # Where anvil's traced step went (the costliest spans of each anvil run).
  grep " span " "$OUT/bench.log" | head -30 | sed 's/^/    /' >>"$summary"
fi

echo >>"$summary"
echo "Total: $(($(date +%s) - start)) s" >>"$summary"
cat "$summary"
[ $ctest_rc -eq 0 ] && [ $smoke_rc -eq 0 ]
