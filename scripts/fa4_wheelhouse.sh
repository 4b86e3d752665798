#!/usr/bin/env bash
# FlashAttention-4 (the `fa4` peer kernel, kernels/fa4.py) for a machine that cannot reach a
# package registry (the H200 device), in pieces small enough to travel with the working tree:
# one call may carry 64 MiB, and nvidia-cutlass-dsl-libs-cu13 alone is ~92 MB, so it goes in
# two halves over two back-to-back calls (a warm machine keeps what the first left outside
# the copied tree) and is joined, and checked against its sha256, there.
#
#   here:   bash scripts/fa4_wheelhouse.sh            -> .whl/fa4-1/, .whl/fa4-2/ (.whl/ is git-ignored)
#   device: run(carry=[".whl/fa4-1"], command="bash scripts/fa4_wheelhouse.sh --stage")
#           run(carry=[".whl/fa4-2"], command="bash scripts/fa4_wheelhouse.sh --stage --install && ...")
#           (the second call right after the first: the machine is given back after ~30 s idle)
#
# --stage copies the carried pieces into $FA4_STAGE (default /tmp/fa4-wheels, outside the
# copied tree); --install joins the halves, checks every wheel against the manifest written
# here, and installs with pip from that folder alone (--no-index), adding only what the
# machine lacks (its torch, protobuf and typing-extensions stay). PYVER (default 3.12, the
# device's python3) and CUDA (default 13: the device's torch and cupy are CUDA 13 builds)
# pick the wheels.
set -euo pipefail
stage=${FA4_STAGE:-/tmp/fa4-wheels}
part_bytes=$((56 * 1024 * 1024))  # the first half: leaves room under 64 MiB per call

if [ "${1:-}" = --stage ]; then
  mkdir -p "$stage"
  for d in .whl/fa4-1 .whl/fa4-2; do [ -d "$d" ] && cp "$d"/* "$stage"/; done
  ls "$stage"
  [ "${2:-}" = --install ] || exit 0
  cd "$stage"
  [ -f MANIFEST.sha256 ] || { echo "no MANIFEST.sha256 in $stage: carry .whl/fa4-2 (see this script's header)"; exit 2; }
  for big in *.whl.part-a; do
    [ -e "$big" ] || continue
    whl=${big%.part-a}
    [ -f "$whl.part-b" ] || { echo "$whl.part-b is missing: carry .whl/fa4-2 right after .whl/fa4-1"; exit 2; }
    cat "$big" "$whl.part-b" > "$whl"
  done
  sha256sum -c --quiet MANIFEST.sha256 || { echo "a wheel does not match MANIFEST.sha256: stage both halves again"; exit 2; }
  # Without a resolver (see the download below): the packages FA4 brings, then the three the
  # machine may already have, only where it lacks them.
  python3 -m pip install -q --no-deps --no-index flash_attn_4-*.whl nvidia_cutlass_dsl*.whl quack_kernels-*.whl \
    apache_tvm_ffi-*.whl torch_c_dlpack_ext-*.whl einops-*.whl
  for pkg in cuda_bindings cuda_pathfinder typing_extensions; do
    python3 -c "import importlib.metadata as m, sys; m.version('${pkg//_/-}')" 2>/dev/null \
      || python3 -m pip install -q --no-deps --no-index "$pkg"-*.whl
  done
  python3 -c "import flash_attn.cute, importlib.metadata as m; print('flash-attn-4', m.version('flash-attn-4'), 'installed')"
  exit 0
fi

out=${1:-.whl}
pyver=${PYVER:-3.12}
cuda=${CUDA:-13}
dsl=${CUTLASS_DSL:-4.8.1}  # the nvidia-cutlass-dsl FA4 was measured with (issue 31)
ver=$(python3 -c "import re; print(re.search(r'FA4_VERSION = \"(.+?)\"', open('kernels/fa4.py').read()).group(1))")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheels named one by one, without their requirements: a resolver would pull a whole
# torch for `torch`, and nvidia-cutlass-dsl requires its cu12 libraries even where [cu13] adds
# the cu13 ones. The list is FA4's requirements (flash-attn-4's and quack-kernels' METADATA)
# less what the device image has (torch, protobuf); the last three install only where missing.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$tmp/w" "flash-attn-4==$ver" "nvidia-cutlass-dsl==$dsl" \
  "nvidia-cutlass-dsl-libs-base==$dsl" "nvidia-cutlass-dsl-libs-core==$dsl" "nvidia-cutlass-dsl-libs-cu$cuda==$dsl" \
  "quack-kernels>=0.5.3" "apache-tvm-ffi>=0.1.11,<0.2" torch-c-dlpack-ext einops \
  "cuda-bindings>=$cuda,<$((cuda + 1))" cuda-pathfinder "typing-extensions>=4.13"
rm -rf "$out/fa4-1" "$out/fa4-2"
mkdir -p "$out/fa4-1" "$out/fa4-2"
(cd "$tmp/w" && sha256sum *.whl > MANIFEST.sha256 && echo "$ver" > VERSION)
for f in "$tmp"/w/*; do
  if [ "$(stat -c %s "$f")" -gt "$part_bytes" ]; then
    head -c "$part_bytes" "$f" > "$out/fa4-1/$(basename "$f").part-a"
    tail -c +$((part_bytes + 1)) "$f" > "$out/fa4-2/$(basename "$f").part-b"
  else
    cp "$f" "$out/fa4-2/"
  fi
done
du -sh "$out/fa4-1" "$out/fa4-2"
