"""vkattn.scaled_dot_product_attention against float64 attention math: PyTorch's arguments (shapes of
every rank, masks of every broadcast shape, causal, scale, GQA), vkattn's features, NumPy and torch
inputs, non-contiguous views, fp16, the extra outputs, and the errors."""

import numpy as np
import pytest
import torch

import vkattn
from conftest import assert_close, attention_math

rng = np.random.default_rng(1234)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape_q,shape_kv", [
    ((7, 16), (9, 16)),                 # no heads: [L, E]
    ((3, 7, 16), (3, 9, 16)),           # [H, L, E]
    ((2, 3, 7, 16), (2, 3, 9, 16)),     # [N, H, L, E]
    ((2, 2, 3, 5, 8), (2, 2, 3, 6, 8)), # two batch dimensions
])
def test_shapes_of_every_rank(context, shape_q, shape_kv):
    q, k, v = randn(*shape_q), randn(*shape_kv), randn(*shape_kv)
    out = vkattn.scaled_dot_product_attention(q, k, v, context=context)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == shape_q
    assert_close(out, attention_math(q, k, v)[0])
    # A mask over the trailing dimensions and the first batch dimension.
    mask = rng.random(shape_q[:1] + (1,) * (len(shape_q) - 3) + (shape_q[-2], shape_kv[-2])) < 0.7
    mask[..., 0] = True
    if len(shape_q) == 2:
        mask = mask[0]
    out = vkattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, context=context)
    assert_close(out, attention_math(q, k, v, attn_mask=mask)[0])


def test_read_only_and_broadcast_inputs(context):
    q = np.broadcast_to(randn(1, 1, 5, 8), (2, 3, 5, 8))  # read-only, stride 0 on the leading dims
    k, v = randn(2, 3, 6, 8), randn(2, 3, 6, 8)
    k.flags.writeable = False
    out = vkattn.scaled_dot_product_attention(q, k, v, context=context)
    assert_close(out, attention_math(q, k, v)[0])


@pytest.mark.parametrize("mask_shape", [(7, 9), (1, 9), (2, 1, 7, 9), (2, 3, 7, 9), (3, 1, 9), (9,)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast(context, mask_shape, kind):
    q, k, v = randn(2, 3, 7, 16), randn(2, 3, 9, 16), randn(2, 3, 9, 16)
    if kind == "bool":
        mask = rng.random(mask_shape) < 0.7
        mask[..., 0] = True  # every row sees a key
    else:
        mask = randn(*mask_shape)
        mask[rng.random(mask_shape) < 0.2] = -np.inf
        mask[..., 0] = 0.5
    out = vkattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, context=context)
    assert_close(out, attention_math(q, k, v, attn_mask=mask)[0])


def test_causal_scale_and_a_row_without_keys(context):
    q, k, v = randn(2, 4, 6, 8), randn(2, 4, 9, 8), randn(2, 4, 9, 8)
    for alignment in ("top-left", "bottom-right"):
        out = vkattn.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, causal_alignment=alignment,
                                                  context=context)
        assert_close(out, attention_math(q, k, v, is_causal=True, scale=0.3, causal_alignment=alignment)[0])
    mask = np.ones((6, 9), dtype=bool)
    mask[2] = False  # row 2 sees nothing: zeros, where PyTorch gives NaN
    out = vkattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, context=context)
    assert np.all(out[..., 2, :] == 0)


def test_grouped_query_attention(context):
    q, k, v = randn(2, 6, 5, 16), randn(2, 2, 7, 16), randn(2, 2, 7, 12)
    out = vkattn.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True, context=context)
    assert out.shape == (2, 6, 5, 12)
    assert_close(out, attention_math(q, k, v, is_causal=True, enable_gqa=True)[0])
    with pytest.raises(ValueError, match="enable_gqa"):
        vkattn.scaled_dot_product_attention(q, k, v, context=context)


def test_non_contiguous_numpy_and_torch_views(context):
    # [N, L, H, E] storage seen as [N, H, L, E] (a transpose, as projections produce), a strided slice
    # of the features' rows, and a permuted torch tensor: all read in place or copied where needed.
    base = randn(2, 7, 3, 16)
    q = base.transpose(0, 2, 1, 3)
    k = randn(2, 3, 18, 16)[:, :, ::2, :]
    v = np.asfortranarray(randn(2, 3, 9, 16))
    out = vkattn.scaled_dot_product_attention(q, k, v, context=context)
    assert_close(out, attention_math(q, k, v)[0])
    tq = torch.from_numpy(base).permute(0, 2, 1, 3)
    out_t = vkattn.scaled_dot_product_attention(tq, torch.from_numpy(np.ascontiguousarray(k)), torch.from_numpy(v),
                                                context=context)
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    assert_close(out_t.numpy(), attention_math(q, k, v)[0])


def test_float16(context):
    q, k, v = (randn(2, 3, 33, 24, dtype=np.float16) for _ in range(3))
    out = vkattn.scaled_dot_product_attention(q, k, v, is_causal=True, context=context)
    assert out.dtype == np.float16
    assert_close(out, attention_math(q, k, v, is_causal=True)[0], np.float16)
    out_t = vkattn.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                                context=context)
    assert out_t.dtype == torch.float16
    converted = vkattn.scaled_dot_product_attention(q.astype(np.float32), k, v, dtype="float16", context=context)
    assert converted.dtype == np.float16


def test_lse_and_weights(context):
    q, k, v = randn(2, 3, 5, 8), randn(2, 3, 7, 8), randn(2, 3, 7, 8)
    out, weights, lse = vkattn.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True,
                                                            return_lse=True, context=context)
    ref_out, ref_p = attention_math(q, k, v, is_causal=True)
    assert weights.shape == (2, 3, 5, 7) and lse.shape == (2, 3, 5)
    assert_close(out, ref_out)
    assert_close(weights, ref_p)
    s = np.einsum("nhle,nhse->nhls", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8)
    s[:, :, np.triu_indices(5, 1, 7)[0], np.triu_indices(5, 1, 7)[1]] = -np.inf
    assert_close(lse, np.log(np.exp(s).sum(-1)))


def test_vkattn_features(context):
    q, k, v = randn(2, 4, 9, 16), randn(2, 4, 12, 16), randn(2, 4, 12, 16)
    cases = [
        dict(window=(3, 1)),
        dict(softcap=2.0),
        dict(alibi_slopes=np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)),
        dict(sinks=np.array([0.5, -1.0, -np.inf, 2.0], dtype=np.float32)),
        dict(kv_lengths=[12, 5], is_causal=True, causal_alignment="bottom-right"),
        dict(window=(4, 0), is_causal=True),
    ]
    for options in cases:
        out = vkattn.scaled_dot_product_attention(q * 2, k, v, context=context, **options)
        assert_close(out, attention_math(q * 2, k, v, **options)[0])


def test_dropout_is_reproducible(context):
    q, k, v = randn(1, 2, 16, 8), randn(1, 2, 16, 8), randn(1, 2, 16, 8)
    a = vkattn.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5, context=context)
    b = vkattn.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5, context=context)
    c = vkattn.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=6, context=context)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert_close(vkattn.reference.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5), a)


def test_every_path_and_the_reference(context):
    q, k, v = randn(1, 2, 20, 16), randn(1, 2, 33, 16), randn(1, 2, 33, 16)
    want = attention_math(q, k, v, is_causal=True)[0]
    for impl in ("auto", "fused", "unfused", "split"):
        assert_close(vkattn.scaled_dot_product_attention(q, k, v, is_causal=True, impl=impl, context=context), want)
    assert_close(vkattn.reference.scaled_dot_product_attention(q, k, v, is_causal=True), want)


def test_default_context_and_devices():
    assert vkattn.default_context() is vkattn.default_context()
    devices = vkattn.devices()
    assert devices and all({"index", "name", "type", "subgroup_size", "heaps", "default"} <= d.keys() for d in devices)
    assert any(d["default"] for d in devices)
    assert vkattn.default_context().device["name"] in [d["name"] for d in devices]
    # What decides how work is cut: a subgroup size range that holds the device's size, the UUID.
    for d in devices:
        assert d["min_subgroup_size"] <= d["subgroup_size"] <= d["max_subgroup_size"]
        assert len(d["uuid"]) == 32 and isinstance(d["cooperative_matrix"], list)
        assert isinstance(d["matrix_units"], bool) and isinstance(d["matrix_units_off"], str)
        assert isinstance(d["bf16_matrix_units"], bool) and isinstance(d["bf16_matrix_units_off"], str)
        assert not (d["bf16_matrix_units"] and not d["matrix_units"])
        assert isinstance(d["workgroup_matrices"], bool) and isinstance(d["workgroup_matrices_off"], str)
        assert not (d["workgroup_matrices"] and not d["matrix_units"])
        assert isinstance(d["workgroup_bf16_matrices"], bool)
        assert not (d["workgroup_bf16_matrices"] and not d["workgroup_matrices"])


@pytest.mark.parametrize("call,argument", [
    (lambda q: vkattn.scaled_dot_product_attention(q, q[..., :7], q), "key"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((3, 3), bool)), "attn_mask"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((5, 5), bool), is_causal=True),
     "attn_mask"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, dropout_p=1.5), "dropout_p"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, impl="fast"), "impl"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, window=3), "window"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, sinks=[1.0]), "sinks"),
    (lambda q: vkattn.scaled_dot_product_attention(q.astype(np.int32), q, q), "query"),
    (lambda q: vkattn.scaled_dot_product_attention(q[0, 0, 0], q, q), "query"),
    (lambda q: vkattn.scaled_dot_product_attention(torch.from_numpy(q).bfloat16(), q, q), "query"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, dropout_p=0.1, seed=-1), "seed"),
    (lambda q: vkattn.scaled_dot_product_attention(q, q, q, dtype="bfloat16"), "dtype"),
])
def test_errors_name_the_argument(call, argument):
    q = randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match=f"^{argument}: "):
        call(q)


def test_exception_classes():
    for cls in (vkattn.VulkanError, vkattn.ResourceLimit, vkattn.DeviceLost):
        assert issubclass(cls, RuntimeError)
    with pytest.raises(ValueError, match="^device: "):
        vkattn.Context(device="no such device")
