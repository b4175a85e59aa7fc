"""vkattn: scaled dot-product attention on Vulkan compute, for GPUs of every vendor.

    import numpy as np, vkattn
    q, k, v = (np.random.rand(2, 8, 128, 64).astype(np.float32) for _ in range(3))
    out = vkattn.scaled_dot_product_attention(q, k, v, is_causal=True)

The whole API is in docs/PYTHON.md. Errors: ValueError for an invalid argument (the message names
it); VulkanError, ResourceLimit and DeviceLost (RuntimeError subclasses) from the device.
"""

from ._vkattn import Context, DeviceLost, ResourceLimit, VulkanError, devices
from ._context import default_context
from ._device import KVCache, Tensor
from ._sdpa import scaled_dot_product_attention
from . import reference

__all__ = [
    "Context",
    "DeviceLost",
    "KVCache",
    "ResourceLimit",
    "VulkanError",
    "default_context",
    "devices",
    "reference",
    "scaled_dot_product_attention",
    "Tensor",
]
__version__ = "0.1.0"
