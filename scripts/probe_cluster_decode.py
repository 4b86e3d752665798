#!/usr/bin/env python
"""How many thread-block clusters of cuda_cluster_decode this GPU holds at once, per size.

A cluster's CTAs must share one GPC, so the answer follows the GPU's GPC sizes, not its SM
count: on the H200 timed here (132 SMs, one 199 KB CTA per SM) 7 clusters of 10-16 CTAs
fit, 9 of 9, 15 of 7-8, 30 of 4 (docs/benchmarks.md). cuda_cluster_decode's plan() asks the
same driver query (cuOccupancyMaxActiveClusters) before it picks a size.

Usage (GPU machine, repo root): python scripts/probe_cluster_decode.py [--head-dim 128] [--group 4]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    args = ap.parse_args()
    import torch

    from kernels.cuda_cluster_decode import (
        MAX_CLUSTER,
        _kernel,
        _kernel_name,
        max_active_clusters,
        pipeline_stages,
        smem_bytes,
    )

    d, g = args.head_dim, args.group
    stages = pipeline_stages(d)
    smem = smem_bytes(d, g, stages)
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}: {props.multi_processor_count} SMs; D={d}, G={g}: {stages} stages, {smem} B shared memory")
    for c in range(1, MAX_CLUSTER + 1):
        fn = _kernel(_kernel_name(1, d, g, c, stages), 0, c, smem)
        n = max_active_clusters(fn, c, smem, 0)
        print(f"cluster {c:2d}: {n:3d} clusters at once ({n * c} CTAs)", flush=True)


if __name__ == "__main__":
    main()
