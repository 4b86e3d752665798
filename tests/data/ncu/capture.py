"""Run triton_flash, cublas_stack and a hollow half-KV SDPA once each inside NVTX ranges (after warm-up)."""
import sys
import torch
from harness import get_kernel

B, H, N, D = 1, 16, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = [torch.randn(B, H, N, D, device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]
out = torch.empty_like(q)
scale = D ** -0.5

def hollow(q, k, v, out, *, causal, scale):
    half = k.shape[2] // 2
    out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k[:, :, :half], v[:, :, :half], scale=scale))

fns = {"triton_flash": get_kernel("triton_flash").fn, "cublas_stack": get_kernel("cublas_stack").fn, "hollow_half_kv": hollow}
names = sys.argv[1:] or list(fns)
for name in names:
    fn = fns[name]
    for _ in range(3):
        fn(q, k, v, out, causal=False, scale=scale)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(f"bench_kernel:{name}")
    fn(q, k, v, out, causal=False, scale=scale)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
print("captured", names)
