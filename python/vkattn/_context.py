"""The default Context: created on first use, on the device vkattn picks (or $VKATTN_DEVICE)."""

import threading

from ._vkattn import Context

_lock = threading.Lock()
_default = None


def default_context():
    """The context every function uses when given `context=None`."""
    global _default
    with _lock:
        if _default is None:
            _default = Context()
        return _default
