"""ONNX conformance: every node test case of the Attention operator that the installed onnx package
ships (`collect_testcases("Attention")`, without the `_expanded` twins), through
vkattn.onnx.attention, each with its own rtol and atol; the README reports the count."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # the README's test command installs it (pip, .[test])
from onnx import helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

import vkattn.onnx  # noqa: E402

CASES = [c for c in collect_testcases("Attention") if not c.name.endswith("_expanded")]
INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")


def run_case(case, context):
    node = case.model.graph.node[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    inputs, expected = case.data_sets[0]
    given = [name for name in node.input]
    arguments = {}
    values = iter(inputs)
    for position, name in enumerate(given):
        if name:
            arguments[INPUTS[position]] = next(values)
    wanted = [position for position, name in enumerate(node.output) if name]
    outputs = vkattn.onnx.attention(**arguments, **attributes, need_qk_matmul_output=3 in wanted, context=context)
    for position, want in zip(wanted, expected):
        got = outputs[position]
        assert got is not None, OUTPUTS[position]
        assert got.shape == want.shape and got.dtype == want.dtype, OUTPUTS[position]
        # The onnx package's own runner allows bfloat16 outputs two ulps (onnx/backend/test/runner).
        rtol = max(case.rtol, 2**-6) if want.dtype.name == "bfloat16" else case.rtol
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                   rtol=rtol, atol=case.atol, err_msg=OUTPUTS[position])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_attention_node_case(context, case):
    run_case(case, context)


def test_the_operator_ships_its_cases():
    assert len(CASES) >= 90


@pytest.mark.parametrize("arguments,argument", [
    (dict(Q=np.zeros((1, 4, 8), np.float32), K=np.zeros((1, 4, 8), np.float32), V=np.zeros((1, 4, 8), np.float32)), "Q"),
    (dict(Q=np.zeros((1, 2, 4, 8), np.float32), K=np.zeros((1, 2, 4, 8), np.float32),
          V=np.zeros((1, 2, 4, 8), np.float32), past_key=np.zeros((1, 2, 3, 8), np.float32)), "past_key"),
    (dict(Q=np.zeros((1, 2, 4, 8), np.int32), K=np.zeros((1, 2, 4, 8), np.float32),
          V=np.zeros((1, 2, 4, 8), np.float32)), "Q"),
    (dict(Q=np.zeros((1, 3, 4, 8), np.float32), K=np.zeros((1, 2, 4, 8), np.float32),
          V=np.zeros((1, 2, 4, 8), np.float32)), "K"),
])
def test_bad_nodes_name_the_input(context, arguments, argument):
    with pytest.raises(ValueError, match=f"^{argument}: "):
        vkattn.onnx.attention(**arguments, context=context)


def reference_node(inputs, **attributes):
    """The onnx package's own reference implementation of one Attention node (opset 25: windows)."""
    from onnx.reference import ReferenceEvaluator

    names = [name if value is not None else "" for name, value in zip(INPUTS, inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("Attention", names, list(OUTPUTS), **attributes)
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in zip(INPUTS, inputs) if v is not None],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in OUTPUTS])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    feeds = {n: v for n, v in zip(INPUTS, inputs) if v is not None}
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("features", ["bool mask, causal, past", "float mask, softcap, GQA", "window, softcap"])
def test_qk_matmul_output_against_the_onnx_reference(context, mode, features):
    # Beyond the shipped cases: random shapes no tile divides, each mode's stage with the features
    # that change it (softcap for mode 1; the masks, causal and windows for mode 2).
    rng = np.random.default_rng(mode * 10 + len(features))
    B, Hq, Hkv, L, S, D = 2, 4, (2 if "GQA" in features else 4), 7, 11, 12
    past = 5 if "past" in features else 0
    Q = rng.standard_normal((B, Hq, L, D)).astype(np.float32)
    K = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    V = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    past_key = rng.standard_normal((B, Hkv, past, D)).astype(np.float32) if past else None
    past_value = rng.standard_normal((B, Hkv, past, D)).astype(np.float32) if past else None
    mask = None
    if "bool mask" in features:
        mask = rng.random((L, S + past)) < 0.8
    elif "float mask" in features:
        mask = rng.standard_normal((B, 1, L, S)).astype(np.float32)
        mask[mask < -1.5] = -np.inf
    attributes = dict(qk_matmul_output_mode=mode)
    if "causal" in features:
        attributes["is_causal"] = 1
    if "softcap" in features:
        attributes["softcap"] = 1.5
    if "window" in features:
        attributes.update(left_window_size=3, right_window_size=2)
    inputs = (Q, K, V, mask, past_key, past_value, None)
    want = reference_node(inputs, **attributes)
    got = vkattn.onnx.attention(*inputs[:6], **attributes, need_qk_matmul_output=True, context=context)
    for name, g, w in zip(OUTPUTS, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)  # −∞ where masked, exactly


def test_qk_matmul_output_mode_0_is_the_raw_scaled_product(context):
    # The operator's text: mode 0 is Q·Kᵀ scaled, before the softcap (the onnx package's reference
    # returns the softcapped product there; no shipped case sets both).
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    *_, qk = vkattn.onnx.attention(Q, K, V, softcap=1.0, scale=0.5, need_qk_matmul_output=True, context=context)
    np.testing.assert_allclose(qk, 0.5 * Q @ K.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-6)


def test_unknown_qk_matmul_output_mode_is_named(context):
    Q = np.zeros((1, 1, 2, 8), np.float32)
    with pytest.raises(ValueError, match="^qk_matmul_output_mode: "):
        vkattn.onnx.attention(Q, Q, Q, qk_matmul_output_mode=4, context=context)
