#!/usr/bin/env bash
# The GPU machine's check (docs/gpu_check.md): builds mlip against the machine's PyTorch
# (LibTorch with CUDA) and the carried .gpu-deps/ (tools/gpu_bundle.sh: yaml-cpp, Kokkos,
# GoogleTest, HDF5, CLI11, OpenSSL), runs the GPU tests (ctest -L gpu), the MD benchmark (bench/md_gpu_bench.sh),
# the rest of the suite, the training benchmark (bench/gpu_bench.sh) and a peer's training step on
# the same GPU (bench/mace_gpu_bench.py: MACE), and writes a summary with the logs.
#
# usage: bash tools/gpu_check.sh [--stages build,gpu,kernels,md,suite,bench,peers] [--dry-run] [--python PATH]
#          [--out DIR] [--jobs N] [--build-dir DIR] [--skip-suite] [--skip-bench] [--deadline S]
#          [--bench-args "ARGS"] [--md-args "ARGS"] [--peer-args "ARGS"] [--cmake-args "ARGS"] [--ctest-args "ARGS"] [--run-without-gpu]
#          [--suite-on-gpu] [--fallback-libs missing|all] [--no-isolate]
#
#   --stages LIST  what to do, in this order (default build,gpu,kernels,md,suite,bench,peers): build
#                  (configure and build; incremental), gpu (ctest -L gpu), kernels
#                  (bin/bench_fused_embedding: mlip's CUDA kernels against LibTorch operations,
#                  on the GPU and the CPU), md (bench/md_gpu_bench.sh: MD
#                  steps of md::Potential on the GPU and the CPU), suite (ctest -LE gpu, every
#                  other test, failures recorded without stopping), bench (bench/gpu_bench.sh),
#                  peers (bench/mace_gpu_bench.py with the wheels of .gpu-deps/peers). The
#                  results of earlier calls on the same build folder are kept, so the stages can
#                  be spread over several calls (the device tool allows 10 minutes per call).
#   --dry-run      build and run ctest -L gpu, then stop (also what happens, with a message,
#                  when no CUDA device is visible)
#   --python PATH  the Python whose torch to build against (default: the python3 on PATH that
#                  imports torch, else /opt/torch/.venv/bin/python3)
#   --out DIR      where summary.md, bench.md and logs.tar.gz go (default $OUT/gpu_check when
#                  $OUT is set, else <build>/gpu_check)
#   --jobs N       build and ctest parallelism (default: all CPUs)
#   --build-dir    default build-gpu/ in the repository
#   --deadline S   finish within S seconds of the start: each stage runs under a timeout of what
#                  is left (minus 30 s for the summary), and a stage that cannot start is
#                  reported as not run (use 560 inside a 600 s device call)
#   --bench-args   extra arguments for bench/gpu_bench.sh (e.g. "--cpu-rows none --steps 100")
#   --md-args      extra arguments for bench/md_gpu_bench.sh (e.g. "--sizes 1536 --cpu-rows no")
#   --peer-args    arguments for bench/mace_gpu_bench.py (default "--device cuda --batches 1 4 16")
#   --cmake-args   extra CMake arguments, split at spaces (e.g. "-DCMAKE_EXE_LINKER_FLAGS=...")
#   --ctest-args   extra ctest arguments for the suite stage, split at spaces (e.g. "-R dist_")
#   --gpu-tests RE only the gpu-labelled tests whose name matches RE (ctest -L gpu -R RE)
#   --suite-on-gpu leave the GPU visible to the suite stage (by default it runs with
#                  CUDA_VISIBLE_DEVICES= : the CPU suite; with the GPU visible, every test that
#                  trains with device auto trains on it, and the multi-rank tests put their ranks
#                  on one GPU with NCCL, which NCCL refuses)
#   --run-without-gpu  run the suite and bench stages even where no CUDA device is visible (a
#                  test of this script; the bench then needs --bench-args "--device cpu ...")
#   --fallback-libs  missing (default): link into LD_LIBRARY_PATH only the carried HDF5 and OpenSSL
#                  run-time libraries whose SONAME the system lacks; all: every one (a test of the bundle)
#   --no-isolate   where /usr holds Debian's yaml-cpp/Kokkos/GTest/HDF5/CLI11/OpenSSL/LibTorch (a development
#                  machine), CMake is told to ignore the /usr prefix so that only the carried
#                  copies and the chosen torch are used; this turns that off
# Exit status: 0 when every stage that ran passed (skipped GPU cases included: a dry run), 1
# otherwise, 2 for a usage error.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START=$(date +%s)
STAGES="build,gpu,kernels,md,suite,bench,peers"
DRY=0
PY=""
OUTDIR=""
JOBS="$(nproc 2>/dev/null || echo 4)"
BUILD=""
SKIP_SUITE=0
SKIP_BENCH=0
DEADLINE=0
BENCH_ARGS=""
MD_ARGS=""
PEER_ARGS="--device cuda --batches 1 4 16"
FALLBACK_MODE=missing
ISOLATE=auto
DEPS="$ROOT/.gpu-deps"
EXTRA_CMAKE_ARGS=""
CTEST_ARGS=""
GPU_TESTS=""
NO_GPU_OK=0
SUITE_ON_GPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --stages) STAGES="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --python) PY="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --skip-suite) SKIP_SUITE=1; shift ;;
    --skip-bench) SKIP_BENCH=1; shift ;;
    --deadline) DEADLINE="$2"; shift 2 ;;
    --bench-args) BENCH_ARGS="$2"; shift 2 ;;
    --md-args) MD_ARGS="$2"; shift 2 ;;
    --peer-args) PEER_ARGS="$2"; shift 2 ;;
    --fallback-libs) FALLBACK_MODE="$2"; shift 2 ;;
    --no-isolate) ISOLATE=0; shift ;;
    --deps) DEPS="$2"; shift 2 ;;
    --cmake-args) EXTRA_CMAKE_ARGS="$2"; shift 2 ;;
    --ctest-args) CTEST_ARGS="$2"; shift 2 ;;
    --gpu-tests) GPU_TESTS="$2"; shift 2 ;;
    --run-without-gpu) NO_GPU_OK=1; shift ;;
    --suite-on-gpu) SUITE_ON_GPU=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
BUILD="${BUILD:-$ROOT/build-gpu}"
mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" && pwd)"
STATE="$BUILD/gpu_check_state"   # results of every stage, kept across calls
mkdir -p "$STATE/logs"
if [ -z "$OUTDIR" ]; then
  if [ -n "${OUT:-}" ]; then OUTDIR="$OUT/gpu_check"; else OUTDIR="$BUILD/gpu_check"; fi
fi
mkdir -p "$OUTDIR"
LOG="$STATE/logs"
EXIT=0

say() { echo "[gpu_check $(date +%H:%M:%S)] $*"; }
elapsed() { echo $(( $(date +%s) - START )); }
# Seconds a stage may take: what is left before the deadline minus the summary's margin.
budget() {
  if [ "$DEADLINE" -gt 0 ]; then echo $(( DEADLINE - $(elapsed) - 30 )); else echo 86400; fi
}
# record <stage> <result> <seconds> <text>: one line of the stage table, kept across calls.
record() { printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$(date -u +%H:%M:%S)" "$4" > "$STATE/stage_$1.md"; }

# ---------------------------------------------------------------------------------------------
# The machine: Python with torch, the GPU, nvcc, compilers, CMake, ninja.
# ---------------------------------------------------------------------------------------------
if [ -z "$PY" ]; then
  for c in "$(command -v python3 || true)" /opt/torch/.venv/bin/python3 "$(command -v python || true)"; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import torch' >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
if [ -z "$PY" ] || ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "gpu_check.sh: no Python with torch found (pass --python PATH)" >&2; exit 1
fi
PYBIN="$(dirname "$PY")"
# The venv's tools (cmake, ninja and torchrun from pip) when they are not on PATH.
export PATH="$PATH:$PYBIN"
TORCH_INFO="$("$PY" - <<'EOF' 2>&1
import torch, torch.utils
print("prefix=" + torch.utils.cmake_prefix_path)
print("version=" + torch.__version__)
print("cuda=" + str(torch.version.cuda))
ok = torch.cuda.is_available()
print("available=" + ("1" if ok else "0"))
print("devices=" + str(torch.cuda.device_count() if ok else 0))
if ok:
    p = torch.cuda.get_device_properties(0)
    print("device=%s, %.1f GiB, sm_%d%d" % (p.name, p.total_memory / 2**30, p.major, p.minor))
EOF
)"
tinfo() { grep "^$1=" <<<"$TORCH_INFO" | head -1 | cut -d= -f2-; }
TORCH_PREFIX="$(tinfo prefix)"
[ -n "$TORCH_PREFIX" ] || { echo "gpu_check.sh: $PY could not report torch's CMake prefix:" >&2; echo "$TORCH_INFO" >&2; exit 1; }
CUDA_OK="$(tinfo available)"
SMI="$(command -v nvidia-smi || true)"
[ -z "$SMI" ] && [ -x /usr/local/nvidia/bin/nvidia-smi ] && SMI=/usr/local/nvidia/bin/nvidia-smi
SMI_TEXT="no nvidia-smi"
if [ -n "$SMI" ]; then
  SMI_TEXT="$("$SMI" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4)"
fi
if [ "$CUDA_OK" != 1 ] && [ "$NO_GPU_OK" = 0 ]; then DRY=1; fi
# The CUDA toolkit (LibTorch's CMake package looks it up).
NVCC=""
for c in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc \
         "$(dirname "$(dirname "$TORCH_PREFIX")")"/../nvidia/cu*/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC="$(readlink -f "$c")"; break; fi
done
CUDA_ROOT=""
[ -n "$NVCC" ] && CUDA_ROOT="$(dirname "$(dirname "$NVCC")")"
TORCHRUN="$PYBIN/torchrun"
if [ ! -x "$TORCHRUN" ]; then
  TORCHRUN="$BUILD/torchrun"
  printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$PY" > "$TORCHRUN"
  chmod +x "$TORCHRUN"
fi
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
CXX_VERSION="$( (c++ --version || g++ --version) 2>/dev/null | head -1)"

{
  echo "date:        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host:        $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname) ($(uname -m), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/2^20}' /proc/meminfo), kernel $(uname -r))"
  echo "os:          $( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || echo unknown); $(ldd --version 2>/dev/null | head -1)"
  echo "nvidia-smi:  $SMI_TEXT"
  echo "python:      $PY ($("$PY" --version 2>&1))"
  echo "torch:       $(tinfo version) (CUDA $(tinfo cuda)); cuda available: $CUDA_OK; $(tinfo devices) device(s); $(tinfo device)"
  echo "torch cmake: $TORCH_PREFIX"
  echo "torchrun:    $TORCHRUN"
  echo "nvcc:        ${NVCC:-not found} $([ -n "$NVCC" ] && "$NVCC" --version | tail -1)"
  echo "c++:         ${CXX_VERSION:-not found}"
  echo "cmake:       $(command -v cmake || echo 'not found') $(cmake --version 2>/dev/null | head -1)"
  echo "ninja:       $(command -v ninja || echo 'not found (Unix Makefiles)') $(ninja --version 2>/dev/null)"
  echo "git:         $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') $(git -C "$ROOT" status --porcelain 2>/dev/null | grep -c . || true) changed file(s)"
  echo "deps:        $DEPS ($(du -sh "$DEPS" 2>/dev/null | cut -f1))"
} > "$STATE/env.txt"
cat "$STATE/env.txt"

# ---------------------------------------------------------------------------------------------
# The carried dependencies: LD_LIBRARY_PATH, the HDF5 run-time fallback, ASE for the Python tests.
# ---------------------------------------------------------------------------------------------
DEPS_USR="$DEPS/root/usr"
DEPS_LIB="$DEPS_USR/lib/x86_64-linux-gnu"
if [ ! -d "$DEPS_LIB" ]; then
  echo "gpu_check.sh: $DEPS_LIB is missing: run bash tools/gpu_bundle.sh on the development machine and carry .gpu-deps" >&2
  exit 1
fi
FALLBACK_DIR="$BUILD/deps-fallback"
rm -rf "$FALLBACK_DIR"; mkdir -p "$FALLBACK_DIR"
SYSTEM_SONAMES="$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | awk 'NR > 1 {print $1}' | sort -u)"
system_has() {
  grep -qxF "$1" <<<"$SYSTEM_SONAMES" && return 0
  local d
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib; do
    [ -e "$d/$1" ] && return 0
  done
  return 1
}
linked=()
for f in "$DEPS"/fallback/*; do
  [ -f "$f" ] || continue
  so="$(basename "$f")"
  if [ "$FALLBACK_MODE" = all ] || ! system_has "$so"; then ln -s "$f" "$FALLBACK_DIR/$so"; linked+=("$so"); fi
done
export LD_LIBRARY_PATH="$DEPS_LIB:$FALLBACK_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "carried run-time libraries used ($FALLBACK_MODE): ${linked[*]:-none (the system has every SONAME)}" | tee -a "$STATE/env.txt"
if ! "$PY" -c 'import ase' >/dev/null 2>&1; then
  whl="$(ls "$DEPS"/wheels/ase-*.whl 2>/dev/null | head -1)"
  if [ -n "$whl" ]; then
    rm -rf "$BUILD/python-ase"
    "$PY" -m zipfile -e "$whl" "$BUILD/python-ase" && export PYTHONPATH="$BUILD/python-ase${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
echo "python-side tests: $("$PY" -c 'import ase, numpy, scipy; print("ase", ase.__version__, "from", ase.__file__.rsplit("/", 2)[0], "; numpy", numpy.__version__, "; scipy", scipy.__version__)' 2>&1 | tail -1)" | tee -a "$STATE/env.txt"

# Where the development machine's /usr holds Debian's copies of what is carried, CMake must not
# see them: the GPU machine has none, and the dry run must prove that the carried ones suffice.
if [ "$ISOLATE" = auto ]; then
  ISOLATE=0
  for p in /usr/include/yaml-cpp /usr/include/trilinos /usr/include/gtest /usr/include/hdf5 /usr/include/CLI \
           /usr/include/openssl /usr/lib/x86_64-linux-gnu/libtorch.so /usr/lib/x86_64-linux-gnu/cmake/yaml-cpp; do
    [ -e "$p" ] && ISOLATE=1
  done
fi

HDF5_ROOT_DIR="$DEPS_LIB/hdf5/serial"
CMAKE_ARGS=("${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX;$DEPS_USR"
  # FindOpenSSL searches a pkg-config answer (which may be the system's) before the prefix path.
  "-DOPENSSL_ROOT_DIR=$DEPS_USR"
  -DMLIP_ENABLE_CUDA=ON -DMLIP_MPI=OFF -DMLIP_LAMMPS=OFF
  "-DMLIP_TEST_PYTHON=$PY" "-DMLIP_TORCHRUN=$TORCHRUN")
if [ -e "$HDF5_ROOT_DIR/include/hdf5.h" ]; then
  CMAKE_ARGS+=(-DMLIP_HDF5=ON "-DHDF5_ROOT=$HDF5_ROOT_DIR" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON)
else
  CMAKE_ARGS+=(-DMLIP_HDF5=OFF)
fi
[ -n "$CUDA_ROOT" ] && CMAKE_ARGS+=("-DCUDAToolkit_ROOT=$CUDA_ROOT" "-DCMAKE_CUDA_COMPILER=$NVCC")
# Both /usr and / (Debian 12 is merged-/usr: /lib is /usr/lib, and CMake derives the prefix /
# from /bin on PATH).
[ "$ISOLATE" = 1 ] && CMAKE_ARGS+=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/")
# shellcheck disable=SC2206
[ -n "$EXTRA_CMAKE_ARGS" ] && CMAKE_ARGS+=($EXTRA_CMAKE_ARGS)

# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------
# record_toolchain: the C++ compiler CMake used (a wrapper script is printed: the first GPU
# machine's /opt/gcc/bin/g++ linked executables without libstdc++ among their own libraries, so
# that they bound pip LibTorch's copies of std::filesystem), how it links, and where mlip's and a
# test's std::filesystem calls land (tests/test_std_binding.cpp; docs/gpu_check.md).
record_toolchain() {
  local cxx
  cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
  echo "CXX (environment): ${CXX:-unset}; CMAKE_CXX_COMPILER: $cxx"
  ls -la "$cxx" 2>&1; readlink -f "$cxx" 2>&1
  if [ -f "$cxx" ] && head -c 2 "$cxx" | grep -q '#!'; then echo "--- $cxx is a script:"; head -80 "$cxx"; echo "---"; fi
  echo "libstdc++ it names: $("$cxx" -print-file-name=libstdc++.so.6 2>&1)"
  echo "link options: $(grep -m1 -o 'push-state[^ ]* [^ ]*' "$BUILD/build.ninja" 2>/dev/null || echo '?')"
  echo "--- a trivial link, verbose:"
  local tmp; tmp="$(mktemp -d)"
  printf '#include <filesystem>\nint main() { return std::filesystem::exists("/") ? 0 : 1; }\n' > "$tmp/t.cpp"
  "$cxx" -v -Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state "$tmp/t.cpp" -o "$tmp/t" 2>&1 | grep -E 'collect2|/ld ' | tr ' ' '\n' | grep -nE 'stdc|as-needed|state|static|\.o$' | head -40
  rm -rf "$tmp"
  echo "--- NEEDED of bin/mlip:"; readelf -d "$BUILD/bin/mlip" 2>&1 | grep NEEDED
  echo "--- NEEDED of tests/test_std_binding:"; readelf -d "$BUILD/tests/test_std_binding" 2>&1 | grep NEEDED
}

stage_build() {
  local t0=$(date +%s) b rc
  b=$(budget)
  if [ "$b" -lt 60 ]; then record build "not run" 0 "deadline"; return 1; fi
  # Configured once per set of arguments (cmake --build reconfigures by itself when a
  # CMakeLists.txt changes): a later call on a warm machine goes straight to the build.
  local args_id
  args_id="$(printf '%s\n' "${CMAKE_ARGS[@]}" "$LD_LIBRARY_PATH" | sha256sum | cut -c1-16)"
  if [ -f "$BUILD/CMakeCache.txt" ] && [ -f "$BUILD/build.ninja" -o -f "$BUILD/Makefile" ] && [ -f "$STATE/found.md" ] &&
     [ "$(cat "$STATE/configured" 2>/dev/null)" = "$args_id" ]; then
    say "configure: done before with the same arguments (build-gpu/CMakeCache.txt)"
    rc=0
  else
    # A fresh cache: values found with other arguments must not survive.
    rm -f "$STATE/configured" "$BUILD/CMakeCache.txt"
    say "configure: cmake ${CMAKE_ARGS[*]}"
    timeout -k 10 "$b" cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}" > "$LOG/configure.log" 2>&1
    rc=$?
  fi
  if [ $rc != 0 ]; then
    tail -40 "$LOG/configure.log"
    record build "FAILED (configure, exit $rc)" $(( $(date +%s) - t0 )) "see configure.log"
    return 1
  fi
  # What CMake found, and whether it is the carried or the chosen copy.
  local torch_root ok=1
  torch_root="$(dirname "$(dirname "$TORCH_PREFIX")")"
  {
    echo "| what | found | from |"
    echo "|---|---|---|"
    local var val want src
    for var in TORCH_LIBRARY c10_LIBRARY C10_CUDA_LIBRARY yaml-cpp_DIR GTest_DIR MLIP_KOKKOS_INCLUDE_DIR \
               MLIP_KOKKOS_CORE_LIB Kokkos_DIR CLI11_DIR OPENSSL_INCLUDE_DIR OPENSSL_CRYPTO_LIBRARY HDF5_C_LIBRARY_hdf5 HDF5_hdf5_LIBRARY_RELEASE HDF5_C_INCLUDE_DIR CUDAToolkit_NVCC_EXECUTABLE; do
      val="$(grep -E "^$var:[A-Z]+=" "$BUILD/CMakeCache.txt" | head -1 | cut -d= -f2-)"
      [ -n "$val" ] || continue
      case "$var" in
        TORCH_LIBRARY|c10_LIBRARY|C10_CUDA_LIBRARY) want="$torch_root" ;;
        CUDAToolkit_NVCC_EXECUTABLE) want="${CUDA_ROOT:-/}" ;;
        Kokkos_DIR) want="NOTFOUND" ;;
        *) want="$DEPS" ;;
      esac
      src="ok"
      if [ "$var" = Kokkos_DIR ]; then
        # Debian's Kokkos config is broken and removed from the bundle: cmake/MlipKokkos.cmake
        # falls back to the headers and library (the MLIP_KOKKOS_* rows).
        case "$val" in
          *NOTFOUND) src="no config (removed from the bundle): cmake/MlipKokkos.cmake's fallback" ;;
          *) src="a config outside the bundle (unused when the MLIP_KOKKOS_* rows are there)" ;;
        esac
      else
        case "$val" in
          "$want"*) ;;
          *) src="NOT the expected copy (expected under $want)"; ok=0 ;;
        esac
      fi
      echo "| $var | \`$val\` | $src |"
    done
  } > "$STATE/found.md"
  grep -E "^-- (mlip|  )|Kokkos|yaml-cpp|HDF5|Found (GTest|Torch|CUDA)" "$LOG/configure.log" | head -30
  cat "$STATE/found.md"
  if ! grep -q "^| MLIP_KOKKOS_INCLUDE_DIR " "$STATE/found.md" && grep -q "^| Kokkos_DIR .*outside" "$STATE/found.md"; then
    ok=0  # a Kokkos config from outside the bundle was used
  fi
  if [ "$ok" = 0 ]; then
    record build "FAILED (configure found a wrong copy)" $(( $(date +%s) - t0 )) "see the table of what was found"
    return 1
  fi
  echo "$args_id" > "$STATE/configured"
  say "build: cmake --build -j $JOBS (log: build.log)"
  b=$(budget)
  timeout -k 10 "$b" cmake --build "$BUILD" -j "$JOBS" > "$LOG/build.log" 2>&1
  rc=$?
  if [ $rc != 0 ]; then
    grep -E "error|Error" "$LOG/build.log" | head -30
    tail -20 "$LOG/build.log"
    record build "FAILED (build, exit $rc$([ $rc = 124 ] && echo ': deadline'))" $(( $(date +%s) - t0 )) \
      "$(grep -m1 -E 'error:' "$LOG/build.log" | cut -c1-200 | tr '|' '/')"
    return 1
  fi
  # Every shared library of mlip resolves (with the carried ones on LD_LIBRARY_PATH).
  if command -v ldd >/dev/null; then ldd "$BUILD/bin/mlip" > "$LOG/ldd-mlip.txt" 2>&1; else echo "(no ldd)" > "$LOG/ldd-mlip.txt"; fi
  if grep -q "=> not found" "$LOG/ldd-mlip.txt"; then
    grep "=> not found" "$LOG/ldd-mlip.txt"
    record build "FAILED (unresolved libraries)" $(( $(date +%s) - t0 )) "$(grep '=> not found' "$LOG/ldd-mlip.txt" | tr '\n' ' ' | tr '|' '/')"
    return 1
  fi
  "$BUILD/bin/mlip" --version > "$LOG/mlip-version.txt" 2>&1
  record_toolchain > "$LOG/toolchain.txt" 2>&1
  local summary
  summary="$(sed -n '/following features have been enabled/,/^--/p' "$LOG/configure.log" | grep -E '^ *\* ' |
             sed 's/^ *\* //' | cut -d, -f1 | tr '\n' ' ' | sed 's/ $//')"
  record build ok $(( $(date +%s) - t0 )) "$(head -1 "$LOG/mlip-version.txt"); $(grep -c 'Building CXX' "$LOG/build.log") files compiled; features: ${summary:-?}"
  return 0
}

# run_ctest <stage> <ctest arguments...>: runs ctest in the build folder under the deadline and
# writes $STATE/tests_<stage>.md (one row per test) from its output.
run_ctest() {
  local stage="$1"; shift
  local t0=$(date +%s) b rc
  b=$(budget)
  if [ "$b" -lt 30 ]; then record "$stage" "not run" 0 "deadline"; return 1; fi
  say "ctest $* (log: ctest-$stage.log)"
  if [ "$stage" = suite ] && [ "$SUITE_ON_GPU" = 0 ]; then
    # The CPU suite: device auto means the CPU, as on a machine without a GPU.
    (cd "$BUILD" && CUDA_VISIBLE_DEVICES= timeout -k 15 "$b" ctest "$@") > "$LOG/ctest-$stage.log" 2>&1
  else
    (cd "$BUILD" && timeout -k 15 "$b" ctest "$@") > "$LOG/ctest-$stage.log" 2>&1
  fi
  rc=$?
  "$PY" - "$LOG/ctest-$stage.log" "$STATE/tests_$stage.md" "$STATE/counts_$stage.txt" <<'EOF'
import re, sys
log, out, counts = sys.argv[1:4]
text = open(log, errors="replace").read()
rows, seen = [], {}
pat = re.compile(r"^\s*\d+/\d+ Test\s+#(\d+): (\S+) \.*\s*(\**)([^\n]*?)\s+([\d.]+) sec", re.M)
for m in pat.finditer(text):
    num, name, _, status, secs = m.groups()
    seen[num] = name
    rows.append([name, status.strip(), secs, num])
def out_of(num):
    # ctest -V prefixes each line of test #num with "num: "; --output-on-failure prints it after the result line
    lines = [l[len(num) + 2:] for l in text.splitlines() if l.startswith(num + ": ")]
    return lines
def note(name, num, status):
    lines = out_of(num)
    if not lines:
        block = re.search(r"Test\s+#%s: %s .*?\n(.*?)(?=^\s*(?:Start\s+\d+:|\d+/\d+ Test|\d+%% tests passed)|\Z)"
                          % (num, re.escape(name)), text, re.S | re.M)
        lines = block.group(1).splitlines() if block else []
    body = "\n".join(lines)
    skipped = re.search(r"\[  SKIPPED \] (\d+) test", body)
    passed = re.search(r"\[  PASSED  \] (\d+) test", body)
    bits = []
    if passed: bits.append(passed.group(1) + " gtest cases passed")
    if skipped:
        why = re.search(r"Skipped\s*\n?(.*)", body)
        bits.append(skipped.group(1) + " skipped" + (": " + why.group(1).strip() if why and why.group(1).strip() else ""))
    if status != "Passed":
        failed = re.findall(r"^\[  FAILED  \] (\S+)(?: \(\d+ ms\))?$", body, re.M)
        if failed: bits.append("failed: " + ", ".join(sorted(set(failed))))
        runs = re.findall(r"^\[ RUN      \] (\S+)", body, re.M)
        done = set(re.findall(r"^\[ +(?:OK|FAILED|SKIPPED) +\] (\S+) \(", body, re.M))
        if runs and runs[-1] not in done: bits.append("crashed in " + runs[-1])
        env = None
        if "needs torch, ase and numpy" in body: env = "environment: the test Python lacks ase/torch/numpy"
        elif "No such file or directory" in body and "/usr/bin/python3" in body: env = "environment: no /usr/bin/python3"
        if env: bits.append(env)
        # The first FAIL line, else the last line that looks like an error, else the last line.
        hit = None
        fails = [l.strip() for l in lines if re.search(r"FAIL:|Failure|\[  FAILED  \]", l)]
        errors = [l.strip() for l in lines if re.search(r"error|Error|what\(\)|Assertion|tolerance|expected", l)]
        if fails: hit = fails[0]
        elif errors: hit = errors[-1]
        if hit is None:
            rest = [l.strip() for l in lines if l.strip()]
            hit = rest[-1] if rest else None
        if hit: bits.append("log: " + hit[:200])
    return "; ".join(bits).replace("|", "/")
n_pass = sum(1 for r in rows if r[1] == "Passed")
n_skip = sum(1 for r in rows if r[1] in ("Skipped", "Not Run") )
n_fail = len(rows) - n_pass - n_skip
with open(out, "w") as f:
    f.write("| test | result | s | notes |\n|---|---|---:|---|\n")
    for name, status, secs, num in rows:
        f.write("| %s | %s | %s | %s |\n" % (name, status, secs, note(name, num, status)))
total = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
with open(counts, "w") as f:
    f.write("%d passed, %d failed, %d skipped/not run%s" % (n_pass, n_fail, n_skip,
            "" if total else " (ctest did not finish: no final count)"))
EOF
  local counts; counts="$(cat "$STATE/counts_$stage.txt" 2>/dev/null || echo '?')"
  local result=ok
  if [ $rc = 124 ] || [ $rc = 137 ]; then result="CUT (deadline)"; elif [ $rc != 0 ]; then result="FAILED"; fi
  if [ "$stage" = gpu ] && [ "$CUDA_OK" = 1 ] && [ "$result" = ok ] && grep -q "SKIPPED \]" "$LOG/ctest-$stage.log"; then
    result="FAILED (CUDA cases skipped although torch sees a device)"
  fi
  local how="ctest $*"
  [ "$stage" = suite ] && [ "$SUITE_ON_GPU" = 0 ] && how="CUDA_VISIBLE_DEVICES= $how"
  record "$stage" "$result" $(( $(date +%s) - t0 )) "$how: $counts"
  tail -5 "$LOG/ctest-$stage.log"
  [ "$result" = ok ]
}

stage_bench() {
  local t0=$(date +%s) b rc
  b=$(budget)
  if [ "$b" -lt 30 ]; then record bench "not run" 0 "deadline"; return 1; fi
  say "bench/gpu_bench.sh $BENCH_ARGS (log: bench.log)"
  rm -rf "$LOG/bench-runs"
  # shellcheck disable=SC2086
  timeout -k 15 "$b" bash "$ROOT/bench/gpu_bench.sh" --build-dir "$BUILD" --python "$PY" --torchrun "$TORCHRUN" \
    --out "$STATE/bench.md" --logs "$LOG/bench-runs" $BENCH_ARGS 2>&1 | tee "$LOG/bench.log"
  rc=${PIPESTATUS[0]}
  local rows; rows=$(grep -cE '^\| (se_e2_a|equivariant) ' "$LOG/bench.log" || true)
  local failed; failed=$(grep -c '| failed |' "$LOG/bench.log" || true)
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    # The table so far (the script writes --out at its end).
    cp "$LOG/bench.log" "$STATE/bench.md"
    record bench "CUT (deadline)" $(( $(date +%s) - t0 )) "$rows rows before the cut"
    return 1
  elif [ $rc != 0 ]; then
    record bench "FAILED (exit $rc)" $(( $(date +%s) - t0 )) "see bench.log"; return 1
  fi
  record bench ok $(( $(date +%s) - t0 )) "$rows rows, $failed failed run(s) (see notes)"
}

stage_md() {
  local t0=$(date +%s) b rc
  b=$(budget)
  if [ "$b" -lt 30 ]; then record md "not run" 0 "deadline"; return 1; fi
  say "bench/md_gpu_bench.sh $MD_ARGS (log: md.log)"
  rm -rf "$LOG/md-runs"
  # shellcheck disable=SC2086
  timeout -k 15 "$b" bash "$ROOT/bench/md_gpu_bench.sh" --build-dir "$BUILD" --out "$STATE/md.md" \
    --logs "$LOG/md-runs" $MD_ARGS 2>&1 | tee "$LOG/md.log"
  rc=${PIPESTATUS[0]}
  local rows; rows=$(grep -cE '^\| (se_e2_a|equivariant) ' "$LOG/md.log" || true)
  local failed; failed=$(grep -c '| failed' "$LOG/md.log" || true)
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    cp "$LOG/md.log" "$STATE/md.md"
    record md "CUT (deadline)" $(( $(date +%s) - t0 )) "$rows rows before the cut"
    return 1
  elif [ $rc != 0 ]; then
    record md "FAILED (exit $rc)" $(( $(date +%s) - t0 )) "see md.log"; return 1
  fi
  record md ok $(( $(date +%s) - t0 )) "$rows rows, $failed failed"
  [ "$failed" = 0 ]
}

# mlip's own CUDA kernels against LibTorch operations (bin/bench_fused_embedding; docs/fused_kernels.md
# "Measuring it"), on the GPU and, for the record, the CPU: one table row per method and size.
stage_kernels() {
  local t0=$(date +%s) b rc=0 device pairs precision devices=cpu
  b=$(budget)
  if [ "$b" -lt 30 ]; then record kernels "not run" 0 "deadline"; return 1; fi
  [ "$CUDA_OK" = 1 ] && devices="cuda cpu"
  say "bin/bench_fused_embedding on $devices (log: kernels.log)"
  : > "$LOG/kernels.log"
  for device in $devices; do
    for precision in float32 float64; do
      for pairs in 35000 140000; do
        [ "$device" = cpu ] && [ "$pairs" != 35000 ] && continue
        b=$(budget)
        if [ "$b" -lt 5 ]; then
          rc=1; echo "deadline: $device $precision $pairs not run" >> "$LOG/kernels.log"; continue
        fi
        timeout -k 5 "$b" "$BUILD/bin/bench_fused_embedding" "$device" "$pairs" 20 "$precision" \
          >> "$LOG/kernels.log" 2>&1 || rc=1
      done
    done
  done
  {
    echo "| method | device | dtype | pairs | median µs | ns per pair | notes |"
    echo "|---|---|---|---:|---:|---:|---|"
    sed -nE 's/^method=([^ ]+) device=([^ ]+) dtype=([^ ]+) pairs=([^ ]+) median_us=([^ ]+) ns_per_pair=([^ ]+) ?(.*)$/| \1 | \2 | \3 | \4 | \5 | \6 | \7 |/p' \
      "$LOG/kernels.log"
  } > "$STATE/kernels.md"
  local rows; rows=$(grep -c '^method=' "$LOG/kernels.log" || true)
  if [ $rc != 0 ]; then record kernels "FAILED" $(( $(date +%s) - t0 )) "$rows rows; see kernels.log"; return 1; fi
  record kernels ok $(( $(date +%s) - t0 )) "$rows rows"
}

# The peer: MACE's training step (bench/mace_gpu_bench.py), with the carried wheels of the
# packages this Python lacks unpacked into <build>/python-peers.
stage_peers() {
  local t0=$(date +%s) b rc site="$BUILD/python-peers" used=() whl dist module
  b=$(budget)
  if [ "$b" -lt 30 ]; then record peers "not run" 0 "deadline"; return 1; fi
  rm -rf "$site"; mkdir -p "$site"
  for whl in "$DEPS"/peers/*.whl; do
    [ -f "$whl" ] || continue
    dist="$(basename "$whl" | cut -d- -f1)"
    module="$dist"; [ "$dist" = mace_torch ] && module=mace
    if ! "$PY" -c "import $module" >/dev/null 2>&1; then "$PY" -m zipfile -e "$whl" "$site"; used+=("$dist"); fi
  done
  say "bench/mace_gpu_bench.py $PEER_ARGS (log: peers.log; wheels unpacked: ${used[*]:-none})"
  # shellcheck disable=SC2086
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout -k 15 "$b" "$PY" "$ROOT/bench/mace_gpu_bench.py" $PEER_ARGS \
    2>&1 | tee "$LOG/peers.log"
  rc=${PIPESTATUS[0]}
  grep -E '^(MACE|\|)' "$LOG/peers.log" > "$STATE/peers.md"
  local rows; rows=$(grep -c '^| MACE' "$STATE/peers.md" || true)
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    record peers "CUT (deadline)" $(( $(date +%s) - t0 )) "$rows rows before the cut"; return 1
  elif [ $rc != 0 ]; then
    record peers "FAILED (exit $rc)" $(( $(date +%s) - t0 )) "$rows rows; see peers.log"; return 1
  fi
  record peers ok $(( $(date +%s) - t0 )) "$rows rows"
}

write_summary() {
  local s="$OUTDIR/summary.md"
  rm -f "$OUTDIR/summary.md" "$OUTDIR/bench.md" "$OUTDIR/logs.tar.gz"
  {
    echo "# mlip GPU check (tools/gpu_check.sh)"
    echo
    echo '```'
    cat "$STATE/env.txt"
    echo '```'
    echo
    echo "## Stages"
    echo
    echo "| stage | result | s | at (UTC) | details |"
    echo "|---|---|---:|---|---|"
    for st in build gpu kernels md suite bench peers; do
      if [ -f "$STATE/stage_$st.md" ]; then cat "$STATE/stage_$st.md"; else echo "| $st | not run | | | |"; fi
    done
    echo
    if [ -f "$STATE/found.md" ]; then echo "## What CMake found"; echo; cat "$STATE/found.md"; echo; fi
    if [ -f "$STATE/tests_gpu.md" ]; then echo "## GPU tests (ctest -L gpu)"; echo; cat "$STATE/tests_gpu.md"; echo; fi
    if [ -f "$STATE/tests_suite.md" ]; then
      echo "## The rest of the suite (ctest -LE gpu): $(cat "$STATE/counts_suite.txt")"
      echo
      echo "Tests that did not pass:"
      echo
      head -2 "$STATE/tests_suite.md"
      grep -vE '^\| test \||^\|---' "$STATE/tests_suite.md" | grep -v '| Passed |' || echo "| (none) | | | |"
      echo
    fi
    if [ -f "$STATE/kernels.md" ]; then echo "## mlip's CUDA kernels (bin/bench_fused_embedding)"; echo; cat "$STATE/kernels.md"; echo; fi
    if [ -f "$STATE/md.md" ]; then echo "## MD benchmark"; echo; sed 's/^# /### /' "$STATE/md.md"; echo; fi
    if [ -f "$STATE/bench.md" ]; then echo "## Benchmark"; echo; sed 's/^# /### /' "$STATE/bench.md"; echo; fi
    if [ -f "$STATE/peers.md" ]; then echo "## Peer: MACE's training step (bench/mace_gpu_bench.py)"; echo; cat "$STATE/peers.md"; echo; fi
    echo "Logs: logs.tar.gz (configure, build, ctest and benchmark logs; the full suite table is tests_suite.md in it)."
  } > "$s"
  cp "$STATE"/*.md "$STATE/env.txt" "$LOG/" 2>/dev/null
  tar -czf "$OUTDIR/logs.tar.gz" -C "$STATE" logs 2>/dev/null ||
    (cd "$STATE" && "$PY" -m tarfile -c "$OUTDIR/logs.tar.gz" logs)
  [ -f "$STATE/bench.md" ] && cp "$STATE/bench.md" "$OUTDIR/bench.md"
  echo
  say "summary: $s; logs: $OUTDIR/logs.tar.gz ($(du -h "$OUTDIR/logs.tar.gz" | cut -f1)); $(elapsed) s in all"
}

IFS=, read -ra stage_list <<<"$STAGES"
[ "$SKIP_SUITE" = 1 ] && stage_list=("${stage_list[@]/suite}")
[ "$SKIP_BENCH" = 1 ] && stage_list=("${stage_list[@]/bench}")
# This call's stages start afresh; the others keep what earlier calls found.
for st in "${stage_list[@]}"; do
  [ -n "$st" ] && rm -f "$STATE/stage_$st.md" "$STATE/tests_$st.md" "$STATE/counts_$st.txt"
  [ "$st" = bench ] && rm -f "$STATE/bench.md"
  [ "$st" = md ] && rm -f "$STATE/md.md"
  [ "$st" = kernels ] && rm -f "$STATE/kernels.md"
  [ "$st" = peers ] && rm -f "$STATE/peers.md"
done
BUILD_OK=1
STOPPED=0
for st in "${stage_list[@]}"; do
  [ -n "$st" ] || continue
  if [ "$BUILD_OK" = 0 ] && [ "$st" != build ]; then record "$st" "not run" 0 "the build failed"; continue; fi
  if [ "$DRY" = 1 ] && { [ "$st" = suite ] || [ "$st" = bench ] || [ "$st" = kernels ] || [ "$st" = md ] || [ "$st" = peers ]; }; then
    STOPPED=1; continue
  fi
  case "$st" in
    build) stage_build || { BUILD_OK=0; EXIT=1; } ;;
    gpu) run_ctest gpu -L gpu ${GPU_TESTS:+-R "$GPU_TESTS"} -V --output-on-failure || EXIT=1 ;;
    # shellcheck disable=SC2086
    suite) run_ctest suite -LE gpu -j "$JOBS" --output-on-failure $CTEST_ARGS || EXIT=1 ;;
    bench) stage_bench || EXIT=1 ;;
    kernels) stage_kernels || EXIT=1 ;;
    md) stage_md || EXIT=1 ;;
    peers) stage_peers || EXIT=1 ;;
    *) echo "gpu_check.sh: unknown stage '$st' (build, gpu, kernels, md, suite, bench, peers)" >&2; exit 2 ;;
  esac
done
if [ "$DRY" = 1 ]; then
  if [ "$CUDA_OK" != 1 ]; then
    MSG="no CUDA device visible: stopping here; the rest needs a GPU"
  else
    MSG="--dry-run: stopping here (the GPU tests ran); the rest runs without --dry-run"
  fi
  for st in "${stage_list[@]}"; do
    { [ "$st" = suite ] || [ "$st" = bench ] || [ "$st" = kernels ] || [ "$st" = md ] || [ "$st" = peers ]; } && [ "$BUILD_OK" = 1 ] && record "$st" "not run" 0 "$MSG"
  done
fi
write_summary
cat "$OUTDIR/summary.md" | sed -n '/^## Stages/,/^## What/p' | sed '$d'
[ -f "$STATE/tests_gpu.md" ] && { echo "GPU tests:"; cat "$STATE/tests_gpu.md"; }
[ "$DRY" = 1 ] && { echo; echo "$MSG"; }
exit $EXIT
