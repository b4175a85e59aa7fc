"""A script's exit: nothing on stderr (issue #30). torch leaks the autograd graphs still alive when
the interpreter finalizes, and a Context reachable from one used to outlive nanobind's leak check,
which printed "nanobind: leaked 1 instances! ... vkattn._vkattn.Context" on every such run. Each
script keeps its outputs (and so their graphs) in globals, as scripts do, and runs in a fresh
interpreter, the only place the exit can be seen."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

_PRELUDE = """
import torch
import vkattn
import vkattn.torch

torch.manual_seed(0)
x = torch.randn(5, 2, 16, requires_grad=True)
q = torch.randn(2, 2, 5, 8, requires_grad=True)
"""

_SCRIPTS = {
    "mha": """
        layer = vkattn.torch.MultiheadAttention(16, 2)
        out, weights = layer(x, x, x)
        out.sum().backward()
    """,
    "sdpa": """
        out = vkattn.torch.scaled_dot_product_attention(q, q, q, is_causal=True)
        out.sum().backward()
    """,
    # A context of the script's own, in a global and in graphs kept past the end.
    "explicit_context": """
        context = vkattn.Context()
        layer = vkattn.torch.MultiheadAttention(16, 2, context=context)
        out, weights = layer(x, x, x)
        out.sum().backward()
        out2 = vkattn.torch.scaled_dot_product_attention(q, q, q, context=context)
        out2.sum().backward()
        forward_only = vkattn.torch.scaled_dot_product_attention(q, q, q, context=context)
    """,
}


@pytest.mark.parametrize("name", sorted(_SCRIPTS))
def test_exit_is_silent(name):
    script = _PRELUDE + textwrap.dedent(_SCRIPTS[name]) + 'print("done")\n'
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.stderr == ""
    assert run.returncode == 0
    assert run.stdout == "done\n"
