#include "kv_storage.hpp"

#include <limits>

#include "npy.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::tool {

void add_kv_storage_flags(CLI::App& app, KvStorageFlags& flags, const std::string& what) {
    app.add_option("--kv-dtype", flags.kv_dtype,
                   "Storage type of K and V: f32, f16, bf16, one of ggml's blocks (q8_0, q4_0, q4_1, q5_0, q5_1, "
                   "iq4_nl; head dimensions multiples of 32), or fp8_e4m3, fp8_e5m2; " + what)
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "fp8_e4m3", "fp8_e5m2"}));
    auto* scale = app.add_option("--kv-scale", flags.kv_scale,
                                 "fp8 K and V: the tensors' scale (values are fp8 · scale; floats are stored as "
                                 "fp8(x / scale)); default 1")
                      ->check(CLI::PositiveNumber);
    app.add_option("--kv-scales", flags.kv_scales, "fp8 K and V: one scale per K/V head, a float32 .npy [Hkv]")
        ->excludes(scale);
}

KvStorage load_kv_storage(const KvStorageFlags& flags, DType fallback) {
    KvStorage s;
    s.dtype = flags.kv_dtype.empty() ? fallback : dtype_from_string(flags.kv_dtype, "--kv-dtype");
    const char* given = flags.kv_scale ? "--kv-scale" : !flags.kv_scales.empty() ? "--kv-scales" : nullptr;
    if (given && !is_fp8(s.dtype))
        throw InvalidArgument(given, "scales are fp8's; K and V are " + to_string(s.dtype) + " (--kv-dtype).");
    if (flags.kv_scale) s.scales = {*flags.kv_scale};
    if (!flags.kv_scales.empty()) {
        const npy::Array a = npy::read(flags.kv_scales);
        if (a.type != npy::ElementType::f32 || a.shape.size() != 1 || a.count() < 1)
            throw InvalidArgument("--kv-scales", flags.kv_scales + " must be a float32 (<f4) array of shape [Hkv] (one "
                                                     "scale per K/V head) or [1], not " + npy::type_name(a.type) + " " +
                                                     npy::shape_text(a.shape) + ".");
        s.scales.assign(a.as<float>(), a.as<float>() + a.count());
        for (const float x : s.scales)
            if (!(x > 0.0f) || x == std::numeric_limits<float>::infinity())
                throw InvalidArgument("--kv-scales", flags.kv_scales + " holds " + std::to_string(x) +
                                                         "; scales are finite and positive.");
    }
    return s;
}

std::vector<float> head_scales(const KvStorage& storage, std::int64_t kv_heads) {
    if (storage.scales.size() == 1) return std::vector<float>(static_cast<std::size_t>(kv_heads), storage.scales[0]);
    if (!storage.scales.empty() && static_cast<std::int64_t>(storage.scales.size()) != kv_heads)
        throw InvalidArgument("--kv-scales", "holds " + std::to_string(storage.scales.size()) + " scales for " +
                                                 std::to_string(kv_heads) + " K/V heads; give one per head, or one.");
    return storage.scales;
}

void check_block_dims(DType dtype, std::int64_t dk, std::int64_t dv) {
    if (!is_block_type(dtype)) return;
    for (const auto& [d, flag] : {std::pair{dk, "--dim"}, std::pair{dv, "--dim-v"}})
        if (d % static_cast<std::int64_t>(block_elements(dtype)) != 0)
            throw InvalidArgument(flag, std::to_string(d) + " is not a multiple of 32, the features of one " +
                                            to_string(dtype) + " block.");
}

}  // namespace vkattn::tool
