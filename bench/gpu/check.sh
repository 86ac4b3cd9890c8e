#!/usr/bin/env bash
# Run on the GPU machine (one command; see prepare.sh for what to carry): builds hpcps with nvcc
# for sm_90, then
#   1. the CUDA backend's equivalence test (test_backends_cuda: the MLPs, and two CNNs holding every
#      layer kernel) and the host backend tests,
#   2. the Fashion-MNIST examples with --backend cuda under mpiexec: the MLP (1 and 3 workers,
#      1 server, 2 epochs) and the CNN (2 workers, 1 server, 1 epoch of 20,000 samples), each also
#      with --backend cpu,
#   3. bench/backend_throughput_cuda: gradient throughput CPU vs CUDA on 784-256-128-10 and
#      784-4096-4096-10, median of 5 with the range, JSON.
# Logs and JSON go to $OUT (the device tool's output folder) or to gpu-results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-results}
mkdir -p "$out"
exec > >(tee "$out/check.log") 2>&1
step() { printf '\n==> %s\n' "$*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
nvcc --version | tail -1

deps=/tmp/hpcps-deps
if ! command -v mpicxx >/dev/null; then
  step "unpacking carried Debian packages into $deps"
  mkdir -p "$deps" && tar -C "$deps" -xJf .gpu-carry/deps.tar.xz || { echo "no .gpu-carry/deps.tar.xz: run bench/gpu/prepare.sh and carry .gpu-carry"; exit 1; }
  lib=$deps/usr/lib/x86_64-linux-gnu
  export PATH=$deps/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:$lib/ucx:${LD_LIBRARY_PATH:-}
  export UCX_MODULE_DIR=$lib/ucx
  export PKG_CONFIG_SYSROOT_DIR=$deps PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig
  # The packages' CMake and compiler-wrapper files name /usr paths; point CMake at the files.
  mpi_args=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON
    -DMPI_CXX_HEADER_DIR=$deps/usr/include/x86_64-linux-gnu/mpich -DMPI_CXX_LIB_NAMES=mpich
    -DMPI_mpich_LIBRARY=$lib/libmpich.so -DMPIEXEC_EXECUTABLE=$deps/usr/bin/mpiexec.hydra
    -DOpenBLAS_DIR=/nonexistent -DCMAKE_PREFIX_PATH=$deps/usr)
  mpiexec=$deps/usr/bin/mpiexec.hydra
  data=$PWD/.gpu-carry/data
else
  mpi_args=()
  mpiexec=mpiexec
  data=${HPCPS_DATA:-/usr/share/datasets/fashion-mnist}
fi
export UCX_NET_DEVICES=lo MPIEXEC_TIMEOUT=120 OMP_NUM_THREADS=1
# Every run has its own limit, so the whole script fits a lent machine's few minutes (about 8 at
# most after the build; a hung run costs its limit, not the session).
limited() {
  local limit=$1; shift
  timeout --signal=KILL "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 137 ] && echo "TIMED OUT after ${limit} s: $*"
  return "$rc"
}

step "configure and build (nvcc, sm_90 + PTX): the targets below only"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHPCPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="90-real;90-virtual" \
  -DHPCPS_INSTALL=OFF -DHPCPS_MPIEXEC="$(command -v "$mpiexec")" "${mpi_args[@]}" &&
  cmake --build build-gpu -j16 --target test_backends_cuda test_backends fashion_mnist_mlp fashion_mnist_cnn \
    backend_throughput_cuda || { echo "BUILD FAILED"; exit 1; }

step "1. equivalence: CUDA backend against the CPU backend"
limited 90 ./build-gpu/tests/test_backends_cuda | tee "$out/equivalence_cuda.txt"
limited 60 ./build-gpu/tests/test_backends > "$out/test_backends_host.txt" 2>&1; echo "host backends test exit $?"

step "2. Fashion-MNIST under mpiexec, CUDA and CPU backends"
for spec in "2 cuda" "4 cuda" "2 cpu" "4 cpu"; do
  set -- $spec
  limited 45 "$mpiexec" -iface lo -n "$1" ./build-gpu/examples/fashion_mnist_mlp --data "$data" --backend "$2" \
    --servers 1 --epochs 2 --report "$out/fashion_${2}_n$1.json" | tail -3
done
for spec in "cuda 1" "cpu 7"; do
  set -- $spec
  limited 90 "$mpiexec" -iface lo -n 3 ./build-gpu/examples/fashion_mnist_cnn --data "$data" --backend "$1" \
    --threads "$2" --servers 1 --epochs 1 --train-samples 20000 --report "$out/fashion_cnn_${1}_n3.json" | tail -3
done

step "3. throughput: CPU vs CUDA backend"
limited 90 ./build-gpu/bench/backend_throughput_cuda --repeats 5 --cpu-threads 16 > "$out/backend_throughput_cuda.json"
echo "done; results in $out"
