"""The library's CPU reference (double accumulation), with the same signature as the device's
functions: the ground truth the engine is tested against."""

from ._sdpa import _attention


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, **options):
    """vkattn.scaled_dot_product_attention computed on the CPU (`impl` and `context` are ignored)."""
    options.pop("context", None)
    options.pop("impl", None)
    return _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, reference=True, **options)
