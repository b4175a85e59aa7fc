"""Shared fixtures: one validation-enabled context for the whole session (a Khronos validation
message fails the test that caused it), and float64 attention math written in torch (Debian's torch
1.13 has no scaled_dot_product_attention)."""

import math
import os

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
# The tests expect the tuning functions' own choices: a table `vk-attn tune` left here is ignored.
os.environ.setdefault("VKATTN_TUNING", "off")

import vkattn  # noqa: E402


@pytest.fixture(scope="session")
def context():
    return vkattn.Context(validation=True)


@pytest.fixture(autouse=True)
def no_validation_messages(context):
    context.clear_validation_messages()
    yield
    assert context.validation_messages() == []


def attention_math(q, k, v, *args, **kwargs):
    """attention_torch on arrays, as float64 NumPy arrays (out, weights)."""
    import torch

    q, k, v = (torch.as_tensor(np.asarray(x, dtype=np.float64)) for x in (q, k, v))
    out, p = attention_torch(q, k, v, *args, **kwargs)
    return out.numpy(), p.numpy()


def attention_torch(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *, window=None,
                    softcap=None, alibi_slopes=None, sinks=None, kv_lengths=None, causal_alignment="top-left"):
    """The definition (docs/SEMANTICS.md) in torch, differentiable (float64 tensors of shape
    (..., L, E); sinks a tensor to differentiate it): a row that sees no key gives zeros."""
    import torch

    if enable_gqa and q.dim() >= 3:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    L, S = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L).view(L, 1)
    j = torch.arange(S).view(1, S)
    allowed = torch.ones(s.shape, dtype=torch.bool)
    lengths = None
    if kv_lengths is not None:
        lead = s.shape[:-2]
        lengths = torch.as_tensor(np.asarray(kv_lengths)).reshape(lead[:-1] + (1, 1, 1) if len(lead) else (1, 1))
        allowed &= j < lengths
    if is_causal:
        offset = (S if lengths is None else lengths) - L if causal_alignment == "bottom-right" else 0
        allowed &= j <= i + offset
    if window is not None:
        left, right = window
        offset = (S if lengths is None else lengths) - L if (is_causal and causal_alignment == "bottom-right") else 0
        if left >= 0:
            allowed &= j >= i + offset - left
        if right >= 0:
            allowed &= j <= i + offset + right
    if alibi_slopes is not None:
        slopes = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float64)).view(-1, 1, 1)
        s = s - slopes * (i - j).abs()
    if attn_mask is not None:
        m = torch.as_tensor(np.asarray(attn_mask))
        if m.dtype == torch.bool:
            allowed &= m
        else:
            s = s + m.double()
            allowed &= ~torch.isneginf(m)
    s = s.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        sinks = sinks if isinstance(sinks, torch.Tensor) else torch.as_tensor(np.asarray(sinks, dtype=np.float64))
        sink = sinks.double().view(-1, 1, 1).expand(s.shape[:-1] + (1,))
        s = torch.cat([s, sink], dim=-1)
    peak = s.max(dim=-1, keepdim=True).values
    peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak).detach()
    e = torch.exp(s - peak)
    p = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v, p


def assert_close(got, want, dtype=np.float32):
    """The engine's tolerance for a storage type: fp32 about 1e-5 of the largest value, fp16 3e-3."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = max(np.abs(want).max(), 1e-30)
    tol = 2e-5 if np.dtype(dtype) == np.float32 else 3e-3
    assert got.shape == want.shape
    assert np.all(np.isfinite(got)), "non-finite output"
    err = np.abs(got - want).max() / scale
    assert err <= tol, f"max error {err:.3g} of the largest value (tolerance {tol})"
