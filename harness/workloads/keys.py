"""Config keys as people read them: the short forms tables, axes and CONFIG arguments use."""

from __future__ import annotations


def shorten(keys, sep: str = " ") -> tuple[dict[str, str], str]:
    """Config keys as a table or an axis shows them: ({key: the '/'-separated fields that differ
    between the keys, joined by ``sep``}, the fields every key shares, '/'-joined, "" when none).
    With spaces a cell wraps between fields, never inside one: among keys that differ only in
    seq_len, dtype and causal, "attention/b8/h16/kv16/n4096/d128/float16/full" reads "n4096
    float16 full" and the title says "attention/b8/h16/kv16/d128" once."""
    keys = list(dict.fromkeys(keys))
    parts = [k.split("/") for k in keys]
    if len(keys) < 2 or len({len(p) for p in parts}) != 1:
        return {k: sep.join(p) for k, p in zip(keys, parts)}, ""
    keep = [i for i in range(len(parts[0])) if len({p[i] for p in parts}) > 1]
    shared = "/".join(parts[0][i] for i in range(len(parts[0])) if i not in keep)
    return {k: sep.join(p[i] for i in keep) for k, p in zip(keys, parts)}, shared
