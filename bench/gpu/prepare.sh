#!/usr/bin/env bash
# Run HERE (Debian 12, online) before using the GPU machine: packs what check.sh needs there and
# that machine lacks (it has nvcc, CMake, ninja and g++, but no MPICH, fmt, OpenBLAS, oneDNN, Eigen,
# CLI11, Catch2, zlib's headers or the data set; check.sh needs no pkg-config) into DEST (default
# .gpu-carry/, git-ignored), under 64 MiB together with the working tree:
#   DEST/deps.tar.xz   the Debian packages' files, unpacked, without static libraries or docs
#   DEST/data/         the Fashion-MNIST files
#   DEST/prepared.txt  this script's checksum and the packages' versions (check.sh and rehearse.sh
#                      compare the checksum with the script they come with)
# Then call the device tool with carry [".gpu-carry"] and the command `bash bench/gpu/check.sh`.
# bench/gpu/rehearse.sh runs this into a folder of its own and builds from it as the GPU machine will.
#
#   bench/gpu/prepare.sh [DEST]
set -euo pipefail
die() { printf 'bench/gpu/prepare.sh: error: %s\n' "$*" >&2; exit 1; }
cd "$(git rev-parse --show-toplevel)"
dest=${1:-.gpu-carry}
[[ ! -e "$dest" || -f "$dest/deps.tar.xz" || -z "$(ls -A "$dest")" ]] ||
  die "$dest holds something other than an earlier carry: not replacing it"
# zlib1g: its development link (libz.so) points at the runtime library, which a build must find in
# the carried tree; at run time the host's libz.so.1 serves (the runtime stays off the library path).
# libudev1 (hwloc's) and libquadmath0 (libgfortran's) may be missing from a minimal image.
PACKAGES=(mpich libmpich-dev libmpich12 libucx0 libhwloc15 libudev1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  libnuma1 libslurm38 libgfortran5 libquadmath0 libfmt9 libfmt-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev
  libopenblas-dev libeigen3-dev libcli11-dev catch2 libltdl7 libdnnl2 libdnnl-dev ocl-icd-libopencl1 zlib1g-dev zlib1g)
data_dir=${HPCPS_DATA:-/usr/share/datasets/fashion-mnist}
ls "$data_dir"/train-images-idx3-ubyte.gz >/dev/null 2>&1 ||
  die "no Fashion-MNIST in $data_dir (apt-get install dataset-fashion-mnist, or set HPCPS_DATA)"
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get and dpkg-deb are needed (Debian 12)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Limits, so a stalled mirror fails the step with a message instead of holding CI.
download() { (cd "$work" && timeout 300 apt-get download "${PACKAGES[@]}") >"$work/apt.log" 2>&1; }
if ! download; then
  # A fresh CI image may have no package lists; one refresh, as scripts/setup does before installing.
  if ((EUID == 0)); then
    echo "apt-get download failed; refreshing the package lists once (apt-get update)"
    timeout 300 apt-get update >>"$work/apt.log" 2>&1 && download ||
      { tail -5 "$work/apt.log" >&2; die "apt-get download failed: it needs the network and Debian 12's package lists"; }
  else
    tail -5 "$work/apt.log" >&2; die "apt-get download failed: it needs the network and package lists (apt-get update as root)"
  fi
fi
mkdir -p "$work/root"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
# Not needed by hpcps: static libraries, docs, LAPACK, Fortran bindings.
# (Catch2's config names its .a, so that one stays.)
find "$work/root" \( \( -name '*.a' ! -name 'libCatch2*' \) -o -path '*/share/doc/*' -o -path '*/share/man/*' -o -name 'liblapack*' \
  -o -name 'libmpichfort*' -o -name 'lapacke.h' \) -delete
# Links to absolute paths would reach into the host's /usr wherever the tree is unpacked: point
# them inside the tree, and refuse any whose target the tree lacks.
while IFS= read -r link; do
  target=$(readlink "$link")
  [[ -e "$work/root$target" ]] || die "${link#"$work/root"} -> $target: the target is in none of the packages"
  ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$work/root$target")" "$link"
done < <(find "$work/root" -type l -lname '/*')

rm -rf "$dest" && mkdir -p "$dest/data"
tar -C "$work/root" -cJf "$dest/deps.tar.xz" .
cp "$data_dir"/*.gz "$dest/data/"
{
  echo "prepare.sh $(sha256sum bench/gpu/prepare.sh | cut -d' ' -f1)"
  for deb in "$work"/*.deb; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"; done
} >"$dest/prepared.txt"
if [[ "$dest" == .gpu-carry ]]; then
  grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
  # The device tool sends the working tree (tracked and untracked files git does not ignore) and the
  # carried folder, 64 MiB at most.
  tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  carry=$(du -sb .gpu-carry | cut -f1)
  total=$(((tree + carry) / 1048576))
  echo "travels to the GPU machine: $((tree / 1048576)) MiB working tree + $((carry / 1048576)) MiB .gpu-carry = $total MiB of 64"
  ((total < 63)) || die "the working tree and .gpu-carry exceed the device tool's 64 MiB"
fi
du -sh "$dest"/* && du -sh "$dest"
