// The K/V storage flags of `run`, `bench` and `decode`: --kv-dtype (any storage type K and V may
// have) and fp8's scales, --kv-scale S (the tensors') or --kv-scales S.npy (one per K/V head), the
// same scales for K and V. Checked here so that the errors name the flag the user typed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "vkattn/tensor.hpp"

namespace vkattn::tool {

struct KvStorageFlags {
    std::string kv_dtype;           // empty: the run's --dtype
    std::optional<float> kv_scale;  // --kv-scale
    std::string kv_scales;          // --kv-scales, a float32 .npy [Hkv]
};

// `what` ends the --kv-dtype help: how the command gets its K/V in that type.
void add_kv_storage_flags(CLI::App& app, KvStorageFlags& flags, const std::string& what);

struct KvStorage {
    DType dtype = DType::f32;
    std::vector<float> scales;  // [1] or [Hkv] for fp8 when a scale flag is given, else empty (1)
};

// The K/V type (--kv-dtype, else `fallback`) and its scales (their count is checked against a shape
// by head_scales). InvalidArgument naming the flag: an unknown type, a scale for a type other than
// fp8, a scales file that is not a float32 vector of finite positive values.
KvStorage load_kv_storage(const KvStorageFlags& flags, DType fallback);

// The scales per head for `kv_heads` heads ([1] repeated), or empty without scales;
// InvalidArgument naming --kv-scales when the file has another count.
std::vector<float> head_scales(const KvStorage& storage, std::int64_t kv_heads);

// InvalidArgument naming --dim or --dim-v unless a block type's head dimensions are whole blocks.
void check_block_dims(DType dtype, std::int64_t dk, std::int64_t dv);

}  // namespace vkattn::tool
