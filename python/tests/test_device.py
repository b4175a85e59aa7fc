"""vkattn.Tensor and vkattn.KVCache: round trips, and decode loops over contiguous and paged caches
(f32, f16, a quantized cache) against the float64 definition over the whole sequence so far."""

import numpy as np
import pytest
import torch

import vkattn
from conftest import assert_close, attention_math

rng = np.random.default_rng(5)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_tensor_round_trip(context):
    a = randn(2, 3, 5, 8)
    t = vkattn.Tensor.from_numpy(a, context=context)
    assert t.shape == (2, 3, 5, 8) and t.dtype == "f32"
    assert np.array_equal(t.numpy(), a)
    h = vkattn.Tensor.from_numpy(torch.from_numpy(randn(5, 8, dtype=np.float16)), context=context)
    assert h.shape == (1, 1, 5, 8) and h.numpy().dtype == np.float16
    strided = randn(2, 6, 3, 8).transpose(0, 2, 1, 3)  # a non-contiguous view
    assert np.array_equal(vkattn.Tensor.from_numpy(strided, context=context).numpy(), strided)
    with pytest.raises(ValueError, match="^array: "):
        vkattn.Tensor.from_numpy(randn(8), context=context)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_decode_loop(context, paged, dtype):
    B, Hq, Hkv, D, prompt, steps = 2, 4, 2, 16, 7, 5
    cache = vkattn.KVCache(B, Hkv, D, capacity=40, dtype=dtype, paged=paged, block_size=4, context=context)
    host_dtype = np.float16 if dtype == "float16" else np.float32
    keys, values = randn(B, Hkv, prompt, D, dtype=host_dtype), randn(B, Hkv, prompt, D, dtype=host_dtype)
    cache.append(keys, values)
    assert cache.lengths == [prompt, prompt]
    for step in range(steps):
        k, v = randn(B, Hkv, 1, D, dtype=host_dtype), randn(B, Hkv, 1, D, dtype=host_dtype)
        cache.append(vkattn.Tensor.from_numpy(k, context=context), v)
        keys, values = np.concatenate([keys, k], 2), np.concatenate([values, v], 2)
        q = randn(B, Hq, 1, D, dtype=host_dtype)
        out = cache.attention(q)
        assert out.shape == (B, Hq, 1, D) and out.dtype == host_dtype
        want = attention_math(q, keys, values, enable_gqa=True, is_causal=True, causal_alignment="bottom-right")[0]
        assert_close(out, want, host_dtype)
    assert cache.lengths == [prompt + steps] * B
    # A chunk of queries (prefill-style), on the device: the output stays a Tensor.
    q = vkattn.Tensor.from_numpy(randn(B, Hq, 3, D, dtype=host_dtype), context=context)
    out, lse = cache.attention(q, return_lse=True)
    assert isinstance(out, vkattn.Tensor) and lse.shape == (B, Hq, 3, 1)
    want = attention_math(q.numpy(), keys, values, enable_gqa=True, is_causal=True, causal_alignment="bottom-right")[0]
    assert_close(out.numpy(), want, host_dtype)


def test_quantized_cache_counts_and_reset(context):
    cache = vkattn.KVCache(1, 1, 32, capacity=16, dtype="q8_0", context=context)
    k, v = randn(1, 1, 6, 32), randn(1, 1, 6, 32)
    cache.append(k, v, counts=[4])  # the first 4 rows only
    assert cache.lengths == [4]
    q = randn(1, 1, 1, 32)
    out = cache.attention(torch.from_numpy(q), causal=False)
    assert isinstance(out, torch.Tensor)
    want = attention_math(q, k[:, :, :4], v[:, :, :4])[0]
    assert np.abs(out.numpy() - want).max() < 0.05 * np.abs(want).max() + 1e-3  # q8_0's rounding
    cache.reset()
    assert cache.lengths == [0]
    with pytest.raises(ValueError, match="capacity"):
        cache.append(randn(1, 1, 17, 32), randn(1, 1, 17, 32))
    with pytest.raises(ValueError, match="^dtype: "):
        vkattn.KVCache(1, 1, 32, capacity=16, dtype="float64", context=context)
