// `vk-attn run`'s tensors in the types the run stores them in. Files hold floats (float32, float16,
// or bf16 bit patterns as uint16 `<u2`: numpy has no bf16), or for K and V already-quantized rows
// (uint8 [.., Nkv, row_bytes]: D/32 blocks of ggml's format, or D fp8 bytes). Q, and K/V in a float
// type, are rounded on the host (to nearest even, as the device would); float K/V of a block or fp8
// --kv-dtype are quantized on the device, by a KvCache's append (ggml's reference rounding,
// fp8(x / scale)), and read back.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv_storage.hpp"
#include "npy.hpp"
#include "vkattn/context.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::tool {

// A tensor as the run stores it: its file's shape, its rank-4 shape [B, H, N, D] (D in elements)
// and its bytes in `dtype`, dense bhnd.
struct StoredTensor {
    std::vector<std::int64_t> file_shape;
    std::array<std::int64_t, 4> shape{};
    DType dtype = DType::f32;
    std::vector<std::uint8_t> bytes;

    TensorView view() const { return make_view<const void*>(bytes.data(), dtype, Layout::bhnd, shape); }
    MutableTensorView mutable_view() { return make_view<void*>(bytes.data(), dtype, Layout::bhnd, shape); }
    // Every element as float, dense (a block type's dequantized value; an fp8 element times its
    // head's scale from `scales`, [1] or [H], or 1 when empty).
    std::vector<float> floats(std::span<const float> scales = {}) const;
    // The shape of a float32 file of this tensor: the file's rank, D elements last.
    std::vector<std::int64_t> float_shape() const;
};

// A float file (rank 2 to 4: float32, float16 or bf16 bits as uint16) stored in `dtype` (f32, f16
// or bf16; unset: the file's own type). InvalidArgument naming `flag` for another file type.
// With `rows`, only the sequence rows it selects are read (a context-parallel rank's shard).
StoredTensor load_floats(const std::string& path, const char* flag, std::optional<DType> dtype,
                         const npy::RowSelector* rows = nullptr);

// K and V stored in `storage`'s type (any K/V type) with its fp8 scales, from float files or, for a
// block or fp8 type, uint8 files of quantized rows (both, or neither). `dk` is Q's head dimension,
// which K's rows must hold.
struct StoredKv {
    StoredTensor k, v;
    std::vector<float> scales;  // fp8: one per K/V head (head_scales), else empty
};
StoredKv load_kv(Context& context, const std::string& k_path, const std::string& v_path, const KvStorage& storage,
                 std::int64_t dk, const npy::RowSelector* rows = nullptr);

}  // namespace vkattn::tool
