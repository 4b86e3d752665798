"""A small transformer in plain PyTorch whose attention goes through the harness's hook: the
shipped ``[integration]`` step (registrations/integration-example.toml, docs/registrations).

``step(device, dtype)`` is the step-factory contract of ``harness.integration``: it builds the
model and its input once, from a fixed seed (float64 weights cast to ``dtype``, so the float64
step and the ``dtype`` step hold the same model), and returns a function running one forward
step. The shape is SHAPE; the line's grid holds the same attention shape, so the kernel's
probe time there can be set beside its time inside the step.
"""

from __future__ import annotations

# Pre-norm blocks: d_model = heads * head_dim; causal self-attention, 4x GELU MLP.
SHAPE = {"batch": 2, "seq_len": 32, "heads": 4, "head_dim": 16, "layers": 2, "mlp_ratio": 4}
SEED = 0


def _model(device: str, dtype, shape: dict):
    import torch

    g = torch.Generator().manual_seed(SEED)
    d = shape["heads"] * shape["head_dim"]
    f = d * shape["mlp_ratio"]

    def weight(*size):
        return (torch.randn(*size, generator=g, dtype=torch.float64) / size[-1] ** 0.5).to(device, dtype)

    layers = [{"qkv": weight(3 * d, d), "proj": weight(d, d), "up": weight(f, d), "down": weight(d, f)}
              for _ in range(shape["layers"])]
    x = torch.randn(shape["batch"], shape["seq_len"], d, generator=g, dtype=torch.float64).to(device, dtype)
    return layers, x


def _forward(layers, x, shape: dict):
    import torch.nn.functional as F

    from harness.integration import attention

    b, n, d = x.shape
    h, hd = shape["heads"], shape["head_dim"]
    for w in layers:
        a = F.layer_norm(x, (d,))
        q, k, v = F.linear(a, w["qkv"]).view(b, n, 3, h, hd).permute(2, 0, 3, 1, 4)
        o = attention(q, k, v, causal=True)  # (B, H, N, D): the kernel the harness chose
        x = x + F.linear(o.transpose(1, 2).reshape(b, n, d), w["proj"])
        m = F.layer_norm(x, (d,))
        x = x + F.linear(F.gelu(F.linear(m, w["up"])), w["down"])
    return x


def step(device: str, dtype):
    """One forward step of the SHAPE model on ``device`` in ``dtype`` (harness.integration)."""
    import torch

    layers, x = _model(device, dtype, SHAPE)

    def run():
        with torch.no_grad():
            return _forward(layers, x, SHAPE)

    return run
