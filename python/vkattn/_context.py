"""The default Context: created on first use, on the device vkattn picks (or $VKATTN_DEVICE).

Contexts are let go at interpreter exit (atexit), while Python still runs: torch leaks every
autograd graph still alive when the interpreter finalizes (its nodes drop their Python objects only
while Py_IsInitialized(), false during the teardown of modules), and everything reachable from such
a node outlives the teardown: its ctx attributes, and through its class and their functions' globals
this module's `_default`. A Context still alive then is what nanobind reports as leaked at exit."""

import atexit
import threading
import weakref

from ._vkattn import Context

_lock = threading.Lock()
_default = None
# The autograd nodes (vkattn.torch's ctx objects) holding a context for their backward.
_holders = weakref.WeakSet()


def default_context():
    """The context every function uses when given `context=None`."""
    global _default
    with _lock:
        if _default is None:
            _default = Context()
        return _default


def keep_for_backward(node, context):
    """node.context = context (None: the default), let go at exit (the module's docstring says why)."""
    node.context = context
    if context is not None:
        with _lock:
            _holders.add(node)


@atexit.register
def _release():
    """Drops this module's references to contexts: the default and those held for a backward (after
    exit there is none to run). Whatever else still holds one is released as before."""
    global _default
    with _lock:
        _default = None
        holders = list(_holders)
    for node in holders:
        node.context = None
