#!/usr/bin/env python3
"""The phase clocks of a GPU run (bench/patches/phase_clocks.patch's kit, bench/points/phase_clocks.txt)
as markdown tables for docs/PERFORMANCE.md: per point, each phase's clocks per tile and its share of
the tile's total.

    python3 bench/phase_table.py OUT/clk/ab.jsonl

Forward points give clk_* (per key tile), backward points clk_q_* (the dQ kernel, per key tile) and
clk_kv_* (the dK/dV kernel, per query tile); the start, end and tile counts are left out of the shares.
"""
import json
import sys

FORWARD = ["wait_k", "store_k", "s", "softmax", "rescale", "wait_v", "store_v", "pv"]
DQ = ["wait_v", "store_v", "dp", "wait_k", "store_k", "s", "ds", "dq"]
DKV = ["wait_q", "store_q", "st", "wait_do", "store_do", "dpt", "elementwise", "dv", "wait_q2", "store_q2", "dk"]


def table(rows, prefix, phases, title):
    rows = [r for r in rows if r.get(prefix + "subgroups", 0) > 0]
    if not rows:
        return
    print(f"\n{title}\n")
    print("| point | tile clocks | " + " | ".join(phases) + " |")
    print("|---|---|" + "---|" * len(phases))
    for r in rows:
        values = [r.get(prefix + p, 0.0) for p in phases]
        total = sum(values) or 1.0
        point = f"{r.get('variant', '?').split('[')[0]} D {r.get('dim')} N {r.get('seq_q')}" + (" causal" if r.get("causal") else "")
        cells = [f"{v:,.0f} ({100 * v / total:.0f}%)" for v in values]
        print(f"| {point} | {total:,.0f} | " + " | ".join(cells) + " |")


def main(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    table(rows, "clk_", FORWARD, "Forward, clocks per key tile (share of the tile)")
    table(rows, "clk_q_", DQ, "Backward dQ kernel, clocks per key tile")
    table(rows, "clk_kv_", DKV, "Backward dK/dV kernel, clocks per query tile")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
