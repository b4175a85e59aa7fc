# PyTorch's times for the shapes bench/points/operand_words.txt measures, on the same GPU (a lent
# machine with PyTorch; run after the A/B in the same call): SDPA forward (its best backend),
# SDPA backward, and cuBLAS hgemm 8192³. One JSON line per point on stdout.
import json, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend


def median_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return sorted(times)[2]


backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
for n, d, causal in [(4096, 64, False), (4096, 128, False), (4096, 128, True), (16384, 128, False)]:
    q, k, v = (torch.randn(1, 32, n, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    flops = 4 * 32 * n * n * d
    for backend in backends:
        try:
            with sdpa_kernel([backend]):
                fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), 10)
                row = dict(kind="forward", N=n, D=d, causal=causal, backend=backend.name, ms=fwd, tflops=flops / fwd / 1e9)
                if n == 4096 and d == 128 and not causal:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    g = torch.randn_like(o)
                    row["backward_ms"] = median_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), 10)
                print(json.dumps(row), flush=True)
        except Exception as error:  # a backend this build or GPU lacks
            print(json.dumps(dict(kind="forward", N=n, D=d, causal=causal, backend=backend.name, error=str(error)[:100])))
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2))
ms = median_ms(lambda: a @ b, 20)
print(json.dumps(dict(kind="hgemm", size=8192, ms=ms, tflops=2 * 8192**3 / ms / 1e9)))
