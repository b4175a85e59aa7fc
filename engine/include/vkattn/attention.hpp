// Scaled dot-product attention: the public entry point, its inputs, outputs and options.
// The semantics are defined once, in docs/SEMANTICS.md, and implemented identically by every GPU path
// and by the CPU reference (vkattn/reference.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vkattn/tensor.hpp"

namespace vkattn {

class Context;

// A mask broadcastable to [B, Hq, Nq, Nkv] by NumPy rules: rank 0..4, C-contiguous, each dimension
// either 1 or equal to the dimension it is aligned with (right-aligned).
struct MaskView {
    const void* data = nullptr;        // bool mask: uint8 (non-zero = attend); float mask: float32
    std::vector<std::int64_t> shape;  // e.g. {Nq, Nkv} or {B, 1, 1, Nkv}
};

enum class Causal : std::uint8_t {
    none,
    top_left,      // key j visible to query i when j <= i (PyTorch is_causal)
    bottom_right,  // key j visible to query i when j <= i + len[b] - Nq (FlashAttention, KV caches)
};

enum class Impl : std::uint8_t {
    automatic,  // chosen from the shape, the requested outputs and the device
    unfused,    // three stages: S = scale·Q·Kᵀ, masked softmax, O = P·V
    fused,      // flash attention: online softmax, O(N·D) memory
    split,      // split-KV flash decoding
};

// Which logits AttentionOutputs::logits holds: the scores on their way to the softmax, at one of
// three stages (ONNX Attention's qk_matmul_output modes 0, 1 and 2; docs/SEMANTICS.md).
enum class LogitsStage : std::uint8_t {
    scaled,      // scale·q·kᵀ
    softcapped,  // after the softcap (the scaled scores without one)
    masked,      // what the softmax takes: softcapped, plus ALiBi and the float mask; −∞ where masked
                 // (bool mask, key lengths, causal, window, a float mask's −∞)
};

// The fused path's kernels (fused and split runs): flash.comp's layout (the CPU devices', measured
// in docs/LAVAPIPE.md), the GPU decode kernel (split runs of up to 8 query rows per K/V head: several
// lanes per key, K/V read once per group) or the GPU prefill kernel (FlashAttention-2's tiles in
// shared memory, register micro-tiles), or the cooperative-matrix prefill kernel (issue #33:
// FlashAttention-2's tiles with S = Q·Kᵀ and O += P·V as 16×16×16 products of f16 operands into fp32,
// or bf16 operands where q, k or v is stored as bf16; on the matrix units where
// DeviceInfo::matrix_units says so (bf16 where bf16_matrix_units does, else refused there), else
// portably from subgroups and shared memory; every storage type: its products have their operands'
// precision, AttentionReport::product_type). Chosen unforced only on the matrix units, for f16 q, k
// and v (bf16 forced or tuned: unvalidated on a GPU), where the kernels run with maximal reconvergence
// (DeviceInfo::maximal_reconvergence): for the forward, and for the backward's dQ, dK and dV on
// cooperative matrices (attention_backward; heads up to 128 wide there); elsewhere forced or tuned.
// docs/design/GPU_KERNELS.md has their cost models.
enum class FusedKernel : std::uint8_t { flash, decode, tile, coopmat };

// The matrix products' kernel (the three-stage path and its backward, the multi-head module's
// projections, the GEMM ceiling): bmm.comp's register blocks, fed by texel or word loads and
// optionally by shared K-slices (the CPU devices'), or bmm_tile.comp, a GPU SGEMM's tiling: 128×128
// tiles, 8×8 register micro-tiles, double-buffered shared slices (docs/design/GPU_KERNELS.md); or
// bmm_coopmat.comp, 16×16×16 cooperative-matrix products with f16 (or bf16) operands and fp32 accumulators
// (issue #33): for now the GEMM ceiling's only (`bench --gemm --gemm-kernel coopmat`), on the
// matrix units where DeviceInfo::matrix_units says so, else portable; the three-stage path refuses it
// (the fused path's cooperative matrices are FusedKernel::coopmat).
enum class GemmKernel : std::uint8_t { blocks, tile, coopmat };

// bmm_coopmat.comp's shape (GemmKernel::coopmat; docs/design/GPU_KERNELS.md, "The GEMM's shapes"):
// a workgroup of subgroups_m × subgroups_n subgroups, each owning tiles_m × tiles_n 16 × 16
// accumulators of C (at most 16); K staged `depth` at a time (a multiple of 16, up to 128) in
// `stages` shared buffers (1: two barriers per slice; 2: one); `wide`: one 16-byte load per 8
// elements where A and B are f16 with every row on 16 bytes (false: the typed loaders, 4 at a time).
struct GemmShape {
    std::uint32_t subgroups_m = 2, subgroups_n = 2, tiles_m = 4, tiles_n = 4, depth = 32, stages = 2;
    bool wide = true;
    bool operator==(const GemmShape&) const = default;
};
std::string to_string(const GemmShape& shape);  // "2x2,4x4,32,2" (",words" where not wide)
// The inverse; std::nullopt where `text` is not of that form.
std::optional<GemmShape> parse_gemm_shape(std::string_view text);

std::string to_string(Causal causal);
std::string to_string(Impl impl);
std::string to_string(FusedKernel kernel);
std::string to_string(GemmKernel kernel);
std::string to_string(LogitsStage stage);

// The standard ALiBi slopes (Press et al., as in BLOOM and llama.cpp) for Hq heads:
// n2 = 2^floor(log2 Hq), m0 = 2^(-max_bias / n2), m1 = 2^(-max_bias / 2 / n2);
// slope_h = m0^(h+1) for h < n2, else m1^(2(h - n2) + 1).
std::vector<float> alibi_slopes(std::int64_t heads, double max_bias);

struct AttentionInputs {
    TensorView q;  // [B, Hq, Nq, Dk]
    TensorView k;  // [B, Hkv, Nkv, Dk]
    TensorView v;  // [B, Hkv, Nkv, Dv]
    std::span<const std::int32_t> kv_lengths;  // [B], keys at j >= len[b] masked; empty = Nkv
    std::optional<MaskView> bool_mask;         // true = attend
    std::optional<MaskView> float_mask;        // added to the scaled scores
    std::span<const float> alibi_slopes;  // [Hq] ALiBi slopes; empty = none (or options.alibi_max_bias)
    std::span<const float> sinks;         // [Hq] attention-sink logits; -inf = no sink for that head
    // fp8 k / v only (vLLM's k_scale, v_scale): the value of an element is fp8 · scale; [1] for the
    // whole tensor or [Hkv] per head, finite and above 0; empty = 1.
    std::span<const float> k_scale, v_scale;
};

struct AttentionOutputs {
    MutableTensorView o;     // [B, Hq, Nq, Dv], same dtype as q
    float* weights = nullptr;  // optional, fp32 dense [B, Hq, Nq, Nkv]
    float* lse = nullptr;      // optional, fp32 dense [B, Hq, Nq], natural log; -inf for empty rows
    float* logits = nullptr;   // optional, fp32 dense [B, Hq, Nq, Nkv], at options.logits_stage
};

// The backward pass's results (vkattn::reference_attention_backward; docs/SEMANTICS.md, "The backward
// pass"): the gradients of a loss with respect to attention's inputs, given the gradient of the same
// loss with respect to o (grad_out). dq, dk and dv have q's, k's and v's shapes and dtypes (float
// types only: a quantized k or v is not trained); each may be left without data (not wanted). Their
// elements must not overlap each other or the inputs.
struct AttentionGradients {
    MutableTensorView dq, dk, dv;
    float* d_sinks = nullptr;       // [Hq], with inputs.sinks only (a head without a sink gets 0)
    float* d_float_mask = nullptr;  // the float mask's own shape, C-contiguous: the gradient of the
                                    // additive mask, summed over every dimension it is broadcast on
};

// Forces a kernel variant; every variant a device could be given is reachable this way so that all of
// them are tested on any device. Unset fields are chosen by the tuning function.
struct VariantOverrides {
    std::optional<bool> texel_loads;    // vec4 texel-buffer loads (needs 4-aligned rows) vs. scalar SSBO
    std::optional<bool> shared_tiles;   // stage operands through shared memory vs. straight to registers
    std::optional<bool> subgroup_ops;   // subgroup reductions vs. shared-memory reductions
    // The fused path's kernel (FusedKernel). Chosen: flash on CPU devices; on GPUs decode for up to
    // 8 query rows per K/V head (split runs), tile otherwise; flash wherever shared_tiles is set or
    // texel_loads is forced on (they are flash's knobs).
    std::optional<FusedKernel> fused_kernel;
    // The products' kernel (GemmKernel). Chosen: blocks on CPU devices, tile on GPUs; blocks wherever
    // shared_tiles is set or texel_loads is forced on (they are blocks' knobs).
    std::optional<GemmKernel> gemm_kernel;
    // Parameters inside a kernel, the tuner's candidates (they shape a kernel wherever it runs and
    // never choose one). A value the device cannot take is refused (InvalidArgument naming
    // "variant.<field>" and the limit). The report's variant shows the layout that ran.
    //   tile_rows, tile_keys: flash_tile.comp's Br (query rows per workgroup: a multiple of the 4·SG/8
    //   rows one subgroup holds, within the device's invocations) and Bc (keys per tile: 4 or 8 per
    //   lane of its 8 key groups, i.e. 32 or 64 on subgroups of 8 or more lanes), within shared memory.
    //   Chosen: 64 × 64. The cooperative-matrix kernel reads them as its own Br (a multiple of 16,
    //   one subgroup per 16 rows) and Bc (a multiple of 16 up to 256).
    std::optional<std::uint32_t> tile_rows, tile_keys;
    //   decode_lanes_per_key: flash_decode.comp's lanes per key, a power of two up to the subgroup.
    //   Chosen: about 16 elements of a row per lane (8 at D = 128 with up to 4 rows).
    std::optional<std::uint32_t> decode_lanes_per_key;
    //   named_accumulators: the cooperative-matrix kernel's O as named matrices (true) or an array
    //   (false). Chosen: named where Q's and O's 16-wide tiles number 15 at most (heads up to 112
    //   wide), which NVIDIA's compiler keeps in registers where it puts the array in local memory;
    //   forced named past that on the matrix units is refused (wrong results on NVIDIA's driver).
    std::optional<bool> named_accumulators;
    //   row_tiles: the cooperative-matrix kernel's 16-row tiles per subgroup, 1 or 2. Two feed each
    //   K and V operand to two products and read Q from a tile of its own at every product of S
    //   (docs/design/GPU_KERNELS.md, "Two row tiles per subgroup"). Chosen: 1 (2 is unmeasured on a
    //   GPU; the tuner times it as coopmat-rt2).
    std::optional<std::uint32_t> row_tiles;
    //   q_in_shared: the cooperative-matrix kernel reads Q's operands from a shared tile of their own
    //   at every product of S (true) rather than holding them in registers (false; two row tiles
    //   refuse it). Chosen: with two row tiles only (the tuner times one row tile so as
    //   coopmat-qshared). With Q so (forced, or two row tiles) the matrix units take heads past 128
    //   (unvalidated there; with Q held they measured wrong): never chosen by the heuristics, and
    //   the tuner keeps it only where it agrees with their kernel.
    std::optional<bool> q_in_shared;
    //   kv_apart: the cooperative-matrix kernel stages K and V into tiles of their own, together,
    //   both a tile ahead in registers: 2 workgroup barriers per key tile rather than 4, for more
    //   registers and shared memory. Chosen: false (unmeasured on a GPU; coopmat-kv-apart).
    std::optional<bool> kv_apart;
    //   workgroup_matrices: the cooperative-matrix forward on workgroup-scope matrices
    //   (shaders/flash_cm2.comp, VK_NV_cooperative_matrix2): the workgroup's S, P and O as single
    //   matrices the driver lays out, K and V as tensor loads, the softmax as row reductions and
    //   element operations, nothing of them through shared memory, where DeviceInfo::
    //   workgroup_matrices holds; elsewhere the same kernel's portable twin (common/wg_matrix.glsl:
    //   its logic on any device, far from the units' speed; its tiles refused by name where shared
    //   memory cannot hold them). Dense f16 K and V, heads up to 128; InvalidArgument naming it
    //   otherwise, and beside row_tiles, q_in_shared, kv_apart or named_accumulators. Chosen: false
    //   (unmeasured on a GPU; coopmat-wg), the tuner's to time.
    std::optional<bool> workgroup_matrices;
    //   gemm_shape: the cooperative-matrix GEMM's shape (GemmShape), for the GEMM ceiling only
    //   (`bench --gemm --gemm-kernel coopmat --gemm-shape`); the attention paths refuse it. Chosen:
    //   2x2,4x4,32,2 on the matrix units, 2x2,2x2,16,2 in the portable implementation.
    std::optional<GemmShape> gemm_shape;
};

// A sliding window around the (aligned) diagonal: query i sees key j when
// i + a - left <= j <= i + a + right; -1 leaves that side unbounded.
struct Window {
    std::int64_t left = -1, right = -1;
    bool bounded() const { return left >= 0 || right >= 0; }
};

// This call as a block of a larger attention, for callers that shard one (heads across devices,
// the sequence across ranks): the call's element (b, h, i, j) is the whole's (b + batch, h + head,
// i + query, j + key). The mask model follows the whole: kv_lengths count the whole's keys (up to
// `keys`), the causal diagonal (bottom-right: len[b] - `queries`, plus any offset), the window and
// ALiBi's distances are the whole's, and dropout draws the whole's Philox numbers; so blocks of a
// sharded call compute exactly the whole's, and their outputs merge by their log-sum-exp
// (docs/SEMANTICS.md, "Blocks"). Masks, slopes and sinks are the block's own, sliced by the caller
// (alibi_max_bias is refused: pass the whole's standard slopes, narrowed).
struct Block {
    std::int64_t batch = 0, head = 0, query = 0, key = 0;  // the call's origin in the whole
    std::int64_t queries = 0, keys = 0;  // the whole's Nq and Nkv; 0: the call's own past its origin
    bool whole() const { return batch == 0 && head == 0 && query == 0 && key == 0 && queries == 0 && keys == 0; }
};

struct AttentionOptions {
    std::optional<double> scale;  // default 1/sqrt(Dk)
    Causal causal = Causal::none;
    // The diagonal's offset a for every batch: causal keeps j <= i + a. Turns causal on (top-left
    // plus a); cannot be combined with Causal::bottom_right, which sets a = len[b] - Nq.
    std::optional<std::int64_t> causal_offset;
    Window window;                      // combinable with causal and every mask
    // Where the diagonal lies that a window and ALiBi measure from, without causal masking (with
    // causal, causal's alignment and causal_offset place it): query i sits at position
    // i + diagonal_offset, plus len[b] - Nq with diagonal_bottom_right. ONNX's Attention aligns its
    // windows so after a KV cache's past keys, causal or not. Refused together with causal.
    std::int64_t diagonal_offset = 0;
    bool diagonal_bottom_right = false;
    std::optional<double> softcap;      // c > 0: s <- c·tanh(s / c) on the scaled scores
    std::optional<double> alibi_max_bias;  // the standard geometric ALiBi slopes (alibi_slopes())
    double dropout = 0.0;               // drop probability in [0, 1) on the attention weights
    std::uint64_t seed = 0;             // dropout's Philox key: same seed, same dropped entries
    Impl impl = Impl::automatic;
    VariantOverrides variant;
    std::uint32_t splits = 0;  // split-KV: key slices (0 = chosen for the device); with Impl::split
    LogitsStage logits_stage = LogitsStage::masked;  // what outputs.logits holds
    Block block;  // this call as a block of a larger attention (sharding); the default is the whole
};

// What ran: the path, the kernel variant and the GPU time of the whole dispatch chain.
struct AttentionReport {
    Impl path = Impl::unfused;
    std::string variant;   // e.g. "unfused/texel/regs/subgroup tm4 tn4"
    double gpu_ms = 0.0;   // from timestamp queries
    std::uint32_t slices = 1;  // >1 when a binding over maxStorageBufferRange forced slicing
    std::uint64_t device_bytes = 0;  // device memory allocated for the call
    double flops = 0.0;  // useful flops: 2·(Dk + Dv) per visible (query, key) pair of the
                         // structural mask (key lengths, causal, window; not the bool mask)
    // Where the path and variant came from: "caller" (impl or a knob forced), "tuning" (the context's
    // measured table: vk-attn tune) or "heuristics" (the tuning functions' rules).
    std::string chosen_by;
    // What the products multiplied: f32 (the FMA kernels: the stored values), or f16 or bf16 (the
    // cooperative-matrix kernels rounded their operands, q, k, v, dO and the probabilities or dS,
    // to it before multiplying into fp32: its precision whatever the storage; bf16 where q, k or v
    // is stored as bf16).
    DType product_type = DType::f32;
};

// Runs attention on host data: uploads, one dispatch chain, downloads. Throws InvalidArgument before
// any GPU work for a bad shape or option, VulkanError / ResourceLimit / DeviceLost otherwise.
AttentionReport attention(Context& context, const AttentionInputs& inputs,
                          const AttentionOutputs& outputs, const AttentionOptions& options = {});

// The backward pass on the device, on host data: the gradients that `grads` asks for, given grad_out
// = ∂loss/∂o (docs/SEMANTICS.md, "The backward pass"; the same arguments and checks as
// reference_attention_backward). One submission runs the forward (its o and log-sum-exp stay on the
// device) and the backward kernels (docs/design/TRAINING.md), deterministic: the same inputs give
// the same bits. The report describes the backward: its variant, GPU time and flops
// (2·(3·Dk + 2·Dv) per visible pair). Tensors past one binding are cut by (batch, K/V head) units;
// refused (ResourceLimit): one unit's share past a binding, or, on devices with a loop budget,
// sequences past it (docs/SEMANTICS.md).
AttentionReport attention_backward(Context& context, const AttentionInputs& inputs, const TensorView& grad_out,
                                   const AttentionGradients& grads, const AttentionOptions& options = {});

}  // namespace vkattn
