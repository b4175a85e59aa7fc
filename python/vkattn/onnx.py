"""ONNX's Attention operator (opsets 23, 24 and 25) on the engine: vkattn.onnx.attention takes the
node's inputs and attributes and returns its outputs (Y, present_key, present_value,
qk_matmul_output), as the operator's documentation and the onnx package's reference define them.
The arrangement is NumPy's (3-D inputs seen as heads by strides, the past keys concatenated into the
present ones, short masks padded); the engine computes the attention."""

import numpy as np

from . import _vkattn
from ._context import default_context
from ._sdpa import _mask, _numpy, _rank4

try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 inputs need ml_dtypes (the onnx package brings it)
    _BF16 = None

# qk_matmul_output_mode: 0-2 are the engine's logits at a stage, 3 its weights (the probabilities).
_LOGITS_STAGE = {0: "scaled", 1: "softcapped", 2: "masked"}
_QK_AFTER_SOFTMAX = 3


def _floats(x, name):
    a = _numpy(x, name)
    if a.dtype not in (np.float32, np.float16) and a.dtype != _BF16:
        raise ValueError(f"{name}: its dtype is {a.dtype}; ONNX Attention takes float32, float16 or bfloat16.")
    return a


def _heads(a, heads, name):
    """A 3-D [B, S, heads·D] input as its [B, heads, S, D] view (no copy); 4-D as it is."""
    if a.ndim == 4:
        return a
    if a.ndim != 3:
        raise ValueError(f"{name}: ONNX Attention takes 3-D or 4-D inputs; its shape is {a.shape}.")
    if heads is None or a.shape[2] % heads:
        raise ValueError(f"{name}: a 3-D input needs q_num_heads and kv_num_heads dividing its hidden size "
                         f"{a.shape[2]}.")
    return a.reshape(a.shape[0], a.shape[1], heads, a.shape[2] // heads).transpose(0, 2, 1, 3)


def _engine_view(a):
    """An input as the binding reads it: bfloat16 as its uint16 bits."""
    return a.view(np.uint16) if a.dtype == _BF16 else a


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal=0,
              kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=None, left_window_size=-1, right_window_size=-1, need_qk_matmul_output=False,
              impl="auto", context=None):
    """ONNX Attention: returns (Y, present_key, present_value, qk_matmul_output). qk_matmul_output is
    computed when `need_qk_matmul_output` (the node lists that output), by the engine: modes 0, 1
    and 2 are its logits at the stages scaled (scale·Q·Kᵀ), softcapped and masked (softcap, then the
    mask added, −∞ where a key is masked), mode 3 its weights (the softmax's probabilities; zero rows
    where every key is masked). Otherwise None. softmax_precision is accepted and has no effect: the
    engine's softmax is float32 for every input type."""
    q, k, v = _floats(Q, "Q"), _floats(K, "K"), _floats(V, "V")
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"K: Q, K and V must have the same rank; their shapes are {q.shape}, {k.shape}, {v.shape}.")
    three_d = q.ndim == 3
    if not three_d and (q_num_heads is not None or kv_num_heads is not None):
        raise ValueError("q_num_heads: q_num_heads and kv_num_heads are for 3-D inputs only.")
    q4, k4, v4 = _heads(q, q_num_heads, "Q"), _heads(k, kv_num_heads, "K"), _heads(v, kv_num_heads, "V")
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key: past_key and past_value go together.")
    if past_key is not None and nonpad_kv_seqlen is not None:
        raise ValueError("nonpad_kv_seqlen: it cannot be combined with past_key and past_value.")
    past = 0
    if past_key is not None:
        pk, pv = _floats(past_key, "past_key"), _floats(past_value, "past_value")
        past = pk.shape[2]
        k4 = np.concatenate([pk, k4], axis=2)
        v4 = np.concatenate([pv, v4], axis=2)
    present_key, present_value = k4, v4
    B, Hq, L, _ = q4.shape
    S = k4.shape[2]
    if Hq % k4.shape[1]:
        raise ValueError(f"K: the query's {Hq} heads are not a multiple of the key's {k4.shape[1]}.")

    call = _vkattn.AttentionCall()
    call.q, call.k, call.v = (_engine_view(_rank4(t, B)) for t in (q4, k4, v4))
    # Y: a 3-D output [B, L, Hq·Dv] written through its [B, Hq, L, Dv] view.
    Dv = v4.shape[3]
    y = np.empty((B, L, Hq, Dv) if three_d else (B, Hq, L, Dv), dtype=q.dtype)
    out_view = y.transpose(0, 2, 1, 3) if three_d else y
    call.out = _engine_view(out_view)
    if attn_mask is not None:
        m = _numpy(attn_mask, "attn_mask")
        if m.shape[-1] < S:  # ONNX pads a short mask over the keys: not allowed (False / -inf)
            pad = [(0, 0)] * (m.ndim - 1) + [(0, S - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
        if m.dtype == _BF16 or m.dtype == np.float16:
            m = m.astype(np.float32)
        mask, is_bool = _mask(m, (B, Hq, L, S), B)
        if is_bool:
            call.bool_mask = mask
        else:
            call.float_mask = mask
    if nonpad_kv_seqlen is not None:
        lengths = np.ascontiguousarray(_numpy(nonpad_kv_seqlen, "nonpad_kv_seqlen"), dtype=np.int32).reshape(-1)
        if lengths.size != B:
            raise ValueError(f"nonpad_kv_seqlen: it has {lengths.size} values but must have one per batch ({B}).")
        call.kv_lengths = lengths
    # The diagonal: after the past keys (internal cache), at each sequence's valid length (external
    # cache, bottom-right), or top-left; causal masks up to it, windows measure from it.
    if is_causal:
        if nonpad_kv_seqlen is not None:
            call.causal = "bottom-right"
        elif past:
            call.causal_offset = past
        else:
            call.causal = "top-left"
    elif nonpad_kv_seqlen is not None:
        call.diagonal_bottom_right = True
    else:
        call.diagonal_offset = past
    call.window_left, call.window_right = int(left_window_size), int(right_window_size)
    call.scale = None if scale is None else float(scale)
    call.softcap = float(softcap) if softcap else None
    call.impl = impl
    if qk_matmul_output_mode not in (0, 1, 2, _QK_AFTER_SOFTMAX):
        raise ValueError(f"qk_matmul_output_mode: it is {qk_matmul_output_mode}; ONNX defines 0, 1, 2 and 3.")
    qk = None
    if need_qk_matmul_output:
        qk32 = np.empty((B, Hq, L, S), dtype=np.float32)
        if qk_matmul_output_mode == _QK_AFTER_SOFTMAX:
            call.weights = qk32
        else:
            call.logits = qk32
            call.logits_stage = _LOGITS_STAGE[qk_matmul_output_mode]
    _vkattn.run_attention(context or default_context(), call)
    if need_qk_matmul_output:
        qk = qk32.astype(q.dtype)
    Y = y.reshape(B, L, Hq * Dv) if three_d else y
    return Y, present_key, present_value, qk
