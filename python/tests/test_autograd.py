"""vkattn.torch.scaled_dot_product_attention under autograd: the engine's backward pass against torch
autograd of the float64 definition, feature by feature; dropout against the engine's CPU reference
backward with the same seed; only the gradients asked for."""

import numpy as np
import pytest
import torch

import vkattn
import vkattn.torch as vt
from vkattn._sdpa import _attention_backward
from conftest import assert_close, attention_torch

gen = torch.Generator().manual_seed(99)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def grads_of(fn, tensors, grad_out):
    out = fn(*tensors)
    out.backward(grad_out)
    return out, [t.grad for t in tensors]


FEATURES = [
    dict(),
    dict(is_causal=True),
    dict(is_causal=True, causal_alignment="bottom-right", kv_lengths=[9, 4]),
    dict(attn_mask="bool"),
    dict(attn_mask="float"),
    dict(enable_gqa=True),
    dict(window=(3, 2)),
    dict(softcap=1.5),
    dict(alibi_slopes=[0.5, 0.25, 0.125, 0.0625]),
    dict(sinks=[0.5, -1.0, 1.5, 0.0]),
    dict(scale=0.2),
]


@pytest.mark.parametrize("features", FEATURES, ids=lambda f: ",".join(f) or "plain")
@pytest.mark.parametrize("impl", ["fused", "unfused"])
def test_gradients_against_torch_autograd(context, features, impl):
    features = dict(features)
    hkv = 2 if features.get("enable_gqa") else 4
    q, k, v = randn(2, 4, 7, 16), randn(2, hkv, 9, 16), randn(2, hkv, 9, 12)
    if features.get("attn_mask") == "bool":
        mask = torch.rand(2, 1, 7, 9, generator=gen) < 0.7
        mask[..., 0] = True
        features["attn_mask"] = mask
    elif features.get("attn_mask") == "float":
        features["attn_mask"] = randn(7, 9)
    sinks = features.pop("sinks", None)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    tensors = [q.requires_grad_(), k.requires_grad_(), v.requires_grad_()]
    ref_inputs = [q64, k64, v64]
    if sinks is not None:
        tensors.append(torch.tensor(sinks, dtype=torch.float32, requires_grad=True))
        ref_inputs.append(torch.tensor(sinks, dtype=torch.float64, requires_grad=True))
    grad_out = randn(2, 4, 7, 12)

    def engine(*t):
        return vt.scaled_dot_product_attention(*t[:3], sinks=t[3] if len(t) > 3 else None, impl=impl, context=context,
                                               **features)

    def definition(*t):
        return attention_torch(*t[:3], sinks=t[3] if len(t) > 3 else None, **features)[0]

    out, got = grads_of(engine, tensors, grad_out)
    want_out, want = grads_of(definition, ref_inputs, grad_out.double())
    assert_close(out.detach().numpy(), want_out.detach().numpy())
    for name, g, w in zip(("query", "key", "value", "sinks"), got, want):
        assert g is not None, name
        assert_close(g.numpy(), w.numpy())


def test_dropout_gradients_match_the_reference_backward(context):
    q, k, v = randn(1, 2, 12, 8), randn(1, 2, 12, 8), randn(1, 2, 12, 8)
    tensors = [t.clone().requires_grad_() for t in (q, k, v)]
    grad_out = randn(1, 2, 12, 8)
    out = vt.scaled_dot_product_attention(*tensors, dropout_p=0.25, seed=11, context=context)
    out.backward(grad_out)
    want = _attention_backward(q, k, v, grad_out, dropout_p=0.25, seed=11, reference=True)
    for g, w in zip(tensors, want):
        assert_close(g.grad.numpy(), w.numpy())


def test_float16_and_only_the_gradients_asked_for(context):
    q, k, v = (randn(2, 3, 17, 24, dtype=torch.float16) for _ in range(3))
    q.requires_grad_()
    out = vt.scaled_dot_product_attention(q, k, v, is_causal=True, context=context)
    assert out.dtype == torch.float16
    grad_out = randn(2, 3, 17, 24, dtype=torch.float16)
    out.backward(grad_out)
    # Only dQ is computed when only the query requires grad (the others come back as None).
    only_q = _attention_backward(q.detach(), k, v, grad_out, is_causal=True, want=(True, False, False, False),
                                 context=context)
    assert only_q[0] is not None and only_q[1:] == (None, None, None)
    assert torch.equal(only_q[0], q.grad)
    q64 = q.detach().double().requires_grad_()
    attention_torch(q64, k.double(), v.double(), is_causal=True)[0].backward(grad_out.double())
    assert q.grad.dtype == torch.float16
    assert_close(q.grad.numpy(), q64.grad.numpy(), np.float16)


def test_a_layer_trains(context):
    # A few steps of gradient descent through vkattn's attention lower the loss.
    torch.manual_seed(0)
    x = torch.randn(2, 10, 16)
    target = torch.randn(2, 10, 16)
    proj = torch.nn.Linear(16, 48)
    opt = torch.optim.SGD(proj.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        q, k, v = proj(x).view(2, 10, 3, 16).unbind(2)
        out = vt.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=True,
                                              context=context)
        loss = torch.nn.functional.mse_loss(out.squeeze(1), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_use_for_sdpa_routes_torch_functional(context):
    functional = torch.nn.functional
    had = hasattr(functional, "scaled_dot_product_attention")
    q, k, v = (randn(1, 2, 5, 8).requires_grad_() for _ in range(3))
    with vt.use_for_sdpa(context=context, impl="unfused"):
        out = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
    assert hasattr(functional, "scaled_dot_product_attention") == had
    assert_close(out.detach().numpy(), attention_torch(q.double(), k.double(), v.double(), is_causal=True)[0].detach().numpy())
    assert q.grad is not None and k.grad is not None and v.grad is not None


def test_dropout_draws_a_seed_per_call_from_torch(context):
    q, k, v = randn(1, 2, 16, 8), randn(1, 2, 16, 8), randn(1, 2, 16, 8)
    torch.manual_seed(3)
    a = vt.scaled_dot_product_attention(q, k, v, dropout_p=0.3, context=context)
    b = vt.scaled_dot_product_attention(q, k, v, dropout_p=0.3, context=context)
    torch.manual_seed(3)
    again = vt.scaled_dot_product_attention(q, k, v, dropout_p=0.3, context=context)
    assert not torch.equal(a, b)  # fresh randomness per call
    assert torch.equal(a, again)  # and torch.manual_seed makes it reproducible
