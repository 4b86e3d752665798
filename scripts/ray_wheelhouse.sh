#!/usr/bin/env bash
# Ray for a machine that cannot reach a package registry (the H200 device), in one archive
# small enough to travel with the working tree (< 64 MiB): Ray and the packages that image
# lacks (jsonschema and its three dependencies; it has click, filelock, msgpack, packaging,
# protobuf, pyyaml and requests), unpacked, without Ray's Java jars and the dashboard's web
# build (bench uses neither; the wheel as published is ~80 MB, too big to carry).
#   here:   bash scripts/ray_wheelhouse.sh   -> .whl/ray-site.tar.gz (.whl/ is git-ignored)
#   device: mkdir -p /tmp/site && tar -xzf .whl/ray-site.tar.gz -C /tmp/site && export PYTHONPATH=/tmp/site
# PYVER (default 3.12, the device's python3) and RAY_VERSION pick the wheels.
set -euo pipefail
out=${1:-.whl}
pyver=${PYVER:-3.12}
ver=${RAY_VERSION:-2.60.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp/wheels" "ray==$ver" jsonschema jsonschema-specifications referencing rpds-py
mkdir -p "$tmp/site" "$out"
for w in "$tmp"/wheels/*.whl; do unzip -q -o "$w" -d "$tmp/site"; done  # unzip keeps the binaries' exec bits
rm -rf "$tmp/site/ray/jars" "$tmp/site/ray/dashboard/client/build"
tar -C "$tmp/site" -czf "$out/ray-site.tar.gz" .
du -h "$out/ray-site.tar.gz"
