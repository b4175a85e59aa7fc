# Sourced by bench/gpu_*.sh on a lent GPU machine, from the checkout's root, with `kit` (an unpacked
# kit: ../shared/tools/gpu-kit's .gpu/kit), `budget` (seconds) and `O` (the results directory) set:
# installs the kit's Vulkan loader, points at its validation layer and NVIDIA's driver, and defines
#   el MESSAGE         the message after the seconds since sourcing
#   left               the seconds of the budget left
#   pt SECONDS ARGS    one `vk-attn ARGS --json` within SECONDS: its JSON lines kept in $O/vkattn.jsonl
#                      and printed short (nothing once under 10 s of the budget are left)
#   ks SECONDS ARGS    the same with --kernel-statistics, kept in $O/kernels.jsonl
for d in "$kit"/debs/*.deb; do dpkg -x "$d" /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp VK_LAYER_PATH=$kit/layers
# A validation layer that knows VK_KHR_cooperative_matrix (bench/build_validation_layer.sh) where
# carried: then the units' kernels run with the layer on too (Debian's predates the extension).
if [[ -f .gpu/pack/layer.tar.xz ]]; then
  mkdir -p .gpu/newer && tar -xJf .gpu/pack/layer.tar.xz -C .gpu/newer && export VK_LAYER_PATH=$(pwd)/.gpu/newer/layer
fi
LAYER_API=$(python3 -c "import json, glob; print(*[json.load(open(f))['layer']['api_version'] for f in glob.glob('$VK_LAYER_PATH/*validation*.json')])" 2>/dev/null)
echo "validation layer: ${LAYER_API:-none} (1.3.255 and later know the matrix units)"
for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
  [[ -f $icd ]] && { export VK_DRIVER_FILES=$icd; break; }; done
mkdir -p "$O"; B=$kit/build/vk-attn; T0=$(date +%s); J=$O/vkattn.jsonl; K=$O/kernels.jsonl; : > "$J"; : > "$K"
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( budget - ($(date +%s) - T0) )); }
# A point's main fields; a kernel's statistics (NVIDIA 580 reports local memory as 2^36 + bytes); else the line.
short() { python3 -c "
import sys, json
keys = ('kit', 'impl', 'seq_q', 'seq_kv', 'heads', 'kv_heads', 'dim', 'causal', 'median_ms', 'gflops', 'rel_l2_err', 'valid',
        'variant', 'gpu_ms_per_step')
for l in sys.stdin:
    if not l.startswith('{'): continue
    r = json.loads(l)
    if 'statistics' in r:
        s = r['statistics']
        if s.get('Local Memory Size', 0) >= 2 ** 36: s['Local Memory Size'] -= 2 ** 36
        print(r.get('kit', ''), r['kernel'], r['constants'], json.dumps(s))
    elif 'median_ms' in r or 'gpu_ms_per_step' in r:
        # bench/patches/phase_clocks.patch's clocks, rounded, where the kit has them.
        clocks = {k: round(v) for k, v in r.items() if k.startswith('clk_') and isinstance(v, (int, float))}
        print(json.dumps({**{k: r[k] for k in keys if k in r}, **clocks}))
    else:
        print(l.strip()[:400])"; }
pt() { (( $(left) > 10 )) || return 0; timeout "$1" "$B" "${@:2}" --json 2>>"$O/log.txt" | grep '^{' | tee -a "$J" | short; }
ks() { (( $(left) > 10 )) || return 0; timeout "$1" "$B" "${@:2}" --json --kernel-statistics 2>>"$O/log.txt" | grep '^{' | tee -a "$K" | short; }
