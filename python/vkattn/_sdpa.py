"""scaled_dot_product_attention: PyTorch 2.x's torch.nn.functional.scaled_dot_product_attention,
same signature and semantics for what they share, plus vkattn's features, on NumPy arrays and CPU
torch tensors. This module only arranges arguments: shapes into the engine's [B, H, N, D] views
(zero-copy where the strides allow), PyTorch's masks into the engine's; the engine computes."""

import math

import numpy as np

from . import _vkattn
from ._context import default_context

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _numpy(x, name):
    """An array argument as a NumPy array (a CPU torch tensor's memory shared, not copied)."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: the tensor is on {x.device}; vkattn reads CPU memory (move it with .cpu()).")
        try:
            return x.detach().numpy()
        except TypeError:  # a dtype NumPy lacks (bfloat16)
            raise ValueError(f"{name}: its dtype is {x.dtype}; inputs are float32 or float16 (convert with "
                             ".float() or .half()).") from None
    return np.asarray(x)


def _float_input(x, name, dtype):
    a = _numpy(x, name)
    if dtype is not None:
        try:
            target = np.dtype(dtype)
        except TypeError:
            target = None
        if target not in _FLOAT_DTYPES:
            raise ValueError(f"dtype: {dtype!r} is not one the inputs can be converted to; give float32 or float16.")
        a = a.astype(target, copy=False)
    if a.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name}: its dtype is {a.dtype}; inputs are float32 or float16.")
    if a.ndim < 2:
        raise ValueError(f"{name}: it needs at least 2 dimensions (sequence, features); its shape is {a.shape}.")
    return a


def _bindable(view):
    """A rank-4 view as the engine reads it: itself when its feature stride is one element and every
    stride a non-negative whole number of elements, else a dense copy."""
    item = view.itemsize
    if view.strides[3] != item or any(s < 0 or s % item for s in view.strides):
        return np.ascontiguousarray(view)
    return view


def _rank4(a, batch):
    """[..., H, N, D] as [B, H, N, D] (2-D: [1, 1, N, D]): a view where NumPy can reshape without a
    copy (_bindable), else a dense copy."""
    return _bindable(a.reshape((1, 1) + a.shape) if a.ndim == 2 else a.reshape((batch,) + a.shape[-3:]))


def _ints(x, name, count, dtype):
    a = np.ascontiguousarray(_numpy(x, name), dtype=dtype).reshape(-1)
    if a.size != count:
        raise ValueError(f"{name}: it has {a.size} values but must have {count}.")
    return a


def _mask(mask, full_shape, batch):
    """A PyTorch attn_mask (bool: True = take part; float: added), broadcastable to `full_shape`
    (the scores' [..., H, L, S]), as the engine's rank-4 C-contiguous mask: its own size kept on the
    last three dimensions (1 where it broadcasts), the leading ones merged into the batch."""
    m = _numpy(mask, "attn_mask")
    if m.dtype != np.bool_ and m.dtype.kind != "f":
        raise ValueError(f"attn_mask: its dtype is {m.dtype}; a mask is bool (True = take part) or float (added).")
    try:
        if np.broadcast_shapes(m.shape, full_shape) != tuple(full_shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"attn_mask: its shape {tuple(m.shape)} does not broadcast to the scores' "
                         f"{tuple(full_shape)}.") from None
    m = m.reshape((1,) * (len(full_shape) - m.ndim) + m.shape)
    if len(full_shape) == 2:
        m4 = m.reshape((1, 1) + m.shape)
    else:
        lead, tail = m.shape[:-3], m.shape[-3:]
        if all(d == 1 for d in lead):
            m4 = m.reshape((1,) + tail)
        else:
            m4 = np.broadcast_to(m, tuple(full_shape[:-3]) + tail).reshape((batch,) + tail)
    if m.dtype == np.bool_:
        return np.ascontiguousarray(m4, dtype=np.uint8), True
    return np.ascontiguousarray(m4, dtype=np.float32), False


class _Prepared:
    """One call's engine arguments (`call`) and what shapes its results: the leading dimensions,
    the heads, L, S and whether the query was a torch tensor."""

    def __init__(self, call, lead, heads, L, S, Ev, batch, ndim, torch_out):
        self.call, self.lead, self.heads, self.L, self.S, self.Ev = call, lead, heads, L, S, Ev
        self.batch, self.ndim, self.torch_out = batch, ndim, torch_out

    def shaped(self, array, *tail):
        """A [B, H, ...] result in the caller's leading dimensions (none for 2-D inputs)."""
        head = self.lead + (array.shape[1],) if self.ndim >= 3 else ()
        return array.reshape(head + tuple(tail))


def _prepare(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
             window=None, softcap=None, alibi_slopes=None, alibi_max_bias=None, sinks=None, kv_lengths=None,
             causal_alignment="top-left", seed=0, impl="auto", dtype=None):
    torch_out = _is_torch(query)
    q = _float_input(query, "query", dtype)
    k = _float_input(key, "key", dtype)
    v = _float_input(value, "value", dtype)
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"key: query, key and value must have the same rank; their shapes are {q.shape}, {k.shape}, "
                         f"{v.shape}.")
    lead = q.shape[:-3] if q.ndim >= 3 else ()
    for name, t in (("key", k), ("value", v)):
        if (t.shape[:-3] if t.ndim >= 3 else ()) != lead:
            raise ValueError(f"{name}: its leading dimensions {t.shape[:-3]} must be the query's {lead}.")
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3] and not enable_gqa:
        raise ValueError(f"key: the query has {q.shape[-3]} heads and the key {k.shape[-3]}; pass enable_gqa=True "
                         "for grouped-query attention (query heads a multiple of the key's).")
    batch = int(np.prod(lead)) if lead else 1
    heads = q.shape[-3] if q.ndim >= 3 else 1
    L, S = q.shape[-2], k.shape[-2]

    call = _vkattn.AttentionCall()
    call.q, call.k, call.v = _rank4(q, batch), _rank4(k, batch), _rank4(v, batch)
    if attn_mask is not None:
        if is_causal:
            raise ValueError("attn_mask: give either attn_mask or is_causal=True, not both (as PyTorch).")
        full = lead + (heads, L, S) if q.ndim >= 3 else (L, S)
        m, is_bool = _mask(attn_mask, full, batch)
        if is_bool:
            call.bool_mask = m
        else:
            call.float_mask = m
    if is_causal:
        call.causal = causal_alignment
    elif causal_alignment not in ("top-left", "bottom-right"):
        raise ValueError(f'causal_alignment: must be "top-left" or "bottom-right", not {causal_alignment!r}.')
    if kv_lengths is not None:
        call.kv_lengths = _ints(kv_lengths, "kv_lengths", batch, np.int32)
    if alibi_slopes is not None:
        call.alibi_slopes = _ints(alibi_slopes, "alibi_slopes", heads, np.float32)
    if sinks is not None:
        call.sinks = _ints(sinks, "sinks", heads, np.float32)
    if window is not None:
        try:
            left, right = (int(w) for w in window)
        except (TypeError, ValueError):
            raise ValueError(f"window: must be (left, right), numbers of keys (-1 = unbounded), not {window!r}.") from None
        call.window_left, call.window_right = left, right
    call.scale = None if scale is None else float(scale)
    call.softcap = None if softcap is None else float(softcap)
    call.alibi_max_bias = None if alibi_max_bias is None else float(alibi_max_bias)
    call.dropout = float(dropout_p)
    if int(seed) < 0:
        raise ValueError(f"seed: must be a non-negative integer below 2**64, not {seed}.")
    call.seed = int(seed)
    call.impl = impl
    return _Prepared(call, lead, heads, L, S, v.shape[-1], batch, q.ndim, torch_out)


def _results(prepared, arrays):
    if prepared.torch_out:
        import torch

        arrays = [torch.from_numpy(a) for a in arrays]
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
               return_lse=False, return_weights=False, context=None, reference=False, **options):
    p = _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, **options)
    call = p.call
    out = np.empty((p.batch, p.heads, p.L, p.Ev), dtype=call.q.dtype)
    call.out = out
    lse = weights = None
    if return_lse:
        lse = np.empty((p.batch, p.heads, p.L), dtype=np.float32)
        call.lse = lse
    if return_weights:
        weights = np.empty((p.batch, p.heads, p.L, p.S), dtype=np.float32)
        call.weights = weights
    _vkattn.run_attention(None if reference else (context or default_context()), call)
    results = [p.shaped(out, p.L, p.Ev)]
    if return_weights:
        results.append(p.shaped(weights, p.L, p.S))
    if return_lse:
        results.append(p.shaped(lse, p.L))
    return _results(p, results)


def _attention_backward(query, key, value, grad_out, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False, *, want=(True, True, True, False), context=None, reference=False, **options):
    """The gradients (dquery, dkey, dvalue, dsinks) of the call for grad_out, each None where `want`
    says no; in the inputs' shapes and dtypes (dsinks float32 [H])."""
    p = _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, **options)
    call = p.call
    g = _numpy(grad_out, "grad_out")
    expected = p.lead + ((p.heads,) if p.ndim >= 3 else ()) + (p.L, p.Ev)
    if g.shape != expected:
        raise ValueError(f"grad_out: its shape is {g.shape} but must be the output's, {expected}.")
    grads = _vkattn.Gradients()
    results = [None, None, None, None]
    originals = (np.shape(_numpy(query, "query")), np.shape(_numpy(key, "key")), np.shape(_numpy(value, "value")))
    for i, (name, source) in enumerate((("dq", call.q), ("dk", call.k), ("dv", call.v))):
        if want[i]:
            results[i] = np.empty(source.shape, dtype=source.dtype)
            setattr(grads, name, results[i])
    if want[3]:
        if call.sinks is None:
            raise ValueError("sinks: there are no sinks to differentiate.")
        results[3] = np.empty(p.heads, dtype=np.float32)
        grads.d_sinks = results[3]
    _vkattn.run_attention_backward(None if reference else (context or default_context()), call,
                                   _rank4(g.astype(call.q.dtype, copy=False), p.batch), grads)
    for i in range(3):
        if results[i] is not None:
            results[i] = results[i].reshape(originals[i])
    if p.torch_out:
        import torch

        results = [None if r is None else torch.from_numpy(r) for r in results]
    return tuple(results)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, window=None, softcap=None, alibi_slopes=None, alibi_max_bias=None,
                                 sinks=None, kv_lengths=None, causal_alignment="top-left", seed=0, return_lse=False,
                                 return_weights=False, impl="auto", dtype=None, context=None):
    """Attention as torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x) computes it.

    query (..., L, E), key (..., S, E), value (..., S, Ev): NumPy arrays or CPU torch tensors, float32
    or float16, any strides; with 3 or more dimensions the third from last is the heads (enable_gqa:
    the query's a multiple of the key's). attn_mask: bool (True = take part in attention) or float
    (added to the scaled scores), broadcastable to (..., L, S); not with is_causal. scale: default
    1/sqrt(E). A query row that sees no key gives zeros (PyTorch gives NaN).

    vkattn's own: window=(left, right) keys around the diagonal (-1 unbounded); softcap c
    (s -> c·tanh(s/c)); alibi_slopes [H] or alibi_max_bias; sinks [H] (attention-sink logits);
    kv_lengths (one per batch element: keys past it masked); causal_alignment "top-left" (PyTorch's)
    or "bottom-right" (FlashAttention's, for KV caches); seed (dropout's Philox key; the same seed
    drops the same weights); impl "auto", "fused", "unfused" or "split"; dtype converts the inputs
    (float32 or float16) first; context (default: vkattn.default_context()).

    Returns out (the query's type; its dtype, or `dtype` when given), or (out, lse) with return_lse, (out, weights) with
    return_weights, (out, weights, lse) with both; lse (..., L) and weights (..., L, S) are float32.
    """
    return _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window=window,
                      softcap=softcap, alibi_slopes=alibi_slopes, alibi_max_bias=alibi_max_bias, sinks=sinks,
                      kv_lengths=kv_lengths, causal_alignment=causal_alignment, seed=seed, return_lse=return_lse,
                      return_weights=return_weights, impl=impl, dtype=dtype, context=context)
