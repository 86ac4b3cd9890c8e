#!/usr/bin/env bash
# Run HERE (Debian 12, online) before using the GPU machine: packs what check.sh needs there and
# that machine lacks (it has nvcc, CMake and ninja, but no MPICH, fmt, OpenBLAS, oneDNN, Eigen, CLI11,
# Catch2 or the data set) into .gpu-carry/ (git-ignored), under 64 MiB:
#   .gpu-carry/deps.tar.xz  the Debian packages' files, unpacked, without static libraries or docs
#   .gpu-carry/data/        the Fashion-MNIST files
# Then call the device tool with carry [".gpu-carry"] and the command `bash bench/gpu/check.sh`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PACKAGES=(mpich libmpich-dev libmpich12 libucx0 libhwloc15 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  libnuma1 libslurm38 libgfortran5 libfmt9 libfmt-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev
  libopenblas-dev libeigen3-dev libcli11-dev catch2 libltdl7 libdnnl2 libdnnl-dev ocl-icd-libopencl1 zlib1g-dev)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${PACKAGES[@]}" >/dev/null)
mkdir -p "$work/root"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
# Not needed by hpcps: static libraries, docs, LAPACK, Fortran bindings.
# (Catch2's config names its .a, so that one stays.)
find "$work/root" \( \( -name '*.a' ! -name 'libCatch2*' \) -o -path '*/share/doc/*' -o -path '*/share/man/*' -o -name 'liblapack*' \
  -o -name 'libmpichfort*' -o -name 'lapacke.h' \) -delete
rm -rf .gpu-carry && mkdir -p .gpu-carry/data
tar -C "$work/root" -cJf .gpu-carry/deps.tar.xz .
cp /usr/share/datasets/fashion-mnist/*.gz .gpu-carry/data/
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
du -sh .gpu-carry .gpu-carry/*
