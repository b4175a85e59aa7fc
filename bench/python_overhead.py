#!/usr/bin/env python3
"""The Python layer's cost on top of the engine's call (issue #16's target: 30 µs or less).

On a tiny problem, the medians of:
  python  vkattn.scaled_dot_product_attention with the engine call replaced by a no-op: what the
          Python layer adds (arguments to views, the output array, the results' shapes)
  full    the real call (the layer + the engine's host call: upload, run, read back)
  engine  vkattn._vkattn.run_attention on a prepared call, into a fresh output array
The first is the figure the target is about; the other two put it in proportion (on a CPU device
they move with the machine's load, the first hardly does). With the package installed (the README's
test command leaves it in build/venv):

    XDG_RUNTIME_DIR=/tmp build/venv/bin/python bench/python_overhead.py
"""

import argparse
import time

import numpy as np

import vkattn
from vkattn import _sdpa, _vkattn


def median_us(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--shape", type=int, nargs=4, default=(1, 1, 4, 16), metavar=("B", "H", "N", "D"))
    args = parser.parse_args()
    context = vkattn.default_context()
    q = np.random.default_rng(0).random(args.shape, dtype=np.float32)
    call = lambda: vkattn.scaled_dot_product_attention(q, q, q, context=context)  # noqa: E731
    for _ in range(50):  # pipelines compiled, caches warm
        call()
    prepared = _sdpa._prepare(q, q, q)

    def engine():
        prepared.call.out = np.empty(q.shape, np.float32)
        _vkattn.run_attention(context, prepared.call)

    full, alone = median_us(call, args.repeats), median_us(engine, args.repeats)
    real = _vkattn.run_attention
    _vkattn.run_attention = lambda context, call: None
    try:
        python = median_us(call, args.repeats)
    finally:
        _vkattn.run_attention = real
    print(f"device: {context.device['name']}; shape {tuple(args.shape)}")
    print(f"Python layer {python:.1f} us; full call {full:.1f} us; engine call {alone:.1f} us")


if __name__ == "__main__":
    main()
