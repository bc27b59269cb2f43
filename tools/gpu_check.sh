#!/usr/bin/env bash
# The CUDA check for one H200, in one go (under 8 minutes): unpack the carried build
# dependencies, configure and build with CUDA, run the CUDA op conformance and CUDA/NCCL unit
# tests, a training smoke test (GPU bf16 vs CPU f32 loss over the first 50 steps), and the
# benchmark against PyTorch; writes $OUT/gpu_summary.md (paste it into the issue note) and
# the logs next to it.
#
# Prepare here (network machine):   bash tools/gpu_prepare.sh      # fills .gpu-deps/ (~11 MB)
# Run on the GPU (the device tool): run(command="bash tools/gpu_check.sh",
#                                       carry=[".gpu-deps"], timeout_s=600)
# Options through the environment: GPU_CHECK_BENCH=full|quick|off (default full: the 1.5B and
# the small config), GPU_CHECK_JOBS (default: all cores).
#
# Smoke-test tolerance (bf16): for each of the 50 steps |loss_gpu - loss_cpu_f32| <=
# 0.02 * loss_cpu_f32 + 0.02. The CPU bf16 run's distance to CPU f32 is printed beside it as
# the yardstick of what bf16 alone changes.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/gpu-check-out}
mkdir -p "$OUT"
summary=$OUT/gpu_summary.md
jobs=${GPU_CHECK_JOBS:-$(nproc)}
bench_mode=${GPU_CHECK_BENCH:-full}
build=$repo/build-gpu
prefix=/tmp/anvil-gpu-deps
python=${GPU_CHECK_PYTHON:-$(command -v python3)}
start=$(date +%s)
status_line() { printf -- '- %s: %s (%ss)\n' "$1" "$2" "$(($(date +%s) - start))" >>"$summary"; }

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

# ---- 2. configure and build (MPI off: one GPU, one rank; the .debs carry no MPI).
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_ENABLE_MPI=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" "${pkg_config_flag[@]}" >"$OUT/configure.log" 2>&1; then
  status_line "configure" "FAILED (configure.log)"
  tail -30 "$OUT/configure.log"
  exit 1
fi
status_line "configure" "$(grep -o 'anvil summary:.*' "$OUT/configure.log")"
build_start=$(date +%s)
if ! cmake --build "$build" -j "$jobs" >"$OUT/build.log" 2>&1; then
  status_line "build" "FAILED (build.log)"
  grep -E "error|FAILED" "$OUT/build.log" | head -30
  exit 1
fi
status_line "build" "ok in $(($(date +%s) - build_start))s"
"$build/anvil" info >"$OUT/info.log" 2>&1
echo "  - anvil info: $(grep -i cuda "$OUT/info.log" | head -2 | tr '\n' ' ')" >>"$summary"

# ---- 3. conformance and CUDA/NCCL unit tests.
(cd "$build" && ctest -R "backend|comm_nccl" --output-on-failure -j 4 --timeout 300) \
  >"$OUT/ctest.log" 2>&1
ctest_rc=$?
status_line "ctest -R 'backend|comm_nccl'" "$(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
grep -E "^\s*[0-9]+ - .*\((Failed|Timeout|Subprocess)" "$OUT/ctest.log" | head -20 | sed 's/^/  - /' >>"$summary"
grep -h "\[ops\] cuda" "$OUT/ctest.log" | sort -u | head -3 | sed 's/^/  - /' >>"$summary"

# ---- 4. training smoke test: the tiny model, 50 steps, synthetic data, same seed.
smoke_run() {  # name backend dtype
  "$build/anvil" train --backend "$2" --run-dir "$OUT/smoke-$1" --resume never \
    --data.synthetic=true --training.steps=50 --training.eval_steps=0 \
    --checkpoint.every=0 --training.dtype="$3" --logging.every=10 >"$OUT/smoke-$1.log" 2>&1
}
smoke_run cpu-f32 cpu f32 && smoke_run cpu-bf16 cpu bf16 && smoke_run cuda-bf16 cuda bf16
smoke_rc=$?
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
[ $smoke_rc -ne 0 ] && echo "  - a smoke run failed: $(tail -1 "$OUT"/smoke-*.log | grep -i error | head -3)" >>"$summary"

# ---- 5. benchmark (bench/gpu_compare.py writes its own Markdown section).
if [ "$bench_mode" != off ]; then
  elapsed=$(($(date +%s) - start))
  budget=$((460 - elapsed))  # the whole script stays under 8 minutes
  bench_flags=(--anvil "$build/anvil" --time-budget "$budget" --markdown "$OUT/bench.md"
               --json "$OUT/bench.json")
  [ "$bench_mode" = quick ] && bench_flags+=(--quick)
  PYTHONUNBUFFERED=1 "$python" bench/gpu_compare.py "${bench_flags[@]}" >"$OUT/bench.log" 2>&1
  status_line "benchmark" "exit $? (bench.log)"
  [ -f "$OUT/bench.md" ] && { echo; cat "$OUT/bench.md"; } >>"$summary"
fi

echo >>"$summary"
echo "Total: $(($(date +%s) - start)) s" >>"$summary"
cat "$summary"
[ $ctest_rc -eq 0 ] && [ $smoke_rc -eq 0 ]
