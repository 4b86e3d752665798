"""How many thread-block clusters of cuda_cluster_decode this GPU holds at once, per size.

A cluster's CTAs must share one GPC, so the answer follows the GPU's GPC sizes, not its SM
count (the H200's figures:
docs/measurement.md#small-batches-the-splits-merged-on-chip--cuda_cluster_decode-a8c3a21). cuda_cluster_decode's
plan() asks the same driver query (cuOccupancyMaxActiveClusters, through ``resident_clusters``) before it picks
a size. Not ledger-backed: a probe of the device, not a benchmark.

Usage (GPU machine with cupy, repo root):
    python3 -m research.probe_cluster_decode [--head-dim 128] [--group 4] [--dtype float16]
"""

from __future__ import annotations

import argparse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--group", type=int, default=4, help="query heads per kv head")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    args = ap.parse_args()
    import torch

    from bench_kernels.cuda_cluster_decode import MAX_CLUSTER, pipeline_stages, resident_clusters, smem_bytes

    if not torch.cuda.is_available():
        print("probe_cluster_decode needs a CUDA GPU")
        return 2
    d, g = args.head_dim, args.group
    stages = pipeline_stages(d)
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}: {props.multi_processor_count} SMs; D={d}, G={g}: {stages} stages, "
          f"{smem_bytes(d, g, stages)} B shared memory")
    for c in range(1, MAX_CLUSTER + 1):
        n = resident_clusters(0, c, d, g, args.dtype)
        print(f"cluster {c:2d}: {n:3d} clusters at once ({n * c} CTAs)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
