#!/usr/bin/env bash
# Rehearses bench/gpu/check.sh here, as the GPU machine will run it, so that a missing package or a
# script error shows in CI instead of in a lent machine's minutes:
#   1. the carried packages: .gpu-carry/ if this tree's prepare.sh packed it, else prepare.sh into
#      WORK/carry (apt-get download: needs the network and Debian 12's package lists);
#   2. check.sh with the system's MPI and development packages out of sight: an empty environment,
#      a PATH of the tools the GPU machine has (no mpicc, mpiexec, pkg-config or xz) and
#      CMAKE_IGNORE_PREFIX_PATH=/usr;/;/usr/local, so only the carried files can be found, and
#      HPCPS_GPU_STRICT=1, so the build fails if a header or library still came from a host copy of
#      a carried file. It unpacks, configures, builds with nvcc, runs the launcher check, and
#      without a GPU reports "no GPU: skipped" for every run.
# The limits of check.sh are multiplied by HPCPS_GPU_SCALE (default 4: 2 cores against 16; the
# build's 300 s become 1200 s, where 2 cores took 290 s idle and 520-890 s shared on 2026-12-02).
# ctest runs it as gpu_rehearsal (WORK: the build folder's gpu-rehearsal/), labelled ci: CI's own
# stage runs it (scripts/setup ci, ctest --preset ci); ctest --preset release leaves it out.
#
#   bench/gpu/rehearse.sh [WORK]     (default /tmp/gpu-rehearsal; HPCPS_GPU_JOBS, default 2;
#                                     HPCPS_GPU_KEEP_BUILD=1 rebuilds WORK's earlier build incrementally)
set -euo pipefail
die() { printf 'bench/gpu/rehearse.sh: error: %s\n' "$*" >&2; exit 1; }
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
work=${1:-/tmp/gpu-rehearsal}
mkdir -p "$work" && work=$(cd "$work" && pwd)
start=$SECONDS

stamp="prepare.sh $(sha256sum bench/gpu/prepare.sh | cut -d' ' -f1)"
if [[ "$(head -1 .gpu-carry/prepared.txt 2>/dev/null)" == "$stamp" ]]; then
  carry=$PWD/.gpu-carry
  echo "==> the carried packages: .gpu-carry/ (packed by this prepare.sh)"
elif [[ "$(head -1 "$work/carry/prepared.txt" 2>/dev/null)" == "$stamp" ]]; then
  carry=$work/carry
  echo "==> the carried packages: $carry (packed by this prepare.sh)"
else
  carry=$work/carry
  echo "==> packing the carried packages into $carry (bench/gpu/prepare.sh)"
  # Level 0: this archive is only unpacked here, and the format is the same.
  XZ_OPT=-0 bash bench/gpu/prepare.sh "$carry" || die "bench/gpu/prepare.sh failed (above): no carried packages to rehearse with"
fi
packed=$SECONDS

# The tools the GPU machine is known to have (an Ubuntu base, its C++ toolchain, CMake, ninja, CUDA
# and python3); nothing else of /usr/bin is in reach.
tools=$work/tools
rm -rf "$tools" && mkdir -p "$tools"
for t in bash sh env cat cp mv ln rm mkdir ls cut head tail tee tr sort uniq comm paste wc date dirname basename \
  readlink realpath sha256sum nproc sleep timeout touch uname id true false expr grep sed awk find xargs tar gzip \
  ldd cc c++ gcc g++ cpp as ld ld.bfd ar ranlib nm objdump readelf strip objcopy cmake ctest ninja python3; do
  path=$(PATH=/usr/local/bin:/usr/bin:/bin command -v "$t") || die "$t not found here"
  ln -s "$path" "$tools/$t"
done
[[ -x /usr/local/cuda/bin/nvcc ]] || die "no /usr/local/cuda/bin/nvcc: the rehearsal builds with nvcc"

echo "==> bench/gpu/check.sh with only the carried packages in reach (PATH=$tools:/usr/local/cuda/bin)"
rc=0
env -i HOME="${HOME:-/root}" USER="${USER:-root}" LANG=C.UTF-8 PATH="$tools:/usr/local/cuda/bin" \
  OUT="$work/out" HPCPS_GPU_CARRY="$carry" HPCPS_GPU_WORK="$work/gpu" HPCPS_GPU_JOBS="${HPCPS_GPU_JOBS:-2}" \
  HPCPS_GPU_SCALE="${HPCPS_GPU_SCALE:-4}" HPCPS_GPU_KEEP_BUILD="${HPCPS_GPU_KEEP_BUILD:-0}" HPCPS_GPU_STRICT=1 \
  HPCPS_GPU_CMAKE_ARGS="-DCMAKE_IGNORE_PREFIX_PATH=/usr;/;/usr/local" \
  bash bench/gpu/check.sh || rc=$?
printf '==> gpu rehearsal: %s in %d s (packages %d s, check.sh %d s); results in %s\n' \
  "$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (check.sh exit $rc)")" $((SECONDS - start)) $((packed - start)) \
  $((SECONDS - packed)) "$work/out"
exit "$rc"
