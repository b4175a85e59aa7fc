"""ONNX conformance: every node test case of the Attention operator that the installed onnx package
ships (`collect_testcases("Attention")`, without the `_expanded` twins), through
vkattn.onnx.attention, each with its own rtol and atol. The cases that need what the engine does not
output yet (qk_matmul_output modes 0-2: the scores) are expected to fail, by name, so that one that
starts passing is noticed; the README reports the count."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # the README's test command installs it (pip, .[test])
from onnx import helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

import vkattn.onnx  # noqa: E402

CASES = [c for c in collect_testcases("Attention") if not c.name.endswith("_expanded")]
INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")


def needs_scores(case):
    node = case.model.graph.node[0]
    mode = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "qk_matmul_output_mode"), 0)
    return len(node.output) > 3 and node.output[3] != "" and mode != 3


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


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(raises=NotImplementedError, strict=True,
                                            reason="the engine's scores output (qk_matmul_output modes 0-2)"))
    if needs_scores(c) else c
    for c in CASES
], ids=[c.name for c in CASES])
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
