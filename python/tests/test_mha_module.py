"""vkattn.torch.MultiheadAttention against torch.nn.MultiheadAttention: outputs, attention weights and
the gradients of inputs and every parameter, alone and as the self-attention of a 2-layer
nn.TransformerEncoder (batch first and not, with a key padding mask and a causal mask)."""

import copy

import pytest
import torch

import vkattn.torch as vt
from conftest import assert_close

torch.manual_seed(7)


def grads(module, inputs):
    return [p.grad for p in module.parameters()] + [x.grad for x in inputs]


@pytest.mark.parametrize("case", ["self", "cross_kdim_vdim", "self_batch_first_unbatched", "cross_batch_first"])
def test_module_matches_torch(context, case):
    E, H, L, S, N = 16, 4, 5, 7, 2
    kw = dict(kdim=6, vdim=10) if case == "cross_kdim_vdim" else {}
    batch_first = "batch_first" in case
    ref = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, **kw)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ours = vt.MultiheadAttention.from_module(copy.deepcopy(ref), context=context)
    assert list(ours.state_dict()) == list(ref.state_dict())
    if case == "self_batch_first_unbatched":
        x = torch.randn(L, E)
        args = lambda t: (t, t, t)  # noqa: E731
        inputs = [x]
        mask = dict(attn_mask=torch.ones(L, L, dtype=torch.bool).triu(1))
    elif case == "self":
        x = torch.randn(L, N, E)
        args = lambda t: (t, t, t)  # noqa: E731
        inputs = [x]
        mask = dict(key_padding_mask=torch.tensor([[False] * L, [False] * (L - 2) + [True] * 2]))
    elif case == "cross_batch_first":
        q, k = torch.randn(N, L, E), torch.randn(N, S, E)
        inputs = [q, k]
        args = lambda q, k: (q, k, k)  # noqa: E731  (the value is the key)
        mask = dict(key_padding_mask=torch.tensor([[False] * S, [False] * (S - 3) + [True] * 3]),
                    attn_mask=torch.randn(L, S))
    else:
        q, k, v = torch.randn(L, N, E), torch.randn(S, N, 6), torch.randn(S, N, 10)
        inputs = [q, k, v]
        args = lambda *t: t  # noqa: E731
        mask = dict(attn_mask=torch.randn(L, S))
    results = []
    for module in (ref, ours):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out, weights = module(*args(*leaves), need_weights=True, **mask)
        g = torch.randn_like(out) if not results else results[0][2]
        out.backward(g)
        results.append((out.detach(), weights, g, grads(module, leaves)))
    (out_r, w_r, _, g_r), (out_o, w_o, _, g_o) = results
    assert_close(out_o.numpy(), out_r.numpy())
    assert_close(w_o.numpy(), w_r.detach().numpy())
    for got, want in zip(g_o, g_r):
        assert got is not None
        assert_close(got.numpy(), want.numpy())


@pytest.mark.parametrize("batch_first", [False, True])
def test_inside_a_transformer_encoder(context, batch_first):
    E, H, L, N = 16, 4, 6, 3
    layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=batch_first)
    ref = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    ours = copy.deepcopy(ref)
    for block in ours.layers:
        block.self_attn = vt.MultiheadAttention.from_module(block.self_attn, context=context)
    assert list(ours.state_dict()) == list(ref.state_dict())
    x = torch.randn((N, L, E) if batch_first else (L, N, E))
    padding = torch.zeros(N, L, dtype=torch.bool)
    padding[1, -2:] = True
    causal = torch.triu(torch.full((L, L), float("-inf")), 1)
    grad = torch.randn_like(x)
    outs, all_grads = [], []
    for model in (ref, ours):
        model.train()
        leaf = x.clone().requires_grad_()
        out = model(leaf, mask=causal, src_key_padding_mask=padding)
        out.backward(grad)
        outs.append(out.detach())
        all_grads.append([leaf.grad] + [p.grad for p in model.parameters()])
    assert_close(outs[1].numpy(), outs[0].numpy())
    for got, want in zip(all_grads[1], all_grads[0]):
        assert_close(got.numpy(), want.numpy())


def test_parameters_are_shared_and_unsupported_options_refused():
    ref = torch.nn.MultiheadAttention(8, 2)
    ours = vt.MultiheadAttention.from_module(ref)
    assert ours.in_proj_weight is ref.in_proj_weight and ours.out_proj is ref.out_proj
    with pytest.raises(ValueError, match="add_bias_kv"):
        vt.MultiheadAttention(8, 2, add_bias_kv=True)


def test_inputs_over_shared_memory_and_in_place_changes(context):
    E, H, L, N = 8, 2, 4, 2
    ref = torch.nn.MultiheadAttention(E, H)
    ours = vt.MultiheadAttention.from_module(copy.deepcopy(ref), context=context)
    # The key a detached view of the query: two inputs to autograd (no gradient reaches x through the
    # key), though one memory.
    results = []
    for module in (ref, ours):
        x = torch.randn(L, N, E, generator=torch.Generator().manual_seed(1)).requires_grad_()
        out, _ = module(x, x.detach(), x.detach(), need_weights=False)
        out.sum().backward()
        results.append((out.detach(), x.grad))
    assert_close(results[1][0].numpy(), results[0][0].numpy())
    assert_close(results[1][1].numpy(), results[0][1].numpy())
    # An input changed in place between forward and backward is caught, as torch's own layer does.
    x = torch.randn(L, N, E, requires_grad=True)
    y = x * 1.0
    out, _ = ours(y, y, y, need_weights=False)
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_dropout_in_training_only(context):
    torch.manual_seed(4)
    module = vt.MultiheadAttention(8, 2, dropout=0.5, context=context)
    x = torch.randn(5, 2, 8, requires_grad=True)
    module.train()
    a, _ = module(x, x, x, need_weights=False)
    b, _ = module(x, x, x, need_weights=False)
    assert not torch.equal(a, b)  # a fresh Philox seed per call, drawn from torch's generator
    (a.sum() + b.sum()).backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in module.parameters())
    module.eval()
    c, _ = module(x, x, x, need_weights=False)
    d, _ = module(x, x, x, need_weights=False)
    assert torch.equal(c, d)  # no dropout in eval mode
