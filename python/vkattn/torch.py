"""vkattn for PyTorch: scaled_dot_product_attention as an autograd Function whose backward is the
engine's backward pass (docs/SEMANTICS.md, "The backward pass"), on CPU tensors.

    out = vkattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()            # fills q.grad, k.grad, v.grad (and sinks.grad)
"""

import torch

from ._sdpa import _attention, _attention_backward


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, sinks, options):
        ctx.save_for_backward(query, key, value, sinks)
        ctx.options = options
        return _attention(query, key, value, sinks=sinks, **options)

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, sinks = ctx.saved_tensors
        want = tuple(ctx.needs_input_grad[:4])
        grads = _attention_backward(query, key, value, grad_out.contiguous(), sinks=sinks, want=want, **ctx.options)
        # Each gradient in its input's dtype (options["dtype"] may have computed in another).
        inputs = (query, key, value, sinks)
        dq, dk, dv, dsinks = (None if g is None else g.to(t.dtype) for g, t in zip(grads, inputs))
        return dq, dk, dv, dsinks, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, window=None, softcap=None, alibi_slopes=None, alibi_max_bias=None,
                                 sinks=None, kv_lengths=None, causal_alignment="top-left", seed=0, impl="auto",
                                 dtype=None, context=None):
    """vkattn.scaled_dot_product_attention on torch tensors, differentiable: gradients flow to query,
    key, value and sinks (a float attn_mask is a constant here). Dropout regenerates the forward's
    mask from `seed` in the backward. The extra outputs (return_lse, return_weights) are the
    non-differentiable function's."""
    options = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa,
                   window=window, softcap=softcap, alibi_slopes=alibi_slopes, alibi_max_bias=alibi_max_bias,
                   kv_lengths=kv_lengths, causal_alignment=causal_alignment, seed=seed, impl=impl, dtype=dtype,
                   context=context)
    if sinks is not None and not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=torch.float32)
    return _Attention.apply(query, key, value, sinks, options)
