#!/usr/bin/env bash
# The GPU machine's check, one command (prepare.sh says what to carry): with only the carried Debian
# packages, builds hpcps with nvcc for sm_90, checks the build and the MPI launcher, then on a GPU
#   1. the CUDA backend's equivalence test (test_backends_cuda: the MLPs, and two CNNs holding every
#      layer kernel),
#   2. bench/backend_throughput_cuda: CPU vs CUDA gradient throughput per case (784-4096-4096-10,
#      the CNN) and the CUDA calls of one step,
#   3. the Fashion-MNIST examples under mpiexec with --backend cuda, then the same with --backend cpu:
#      the MLP (1 and 3 workers, 1 server, 2 epochs) and the CNN (2 workers, 1 server, 1 epoch of
#      20,000 samples).
# Without a GPU the runs are skipped ("no GPU: skipped"), and the check is instead that each CUDA
# program stops with one line (test_backends_cuda exits 77; fashion_mnist_mlp_cuda --backend cuda
# names the rank without a device); bench/gpu/rehearse.sh runs it so in CI.
# The whole script ends within HPCPS_GPU_BUDGET seconds (default 470, inside a lent machine's
# 8 minutes): every step has its own limit, cut to what is left, and a step with too little left is
# skipped with a line saying so.
# It prints one "RESULT" line per result and leaves in $OUT (the device tool's folder, 8 files at
# most come back) or gpu-results/: check.log, summary.json (every result), throughput.json (the
# benchmark's output) and reports.json (the examples' --report files in one object).
#
# Environment: OUT; HPCPS_GPU_COMMIT (the commit to name in summary.json where the tree has no .git);
# HPCPS_GPU_CARRY (default .gpu-carry), HPCPS_GPU_WORK (unpacked packages and the
# build, default /tmp/hpcps-gpu), HPCPS_GPU_JOBS (default nproc), HPCPS_GPU_BUDGET, HPCPS_GPU_SCALE,
# HPCPS_GPU_CMAKE_ARGS (more configure arguments), HPCPS_GPU_KEEP_BUILD=1 (build on an earlier run's
# build folder instead of a fresh one), HPCPS_GPU_STRICT=1 (rehearse.sh: fail where the
# build or the programs use a host copy of a carried file, or a host library outside the list the
# GPU machine is known to have).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out" && out=$(cd "$out" && pwd)
# The whole check in a group piped to tee, so the log is complete when the script returns.
{
# HPCPS_GPU_SCALE multiplies every limit and the budget: rehearse.sh builds on 2 shared cores.
scale=${HPCPS_GPU_SCALE:-1}
budget=${HPCPS_GPU_BUDGET:-$((470 * scale))}
carry=${HPCPS_GPU_CARRY:-.gpu-carry}
work=${HPCPS_GPU_WORK:-/tmp/hpcps-gpu}
jobs=${HPCPS_GPU_JOBS:-$(nproc)}
strict=${HPCPS_GPU_STRICT:-0}
deps=$work/deps build=$work/build
step() { printf '\n==> [%3d s] %s\n' "$SECONDS" "$*"; }

# --- results: one RESULT line each, and an object in summary.json --------------------------------
results=() json=() failed=0
# result NAME STATUS TEXT [JSON_FIELDS]: STATUS ok|pass|fail|timeout|skipped|n/a
result() {
  local line="RESULT $1: $3"
  echo "$line"
  results+=("$line")
  json+=("{\"name\": \"$1\", \"status\": \"$2\"${4:+, $4}}")
  case $2 in fail | timeout) failed=1 ;; esac
}
num_or_null() { [[ "$1" =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] && echo "$1" || echo null; }
finish() {
  step "summary ($SECONDS s of the ${budget} s budget)"
  printf '%s\n' "${results[@]}"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  {
    printf '{\n  "check": "bench/gpu/check.sh",\n  "date": "%s",\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '  "commit": "%s",\n' "${HPCPS_GPU_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
    printf '  "gpu": %s,\n' "$([[ -n "$gpu" ]] && printf '"%s"' "$gpu" || echo null)"
    printf '  "nvcc": "%s",\n' "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"
    printf '  "budget_seconds": %s,\n  "elapsed_seconds": %s,\n  "results": [\n' "$budget" "$SECONDS"
    local i
    for i in "${!json[@]}"; do printf '    %s%s\n' "${json[$i]}" "$([[ $i -lt $((${#json[@]} - 1)) ]] && echo ,)"; done
    printf '  ]\n}\n'
  } >"$out/summary.json"
  echo "results in $out: $(cd "$out" && ls | paste -sd' ')"
  exit "$failed"  # leaves the group below
}
fatal() { result "$1" "${3:-fail}" "$2"; finish; }

# --- every step under its own limit, and all within the budget -------------------------------------
# limited LIMIT CMD...: runs CMD for at most LIMIT seconds or what is left of the budget; 124 if it
# was stopped, 125 if too little was left to start it.
last_seconds=0
limited() {
  local limit=$(($1 * scale)) left=$((budget - SECONDS - 5)) t0=$SECONDS rc
  shift
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "SKIPPED (${left} s left of the ${budget} s budget): $*"
    last_seconds=0
    return 125
  fi
  # timeout signals its whole process group: mpiexec's ranks and ninja's compilers stop with it.
  MPIEXEC_TIMEOUT=$limit timeout --kill-after=3 "$limit" "$@"
  rc=$?
  last_seconds=$((SECONDS - t0))
  if ((rc == 124 || rc == 137)); then
    echo "TIMED OUT after ${limit} s: $*"
    return 124
  fi
  return "$rc"
}
status_of() { case $1 in 0) echo ok ;; 124) echo timeout ;; 125) echo skipped ;; *) echo fail ;; esac; }

step "machine"
grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
echo "$(nproc) cores; nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo missing);" \
  "$(c++ --version 2>/dev/null | head -1 || echo 'no c++');" "$(cmake --version 2>/dev/null | head -1 || echo 'no cmake');" \
  "ninja $(ninja --version 2>/dev/null || echo missing)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi: none"
for tool in nvcc c++ cmake ninja; do command -v "$tool" >/dev/null || fatal setup "$tool not found on PATH"; done

step "unpacking the carried Debian packages into $deps"
[[ -f "$carry/deps.tar.xz" && -d "$carry/data" ]] ||
  fatal setup "no $carry/deps.tar.xz or $carry/data: run bench/gpu/prepare.sh here and carry .gpu-carry"
carry=$(cd "$carry" && pwd)
if [[ "$(head -1 "$carry/prepared.txt" 2>/dev/null)" != "prepare.sh $(sha256sum bench/gpu/prepare.sh | cut -d' ' -f1)" ]]; then
  echo "warning: $carry was not packed by this tree's prepare.sh (its list of packages may differ)"
fi
rm -rf "$deps" && mkdir -p "$deps"
[[ "${HPCPS_GPU_KEEP_BUILD:-0}" == 1 ]] || rm -rf "$build"
# xz is not part of every base image; Python's lzma module unpacks it where xz is missing.
if command -v xz >/dev/null; then
  limited 60 tar -C "$deps" -xJf "$carry/deps.tar.xz"
elif command -v python3 >/dev/null; then
  limited 60 python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))' \
    "$carry/deps.tar.xz" "$deps"
else
  false
fi || fatal setup "could not unpack $carry/deps.tar.xz (with xz, or python3 where xz is missing)"
echo "unpacked with $(command -v xz >/dev/null && echo xz || echo "python3's lzma (no xz here)") in $last_seconds s"
lib=$deps/usr/lib/x86_64-linux-gnu
export PATH=$deps/usr/bin:$PATH
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$lib/ucx UCX_NET_DEVICES=lo OMP_NUM_THREADS=1
mpiexec=$deps/usr/bin/mpiexec.hydra
data=$carry/data
# Debian's OpenBLASConfig.cmake names /usr paths: a relocated one, so neither those nor pkg-config
# are needed.
mkdir -p "$deps/hpcps-cmake"
cat >"$deps/hpcps-cmake/OpenBLASConfig.cmake" <<EOF
set(OpenBLAS_INCLUDE_DIRS "$deps/usr/include/x86_64-linux-gnu/openblas-pthread")
set(OpenBLAS_LIBRARIES "$lib/openblas-pthread/libopenblas.so")
EOF

# A CMake 4 there would refuse a package's CMake file that asks for a policy version below 3.5.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
# The examples' CUDA twins: the same programs as fashion_mnist_mlp and _cnn, with --backend cuda.
targets=(test_backends_cuda backend_throughput_cuda fashion_mnist_mlp_cuda fashion_mnist_cnn_cuda)
step "configure (nvcc, sm_90 + PTX; the carried packages)"
# The packages' CMake and compiler-wrapper files name /usr paths; point CMake at the files.
# shellcheck disable=SC2086  # HPCPS_GPU_CMAKE_ARGS is a list of arguments
limited 90 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHPCPS_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="90-real;90-virtual" -DHPCPS_INSTALL=OFF \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DOpenBLAS_DIR="$deps/hpcps-cmake" -DHPCPS_MPIEXEC="$mpiexec" \
  -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON -DMPI_CXX_HEADER_DIR="$deps/usr/include/x86_64-linux-gnu/mpich" \
  -DMPI_CXX_LIB_NAMES=mpich -DMPI_mpich_LIBRARY="$lib/libmpich.so" -DMPIEXEC_EXECUTABLE="$mpiexec" \
  ${HPCPS_GPU_CMAKE_ARGS:-}
rc=$?
((rc == 0)) || fatal configure "$(status_of $rc) (exit $rc) in $last_seconds s, output above" "$(status_of $rc)"
result configure ok "ok in $last_seconds s" "\"seconds\": $last_seconds"

# The longest limit: a build cut short wastes the whole loan, a late run only the runs after it.
step "build: ${targets[*]} (-j$jobs)"
limited 300 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
rc=$?
((rc == 0)) || fatal build "$(status_of $rc) (exit $rc) in $last_seconds s, output above" "$(status_of $rc)"
result build ok "ok in $last_seconds s" "\"seconds\": $last_seconds"

step "what the build and the programs took from the host"
programs=("$build/tests/test_backends_cuda" "$build/bench/backend_throughput_cuda" "$build/examples/fashion_mnist_mlp_cuda"
  "$build/examples/fashion_mnist_cnn_cuda" "$mpiexec" "$deps/usr/bin/hydra_pmi_proxy")
# The carried files as the host would name them: a header or library the build or a program took
# from one of those paths is a host copy, which the GPU machine may not have.
(cd "$deps" && find . ! -type d | sed 's/^\.//' | sort -u) >"$work/carried.txt"
(ninja -C "$build" -t deps; ninja -C "$build" -t commands "${targets[@]}") 2>/dev/null |
  grep -oE '(^|[ :=])/[^ :]+' | sed 's/^[ :=]//' | sort -u >"$work/used.txt"
host_copies=$(comm -12 "$work/carried.txt" "$work/used.txt" | paste -sd' ')
missing=$(for p in "${programs[@]}"; do ldd "$p" 2>&1 | grep 'not found' | sed "s|^|${p##*/}: |"; done | sort -u | paste -sd';')
host_libs=$(for p in "${programs[@]}"; do ldd "$p" 2>/dev/null; done | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}' |
  grep -v " $deps/" | awk '{print $1}' | sort -u | paste -sd' ')
# What the GPU machine is sure to have: glibc, the compiler's runtimes, zlib (dpkg needs it), CUDA.
unexpected=$(tr ' ' '\n' <<<"$host_libs" |
  grep -v -E '^(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|libgomp|libutil|libz|libcuda|libcudart|libcublas|libcublasLt|libcupti)\.so' |
  paste -sd' ')
# The scan must see the carried headers it was built with, or it could not see host ones either.
seen=$(grep -c "^$deps/usr/include/" "$work/used.txt")
echo "host libraries the programs load: ${host_libs:-none}; carried headers the build read: $seen"
if [[ -n "$missing" ]]; then
  fatal host_check "libraries not found: $missing"
elif ((seen == 0)); then
  fatal host_check "the dependency scan (ninja -t deps) saw no carried header: it cannot tell what came from the host"
elif [[ "$strict" == 1 && -n "$host_copies" ]]; then
  fatal host_check "the build used host copies of carried files (the GPU machine may lack them): $host_copies"
elif [[ "$strict" == 1 && -n "$unexpected" ]]; then
  fatal host_check "the programs load host libraries the GPU machine may lack (carry their packages): $unexpected"
fi
result host_check ok "every library found; host copies of carried files used: ${host_copies:-none}"

step "launcher: the carried MPICH runs 2 ranks of the MLP on the CPU (1,000 samples)"
limited 30 "$mpiexec" -iface lo -n 2 "$build/examples/fashion_mnist_mlp_cuda" --data "$data" --backend cpu --servers 1 \
  --epochs 1 --train-samples 1000 --no-evaluation >"$work/launcher.log" 2>&1
rc=$?
tail -n "$([[ $rc -eq 0 ]] && echo 2 || echo 20)" "$work/launcher.log"
result launcher "$(status_of $rc)" "$(status_of $rc) in $last_seconds s (mpiexec.hydra -iface lo -n 2)" "\"seconds\": $last_seconds"

gpu_names=$(nvidia-smi -L 2>/dev/null | grep '^GPU')
if [[ -z "$gpu_names" ]]; then
  # What a node without a GPU sees (CI's rehearsal): each CUDA program stops, one line says why.
  step "no GPU: the CUDA programs stop with one line"
  limited 30 env CUDA_VISIBLE_DEVICES= "$build/tests/test_backends_cuda" >"$work/no_device.test.log" 2>&1
  rc=$?
  tail -n 2 "$work/no_device.test.log"
  if ((rc == 77)); then
    result no_device.test_backends_cuda ok "exit 77 (skipped) in $last_seconds s"
  else
    result no_device.test_backends_cuda "$( ((rc == 124)) && echo timeout || echo fail)" "exit $rc, not 77"
  fi
  limited 30 env CUDA_VISIBLE_DEVICES= "$mpiexec" -iface lo -n 2 "$build/examples/fashion_mnist_mlp_cuda" --data "$data" \
    --backend cuda --epochs 1 >"$work/no_device.mlp.log" 2>&1
  rc=$?
  expected="--backend cuda: rank 0 has no usable CUDA device"
  tail -n 2 "$work/no_device.mlp.log"
  if ((rc != 0 && rc != 124)) && [[ $(grep -cF -- "$expected" "$work/no_device.mlp.log") == 1 ]]; then
    result no_device.fashion_mnist_mlp_cuda ok "exit $rc with '$expected' once, in $last_seconds s"
  else
    result no_device.fashion_mnist_mlp_cuda "$( ((rc == 124)) && echo timeout || echo fail)" \
      "exit $rc, '$expected' printed $(grep -cF -- "$expected" "$work/no_device.mlp.log") times (once expected)"
  fi
  step "no GPU: skipped the runs"
  for name in equivalence throughput cuda_calls_per_step accuracy.mlp.cuda.n2 accuracy.mlp.cuda.n4 accuracy.cnn.cuda.n3 \
    accuracy.mlp.cpu.n2 accuracy.cnn.cpu.n3 accuracy.mlp.cpu.n4; do
    result "$name" skipped "no GPU: skipped"
  done
  finish
fi
echo "$gpu_names"

step "1. equivalence: test_backends_cuda (CUDA backend against the CPU backend)"
limited 60 "$build/tests/test_backends_cuda"
rc=$?
case $rc in
  0) result equivalence pass "pass in $last_seconds s" "\"seconds\": $last_seconds" ;;
  77) result equivalence skipped "no usable CUDA device (exit 77)" ;;
  *) result equivalence "$(status_of $rc)" "$(status_of $rc) (exit $rc) in $last_seconds s" "\"exit\": $rc" ;;
esac

step "2. throughput: backend_throughput_cuda (CPU vs CUDA; CUDA calls per step)"
limited 90 "$build/bench/backend_throughput_cuda" --repeats 5 --cpu-threads "$(nproc)" >"$out/throughput.json"
rc=$?
case $rc in
  0) ;;
  77) result throughput skipped "no usable CUDA device (exit 77)" ;;
  *) result throughput "$(status_of $rc)" "$(status_of $rc) (exit $rc) in $last_seconds s" "\"exit\": $rc" ;;
esac
# Key-value pairs in document order, whatever the layout: each case's "name" comes before its
# samples/s; "cuda_calls_per_step" opens the object holding the counts, and "counted" (false
# where CUPTI could not subscribe) comes before it.
grep -oE '"[A-Za-z0-9_]+": *("[^"]*"|-?[0-9][0-9.eE+-]*|true|false|\{)' "$out/throughput.json" 2>/dev/null | awk '
  { key = $0; sub(/^"/, "", key); sub(/".*/, "", key); val = $0; sub(/^"[^"]*": */, "", val); gsub(/"/, "", val) }
  key == "counted" { counted = val; next }
  key == "cuda_calls_per_step" { calls = 1; next }
  calls && (key == "total" || key == "host_waits" || key == "allocations") { count[key] = val; next }
  key == "name" { name = val; calls = 0 }
  key == "cpu_samples_per_s" { cpu[name] = val; if (!(name in seen)) { seen[name] = 1; order[n++] = name } }
  key == "cuda_samples_per_s" { cuda[name] = val; if (!(name in seen)) { seen[name] = 1; order[n++] = name } }
  END {
    for (i = 0; i < n; i++) print "case|" order[i] "|" (order[i] in cpu ? cpu[order[i]] : "n/a") "|" (order[i] in cuda ? cuda[order[i]] : "n/a")
    if (counted == "false") print "calls|n/a|n/a|n/a|not counted: CUPTI unavailable"
    else print "calls|" ("total" in count ? count["total"] : "n/a") "|" ("host_waits" in count ? count["host_waits"] : "n/a") "|" ("allocations" in count ? count["allocations"] : "n/a") "|"
  }' >"$work/throughput.txt"
seen_mlp=0 seen_cnn=0
while IFS='|' read -r kind a b c note; do
  if [[ $kind == case ]]; then
    read -r cpu_text cuda_text ratio < <(awk -v x="$b" -v y="$c" 'BEGIN {
      if (x + 0 > 0 && y + 0 > 0) printf "%.0f %.0f %.2fx\n", x, y, y / x; else print x, y, "n/a" }')
    [[ $a == *784-4096-4096-10* ]] && seen_mlp=1
    [[ ${a,,} == *cnn* ]] && seen_cnn=1
    result "throughput.$a" "$([[ $ratio == n/a ]] && echo n/a || echo ok)" "cpu $cpu_text, cuda $cuda_text samples/s (cuda/cpu $ratio)" \
      "\"cpu_samples_per_s\": $(num_or_null "$b"), \"cuda_samples_per_s\": $(num_or_null "$c")"
  else
    result cuda_calls_per_step "$([[ $a == n/a ]] && echo n/a || echo ok)" "total $a, host waits $b, allocations $c${note:+ ($note)}" \
      "\"total\": $(num_or_null "$a"), \"host_waits\": $(num_or_null "$b"), \"allocations\": $(num_or_null "$c")"
  fi
done <"$work/throughput.txt"
((seen_mlp)) || result throughput.784-4096-4096-10 n/a "n/a (no such case in throughput.json)"
((seen_cnn)) || result throughput.cnn n/a "n/a (no CNN case in throughput.json)"

step "3. Fashion-MNIST under mpiexec: --backend cuda, then --backend cpu"
# name ranks program limit args...: one training run, its accuracy and samples/s from its report.
example() {
  local name=$1 ranks=$2 program=$3 limit=$4 report=$work/$1.json acc sps
  shift 4
  rm -f "$report"
  limited "$limit" "$mpiexec" -iface lo -n "$ranks" "$build/examples/$program" --data "$data" --servers 1 \
    --report "$report" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  tail -n "$([[ $rc -eq 0 ]] && echo 3 || echo 20)" "$work/$name.log"
  # The report's top level is indented by two spaces; epochs and config are deeper.
  acc=$(sed -n -E 's/^  "test_accuracy": ([-0-9.eE+]+),?$/\1/p' "$report" 2>/dev/null | head -1)
  sps=$(sed -n -E 's/^  "samples_per_second": ([-0-9.eE+]+),?$/\1/p' "$report" 2>/dev/null | head -1)
  if [[ $rc -eq 0 && -n "$acc" ]]; then
    result "accuracy.$name" ok "test accuracy $acc, $(awk -v v="$sps" 'BEGIN { if (v == "") print "n/a"; else printf "%.0f", v }') samples/s, $last_seconds s (mpiexec -n $ranks $program $*)" \
      "\"test_accuracy\": $(num_or_null "$acc"), \"samples_per_second\": $(num_or_null "${sps:-x}"), \"seconds\": $last_seconds"
  else
    [[ $rc -eq 0 ]] && rc=1
    result "accuracy.$name" "$(status_of $rc)" "$(status_of $rc) (exit $rc) in $last_seconds s, test accuracy ${acc:-n/a}" "\"exit\": $rc"
  fi
}
example mlp.cuda.n2 2 fashion_mnist_mlp_cuda 40 --backend cuda --epochs 2
example cnn.cuda.n3 3 fashion_mnist_cnn_cuda 60 --backend cuda --threads 1 --epochs 1 --train-samples 20000
example mlp.cuda.n4 4 fashion_mnist_mlp_cuda 40 --backend cuda --epochs 2
example mlp.cpu.n2 2 fashion_mnist_mlp_cuda 40 --backend cpu --epochs 2
example cnn.cpu.n3 3 fashion_mnist_cnn_cuda 60 --backend cpu --threads $(($(nproc) > 2 ? ($(nproc) - 2) / 2 : 1)) --epochs 1 --train-samples 20000
example mlp.cpu.n4 4 fashion_mnist_mlp_cuda 40 --backend cpu --epochs 2
{
  echo "{"
  first=1
  for name in mlp.cuda.n2 cnn.cuda.n3 mlp.cuda.n4 mlp.cpu.n2 cnn.cpu.n3 mlp.cpu.n4; do
    ((first)) || echo ","
    first=0
    printf '"%s": ' "$name"
    if [[ -s "$work/$name.json" ]]; then cat "$work/$name.json"; else echo null; fi
  done
  echo "}"
} >"$out/reports.json"
finish
} 2>&1 | tee "$out/check.log"
exit "${PIPESTATUS[0]}"
