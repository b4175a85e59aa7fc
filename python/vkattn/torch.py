"""vkattn for PyTorch, on CPU tensors: scaled_dot_product_attention as an autograd Function whose
backward is the engine's backward pass (docs/SEMANTICS.md, "The backward pass"), and
MultiheadAttention, nn.MultiheadAttention's drop-in over the engine's multi-head layer.

    out = vkattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()            # fills q.grad, k.grad, v.grad (and sinks.grad)
    layer.self_attn = vkattn.torch.MultiheadAttention.from_module(layer.self_attn)
"""

import contextlib
import copy

import numpy as np
import torch

from . import _vkattn
from ._context import default_context, keep_for_backward
from ._sdpa import _attention, _attention_backward


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, sinks, context, options):
        ctx.save_for_backward(query, key, value, sinks)
        ctx.options = options
        keep_for_backward(ctx, context)  # not in options: let go at exit (vkattn/_context.py)
        return _attention(query, key, value, sinks=sinks, context=context, **options)

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, sinks = ctx.saved_tensors
        want = tuple(ctx.needs_input_grad[:4])
        grads = _attention_backward(query, key, value, grad_out.contiguous(), sinks=sinks, want=want,
                                    context=ctx.context, **ctx.options)
        # Each gradient in its input's dtype (options["dtype"] may have computed in another).
        inputs = (query, key, value, sinks)
        dq, dk, dv, dsinks = (None if g is None else g.to(t.dtype) for g, t in zip(grads, inputs))
        return dq, dk, dv, dsinks, None, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, window=None, softcap=None, alibi_slopes=None, alibi_max_bias=None,
                                 sinks=None, kv_lengths=None, causal_alignment="top-left", seed=None, impl="auto",
                                 dtype=None, context=None):
    """vkattn.scaled_dot_product_attention on torch tensors, differentiable: gradients flow to query,
    key, value and sinks (a float attn_mask is a constant here). With dropout, each call draws its
    Philox seed from torch's generator (as PyTorch draws fresh randomness) unless `seed` is given;
    the backward regenerates the forward's mask from it. The extra outputs (return_lse,
    return_weights) are the non-differentiable function's."""
    if seed is None:
        seed = _drawn_seed() if dropout_p > 0 else 0
    options = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa,
                   window=window, softcap=softcap, alibi_slopes=alibi_slopes, alibi_max_bias=alibi_max_bias,
                   kv_lengths=kv_lengths, causal_alignment=causal_alignment, seed=seed, impl=impl, dtype=dtype)
    if sinks is not None and not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=torch.float32)
    return _Attention.apply(query, key, value, sinks, context, options)


def _drawn_seed():
    """A dropout seed from torch's generator: torch.manual_seed makes a run reproducible."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _float32(t):
    return np.ascontiguousarray(t.detach().to(torch.float32).numpy())


def _mask(mask):
    """A PyTorch mask (bool: True = NOT allowed; float: added) as (array, is_bool) for the engine."""
    if mask is None:
        return None, False
    if mask.dtype == torch.bool:
        return np.ascontiguousarray(mask.detach().numpy().view(np.uint8)), True
    return _float32(mask), False


def _mha_call(spec, query, key, value, parameters):
    """The engine's call for one nn.MultiheadAttention forward: its config, parameters and inputs.
    Inputs autograd sees as distinct get arrays of their own, even over shared memory (the engine
    takes one pointer for one input), so each collects its own gradient."""
    call = _vkattn.MhaCall()
    for field in ("embed_dim", "num_heads", "kdim", "vdim", "bias", "batch_first", "average_attn_weights", "impl",
                  "dropout", "seed"):
        setattr(call, field, spec[field])
    call.parameters = {name: _float32(p) for name, p in zip(spec["names"], parameters)}
    q = _float32(query)
    k = q if key is query else _own(_float32(key), q)
    v = q if value is query else k if value is key else _own(_float32(value), q, k)
    call.query, call.key, call.value = q, k, v
    call.key_padding_mask, call.key_padding_mask_bool = _mask(spec["key_padding_mask"])
    call.attn_mask, call.attn_mask_bool = _mask(spec["attn_mask"])
    return call


def _own(array, *others):
    """`array`, copied if it shares its first element with one of `others`."""
    return array.copy() if any(np.may_share_memory(array, o) for o in others) else array


class _MhaFunction(torch.autograd.Function):
    """One nn.MultiheadAttention call through the engine's layer (vkattn/mha.hpp): forward and
    backward on `context` (None: the default), the parameters given in `spec["names"]` order after
    query, key and value. The tensors are saved for the backward (so an in-place change in between is
    caught, as torch's own)."""

    @staticmethod
    def forward(ctx, spec, context, query, key, value, *parameters):
        call = _mha_call(spec, query, key, value, parameters)
        shape = tuple(query.shape[:-1]) + (spec["embed_dim"],)
        out = np.empty(shape, dtype=np.float32)
        weights = np.empty(spec["weights_shape"], dtype=np.float32) if spec["weights_shape"] else None
        _vkattn.mha_forward(context or default_context(), call, out, weights)
        ctx.spec = spec
        keep_for_backward(ctx, context)  # not in spec: let go at exit (vkattn/_context.py)
        ctx.save_for_backward(query, key, value, *parameters)
        ctx.same = (key is query, value is query, value is key)
        weights_out = torch.from_numpy(weights).to(query.dtype) if weights is not None else torch.empty(0)
        ctx.mark_non_differentiable(weights_out)
        return torch.from_numpy(out).to(query.dtype), weights_out

    @staticmethod
    def backward(ctx, grad_out, grad_weights):
        spec = ctx.spec
        query, key, value, *parameters = ctx.saved_tensors
        # Rebuilt from the saved tensors: the identity tests hold as in forward (saved tensors
        # unpack to the same objects only for inputs; compare the recorded flags instead).
        key = query if ctx.same[0] else key
        value = query if ctx.same[1] else key if ctx.same[2] else value
        call = _mha_call(spec, query, key, value, parameters)
        own_key, own_value = not ctx.same[0], not (ctx.same[1] or ctx.same[2])
        d_query = np.empty(tuple(query.shape), dtype=np.float32)
        d_key = np.empty(tuple(key.shape), dtype=np.float32) if own_key else None
        d_value = np.empty(tuple(value.shape), dtype=np.float32) if own_value else None
        d_parameters = {name: np.empty(tuple(p.shape), dtype=np.float32) for name, p in zip(spec["names"], parameters)}
        result = _vkattn.mha_backward(ctx.context or default_context(), call, _float32(grad_out), d_query, d_key,
                                      d_value, d_parameters)
        own = result["own_gradient"]
        if own["key"] != own_key or own["value"] != own_value:
            raise RuntimeError("vkattn: the engine saw other inputs than autograd (an internal error).")
        as_type = lambda array, like: torch.from_numpy(array).to(like.dtype)  # noqa: E731
        dq = as_type(d_query, query)
        dk = as_type(d_key, key) if d_key is not None else None
        dv = as_type(d_value, value) if d_value is not None else None
        grads = [as_type(d_parameters[name], p) for name, p in zip(spec["names"], parameters)]
        return (None, None, dq, dk, dv, *grads)


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention computed by vkattn: the same constructor, parameters, state_dict()
    keys and forward signature, a drop-in replacement (inside nn.TransformerEncoderLayer too), with
    gradients for the inputs and every parameter from the engine's backward pass. Dropout (in
    training mode) uses vkattn's Philox generator with a seed drawn from torch's. Not supported:
    add_bias_kv, add_zero_attn. Extra keywords: impl, context."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None, *, impl="auto", context=None):
        if add_bias_kv or add_zero_attn:
            raise ValueError("add_bias_kv: vkattn's MultiheadAttention takes neither add_bias_kv nor add_zero_attn.")
        super().__init__(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first,
                         device=device, dtype=dtype)
        self.impl = impl
        self.context = context

    @classmethod
    def from_module(cls, module, *, impl="auto", context=None):
        """A vkattn module over an existing nn.MultiheadAttention's parameters (shared, not copied: a
        step of either's optimiser moves both)."""
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("module: vkattn's MultiheadAttention takes neither add_bias_kv nor add_zero_attn.")
        new = copy.copy(module)  # the same parameter and submodule dicts
        new.__class__ = cls
        new.impl = impl
        new.context = context
        return new

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        L = query.shape[1 if self.batch_first and batched else 0]
        S = key.shape[1 if self.batch_first and batched else 0]
        if is_causal and attn_mask is None:
            attn_mask = torch.ones(L, S, dtype=torch.bool).triu(1)  # True = not allowed
        weights_shape = None
        if need_weights:
            N = query.shape[0 if self.batch_first else 1] if batched else None
            per_head = (self.num_heads, L, S) if not average_attn_weights else (L, S)
            weights_shape = ((N,) if batched else ()) + per_head
        dropout = self.dropout if self.training else 0.0
        names = [name for name, _ in self.named_parameters()]
        spec = dict(embed_dim=self.embed_dim, num_heads=self.num_heads, kdim=self.kdim, vdim=self.vdim,
                    bias=self.in_proj_bias is not None, batch_first=self.batch_first,
                    average_attn_weights=average_attn_weights, impl=self.impl, dropout=float(dropout),
                    seed=_drawn_seed() if dropout > 0 else 0, names=names,
                    key_padding_mask=key_padding_mask, attn_mask=attn_mask, weights_shape=weights_shape)
        out, weights = _MhaFunction.apply(spec, self.context, query, key, value,
                                          *(p for _, p in self.named_parameters()))
        return out, (weights.detach() if need_weights else None)


@contextlib.contextmanager
def use_for_sdpa(**options):
    """Within the block, torch.nn.functional.scaled_dot_product_attention is vkattn's (differentiable,
    `options` added to every call: impl, context, ...). Where the installed torch has no SDPA
    (Debian's 1.13), the block provides one, so code written for PyTorch 2 runs; afterwards torch's
    own (or none) is back."""
    functional = torch.nn.functional
    missing = object()
    previous = getattr(functional, "scaled_dot_product_attention", missing)

    def routed(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                            **options)

    functional.scaled_dot_product_attention = routed
    try:
        yield
    finally:
        if previous is missing:
            del functional.scaled_dot_product_attention
        else:
            functional.scaled_dot_product_attention = previous
