#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_resolve (fuzz/corpus/resolve/) in the byte format documented at the
top of fuzz/fuzz_resolve.cpp: a few valid requests of every kind and a few that resolve() must refuse.
Run it from anywhere after changing that format; the files are committed, like the other seeds."""
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "resolve"

SPECIAL_INTS = [-1, -2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**30, 2**30 + 1, 2**62, 2**63 - 1, -2**63,
                (2**63 - 1) // 2, 65535, 65536, 2**20]


def num(v):
    if 0 <= v < 0xF0:
        return bytes([v])
    if v in SPECIAL_INTS:
        return bytes([0xF0 + SPECIAL_INTS.index(v)])
    return bytes([0xFF]) + struct.pack("<q", v)


def real(x):
    t = x * 8 + 64
    if t == int(t) and 0 <= t < 0xF0:
        return bytes([int(t)])
    return bytes([0xFF]) + struct.pack("<d", x)


def view(shape, layout=0, strides=None):
    b = bytes([2 if strides else layout]) + b"".join(num(d) for d in shape)
    return b + (b"".join(num(s) for s in strides) if strides else b"")


def request(q, k, v, o, *, f16=False, bool_mask=None, float_mask=None, weights=False, lse=False,
            lengths=None, slopes=None, sinks=None, scale=None, causal_offset=None, softcap=None,
            max_bias=None, causal=0, window=(-1, -1), dropout=0.0, seed=0):
    flags = (f16 | (bool_mask is not None) << 1 | (float_mask is not None) << 2 | weights << 3 | lse << 4
             | (lengths is not None) << 5 | (slopes is not None) << 6 | (sinks is not None) << 7)
    flags2 = ((scale is not None) | (causal_offset is not None) << 1 | (softcap is not None) << 2
              | (max_bias is not None) << 3 | causal << 4)
    b = bytes([flags, flags2]) + q + k + v + o
    if lengths is not None:
        b += bytes([len(lengths)]) + b"".join(num(x) for x in lengths)
    for mask in (bool_mask, float_mask):
        if mask is not None:
            b += bytes([len(mask)]) + b"".join(num(d) for d in mask)
    for values in (slopes, sinks):
        if values is not None:
            b += bytes([len(values)]) + b"".join(real(x) for x in values)
    b += real(scale or 0.0) + num(causal_offset or 0) + num(window[0]) + num(window[1])
    b += real(softcap or 0.0) + real(max_bias or 0.0) + real(dropout) + struct.pack("<Q", seed)
    return b


SEEDS = {
    "valid_basic": request(view([1, 2, 7, 8]), view([1, 1, 9, 8]), view([1, 1, 9, 8]), view([1, 2, 7, 8]),
                           weights=True, lse=True),
    "valid_gqa_bnhd_f16_masks": request(
        view([2, 4, 5, 16], 1), view([2, 2, 6, 16], 1), view([2, 2, 6, 16], 1), view([2, 4, 5, 16], 1), f16=True,
        bool_mask=[5, 6], float_mask=[2, 1, 1, 6], lengths=[3, 6], causal=2),
    "valid_features": request(
        view([1, 4, 9, 8]), view([1, 4, 12, 8]), view([1, 4, 12, 8]), view([1, 4, 9, 8]), causal_offset=3,
        window=(4, 0), softcap=30.0, max_bias=8.0, sinks=[0.5, -1.0, 2.0, 0.0], dropout=0.1, seed=1234, lse=True),
    "valid_slopes_padded_strides": request(
        view([2, 3, 4, 5], strides=[200, 64, 16, 1]), view([2, 1, 6, 5], strides=[100, 100, 8, 1]),
        view([2, 1, 6, 7], strides=[100, 100, 8, 1]), view([2, 3, 4, 7], strides=[120, 40, 10, 1]),
        slopes=[0.25, 0.5, 1.0], scale=0.125, causal=1),
    "invalid_span_overflow": request(
        view([2, 2, 3, 4], strides=[2**62, 1, 4, 1]), view([2, 1, 3, 4]), view([2, 1, 3, 4]), view([2, 2, 3, 4])),
    "invalid_mask_broadcast": request(view([1, 2, 7, 8]), view([1, 1, 9, 8]), view([1, 1, 9, 8]),
                                      view([1, 2, 7, 8]), bool_mask=[3, 9]),
    "invalid_window_reach": request(view([1, 1, 4, 8]), view([1, 1, 4, 8]), view([1, 1, 4, 8]), view([1, 1, 4, 8]),
                                    causal=1, window=(2**31 - 1, 0)),
    # -2^63: |offset| overflows; resolve() must still refuse it (it did only by luck of the compiler).
    "invalid_causal_offset_min": request(view([1, 4, 9, 8]), view([1, 4, 12, 8]), view([1, 4, 12, 8]),
                                         view([1, 4, 9, 8]), causal_offset=-2**63, window=(4, 0)),
    "invalid_output_overlap": request(view([1, 2, 7, 8]), view([1, 1, 9, 8]), view([1, 1, 9, 8]),
                                      view([1, 2, 7, 8], strides=[0, 0, 8, 1])),
}

OUT.mkdir(exist_ok=True)
for name, data in SEEDS.items():
    (OUT / name).write_bytes(data)
print(f"wrote {len(SEEDS)} seeds to {OUT}")
