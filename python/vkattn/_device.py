"""Device tensors and KV caches: data that stays in a Context's device memory between calls, so a
Python decode loop appends one token's keys and values and attends over the whole cache without
copying the cache to the host (vkattn::DeviceTensor, vkattn::KvCache, vkattn::PagedKvCache)."""

import numpy as np

from . import _vkattn
from ._context import default_context
from ._sdpa import _bindable, _is_torch, _numpy

_HOST_DTYPES = {"f32": np.float32, "f16": np.float16}


class Tensor:
    """A rank-4 tensor [B, H, N, D] in device memory. Arrays of rank 2 or 3 gain leading 1s."""

    def __init__(self, handle, context):
        self._handle = handle
        self._context = context

    @classmethod
    def from_numpy(cls, array, context=None):
        """A device copy of a float32 or float16 array (or CPU torch tensor), blocking."""
        context = context or default_context()
        a = _numpy(array, "array")
        if a.ndim < 2 or a.ndim > 4:
            raise ValueError(f"array: a device tensor has 2 to 4 dimensions; the shape is {a.shape}.")
        a = _bindable(a.reshape((1,) * (4 - a.ndim) + a.shape))
        return cls(_vkattn.Tensor.from_numpy(context, a), context)

    from_torch = from_numpy

    @classmethod
    def empty(cls, shape, dtype="float32", context=None):
        """Uninitialised device memory of `shape` (4 dimensions) and `dtype` (float32, float16,
        bfloat16, or one of the engine's storage types: q8_0, fp8_e4m3, ...)."""
        context = context or default_context()
        name = dtype if isinstance(dtype, str) else str(np.dtype(dtype))
        return cls(_vkattn.Tensor.empty(context, [int(d) for d in shape], name), context)

    @property
    def shape(self):
        return tuple(self._handle.shape)

    @property
    def dtype(self):
        """The engine's name of the storage type: f32, f16, bf16, q8_0, ..."""
        return self._handle.dtype

    def numpy(self):
        """The elements as a NumPy array (float32 or float16), blocking."""
        if self.dtype not in _HOST_DTYPES:
            raise ValueError(f"dtype: a {self.dtype} tensor has no NumPy form here; read it as f32 or f16.")
        out = np.empty(self.shape, dtype=_HOST_DTYPES[self.dtype])
        self._handle.to_numpy(out)
        return out

    def __repr__(self):
        return f"vkattn.Tensor(shape={self.shape}, dtype={self.dtype})"


def _device(x, name, context):
    if isinstance(x, Tensor):
        return x
    try:
        return Tensor.from_numpy(x, context)
    except ValueError as e:
        raise ValueError(f"{name}: {str(e).split(': ', 1)[1]}") from None


class KVCache:
    """A KV cache on the device: K [batch, kv_heads, capacity, dim] and V [.., dim_v] in `dtype`
    (float32, float16, bfloat16, q8_0, q4_0, ..., fp8_e4m3; new rows are rounded or quantized on the
    device), contiguous or paged (blocks of `block_size` keys, allocated as sequences grow).

        cache = vkattn.KVCache(batch=1, kv_heads=8, dim=64, capacity=4096)
        cache.append(k_prompt, v_prompt)           # [B, Hkv, T, D]
        for step in range(n):
            cache.append(k_new, v_new)             # [B, Hkv, 1, D]
            out = cache.attention(q_new)           # [B, Hq, 1, Dv]: causal, bottom-right
    """

    def __init__(self, batch, kv_heads, dim, capacity, dtype="float32", paged=False, block_size=16, *, dim_v=None,
                 context=None):
        self._context = context or default_context()
        self._handle = _vkattn.Cache(self._context, int(batch), int(kv_heads), int(dim), int(dim_v or 0),
                                     int(capacity), str(dtype), bool(paged), int(block_size))
        self.batch, self.kv_heads, self.dim, self.dim_v = int(batch), int(kv_heads), int(dim), int(dim_v or dim)
        self.paged = bool(paged)

    @property
    def lengths(self):
        """The keys each sequence holds."""
        return list(self._handle.lengths)

    @property
    def capacity(self):
        return self._handle.capacity

    def append(self, k, v, counts=None):
        """Appends new keys and values [B, Hkv, T, D] (arrays, CPU torch tensors or vkattn.Tensor,
        float32 or float16; one dtype for both) at each sequence's length; `counts` takes the first
        counts[b] rows of sequence b (default: all T). Blocking."""
        kt, vt = _device(k, "k", self._context), _device(v, "v", self._context)
        self._handle.append(kt._handle, vt._handle, [] if counts is None else [int(c) for c in counts])

    def reset(self, lengths=None):
        """Sets the lengths (default: all 0); the rows stay until overwritten."""
        self._handle.reset([] if lengths is None else [int(n) for n in lengths])

    def attention(self, q, *, scale=None, causal=True, window=None, softcap=None, alibi_max_bias=None, impl="auto",
                  return_lse=False):
        """Attention of queries q [B, Hq, T, D] (Hq a multiple of kv_heads) over the cache, query t of
        sequence b at position length[b] - T + t: with `causal` (default) it sees the keys up to its
        own position (bottom-right alignment). Returns [B, Hq, T, Dv] of q's dtype and type: a
        vkattn.Tensor stays on the device; an array or torch tensor comes back as one. With
        return_lse also the rows' log-sum-exp [B, Hq, T] (float32)."""
        qt = _device(q, "q", self._context)
        B, H, T, _ = qt.shape
        o = Tensor.empty((B, H, T, self.dim_v), qt.dtype, self._context)
        lse = Tensor.empty((B, H, T, 1), "f32", self._context) if return_lse else None
        call = _vkattn.AttentionCall()
        call.causal = "bottom-right" if causal else "none"
        if window is not None:
            call.window_left, call.window_right = (int(w) for w in window)
        call.scale = None if scale is None else float(scale)
        call.softcap = None if softcap is None else float(softcap)
        call.alibi_max_bias = None if alibi_max_bias is None else float(alibi_max_bias)
        call.impl = impl
        self._handle.attention(qt._handle, o._handle, None if lse is None else lse._handle, call)
        if isinstance(q, Tensor):
            return (o, lse) if return_lse else o
        results = [o.numpy()] + ([lse.numpy().reshape(B, H, T)] if return_lse else [])
        if _is_torch(q):
            import torch

            results = [torch.from_numpy(r) for r in results]
        return tuple(results) if return_lse else results[0]
