#include "run_tensors.hpp"

#include <cstring>

#include "kv_storage.hpp"
#include "npy.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

// A tensor file of rank 2 to 4 with no empty dimension, and its shape promoted to rank 4.
// With `rows`, only those rows of the sequence axis are read (a context-parallel rank's shard).
npy::Array read_tensor(const std::string& path, const char* flag, std::array<std::int64_t, 4>& shape,
                       const npy::RowSelector* rows) {
    if (path.empty()) throw InvalidArgument(flag, "is required.");
    npy::Array a = rows ? npy::read_rows(path, *rows) : npy::read(path);
    if (a.shape.size() < 2 || a.shape.size() > 4)
        throw InvalidArgument(flag, path + " has rank " + std::to_string(a.shape.size()) +
                                        "; tensors are [B, H, N, D], [H, N, D] or [N, D].");
    shape = {1, 1, 1, 1};
    for (std::size_t i = 0; i < a.shape.size(); ++i) shape[4 - a.shape.size() + i] = a.shape[i];
    for (auto d : shape)
        if (d < 1) throw InvalidArgument(flag, path + " has an empty dimension.");
    return a;
}

DType float_type_of(const npy::Array& a, const std::string& path, const char* flag) {
    if (a.type == npy::ElementType::f32) return DType::f32;
    if (a.type == npy::ElementType::f16) return DType::f16;
    if (a.type == npy::ElementType::u16) return DType::bf16;
    throw InvalidArgument(flag, path + " holds " + npy::type_name(a.type) +
                                    "; tensors are float32 (<f4), float16 (<f2) or bf16 bit patterns (uint16, <u2)" +
                                    (std::string(flag) == "--q" ? "." : ", or uint8 rows of a quantized --kv-dtype."));
}

// A file's bytes as a tensor of its own type.
StoredTensor file_tensor(const npy::Array& a, const std::array<std::int64_t, 4>& shape, DType dtype) {
    StoredTensor t{a.shape, shape, dtype, std::vector<std::uint8_t>(a.data.size())};
    std::memcpy(t.bytes.data(), a.data.data(), a.data.size());
    return t;
}

// A float tensor stored in another float type, rounded to nearest even (vkattn::quantize_row); a
// tensor of that type already is kept bit for bit.
StoredTensor converted(StoredTensor t, DType dtype) {
    if (t.dtype == dtype) return t;
    const std::vector<float> values = t.floats();
    t.dtype = dtype;
    t.bytes.assign(storage_bytes(dtype, static_cast<std::int64_t>(values.size())), 0);
    quantize_row(dtype, values, t.bytes);
    return t;
}

// Already-quantized rows: uint8 [.., N, row_bytes] of a block or fp8 type.
StoredTensor quantized_tensor(const npy::Array& a, std::array<std::int64_t, 4> shape, DType dtype,
                              const std::string& path, const char* flag) {
    const std::int64_t row = shape[3];
    const auto unit = static_cast<std::int64_t>(block_bytes(dtype)), elements = static_cast<std::int64_t>(block_elements(dtype));
    if (row % unit != 0)
        throw InvalidArgument(flag, path + " has rows of " + std::to_string(row) + " bytes; " + to_string(dtype) +
                                        " rows are a whole number of " + std::to_string(unit) + "-byte blocks.");
    shape[3] = row / unit * elements;
    return file_tensor(a, shape, dtype);
}

}  // namespace

std::vector<float> StoredTensor::floats(std::span<const float> scales) const {
    const auto D = static_cast<std::size_t>(shape[3]);
    const std::uint64_t row = row_bytes(dtype, shape[3]);
    std::vector<float> out(static_cast<std::size_t>(shape[0] * shape[1] * shape[2]) * D);
    for (std::size_t r = 0; r < out.size() / D; ++r) {
        const auto head = static_cast<std::size_t>(static_cast<std::int64_t>(r / static_cast<std::size_t>(shape[2])) % shape[1]);
        const float scale = is_fp8(dtype) && !scales.empty() ? scales[scales.size() == 1 ? 0 : head] : 1.0f;
        dequantize_row(dtype, {bytes.data() + r * row, row}, {out.data() + r * D, D}, scale);
    }
    return out;
}

std::vector<std::int64_t> StoredTensor::float_shape() const {
    std::vector<std::int64_t> s = file_shape;
    s.back() = shape[3];
    return s;
}

StoredTensor load_floats(const std::string& path, const char* flag, std::optional<DType> dtype,
                         const npy::RowSelector* rows) {
    std::array<std::int64_t, 4> shape{};
    const npy::Array a = read_tensor(path, flag, shape, rows);
    const DType file_type = float_type_of(a, path, flag);
    return converted(file_tensor(a, shape, file_type), dtype.value_or(file_type));
}

StoredKv load_kv(Context& context, const std::string& k_path, const std::string& v_path, const KvStorage& storage,
                 std::int64_t dk, const npy::RowSelector* rows) {
    std::array<std::int64_t, 4> k_shape{}, v_shape{};
    const npy::Array ka = read_tensor(k_path, "--k", k_shape, rows), va = read_tensor(v_path, "--v", v_shape, rows);
    const DType dtype = storage.dtype;
    const std::vector<float> scales = head_scales(storage, k_shape[1]);
    const bool k_rows = ka.type == npy::ElementType::u8, v_rows = va.type == npy::ElementType::u8;
    const bool quantized = is_block_type(dtype) || is_fp8(dtype);
    for (const auto& [as_rows, path, flag] : {std::tuple{k_rows, &k_path, "--k"}, std::tuple{v_rows, &v_path, "--v"}})
        if (as_rows && !quantized)
            throw InvalidArgument(flag, *path + " holds uint8 rows, which are the bytes of a block or fp8 type; "
                                                "name it with --kv-dtype (K and V are " + to_string(dtype) + ").");
    if (k_rows != v_rows)
        throw InvalidArgument("--v", std::string("K and V come as ") + (k_rows ? "quantized rows and floats" : "floats and quantized rows") +
                                         "; give both as floats (quantized on the device) or both as uint8 rows.");
    if (k_rows) {
        StoredKv kv{quantized_tensor(ka, k_shape, dtype, k_path, "--k"), quantized_tensor(va, v_shape, dtype, v_path, "--v"), scales};
        if (kv.k.shape[3] != dk)
            throw InvalidArgument("--k", k_path + " has rows of " + std::to_string(k_shape[3]) + " bytes, " +
                                             std::to_string(kv.k.shape[3]) + " " + to_string(dtype) + " elements; --q has Dk = " +
                                             std::to_string(dk) + " (" + std::to_string(row_bytes(dtype, dk)) + " bytes).");
        return kv;
    }
    const DType k_file = float_type_of(ka, k_path, "--k"), v_file = float_type_of(va, v_path, "--v");
    if (!quantized)  // a float type
        return {converted(file_tensor(ka, k_shape, k_file), dtype), converted(file_tensor(va, v_shape, v_file), dtype), scales};

    // Quantized on the device: a cache of exactly these rows, appended once, read back.
    for (int i = 0; i < 3; ++i)
        if (k_shape[i] != v_shape[i])
            throw InvalidArgument("--v", v_path + " is " + npy::shape_text(va.shape) + " and --k " + npy::shape_text(ka.shape) +
                                             "; K and V differ only in the last dimension.");
    const std::int64_t unit = is_fp8(dtype) ? 2 : static_cast<std::int64_t>(block_elements(dtype));
    for (const auto& [d, flag] : {std::pair{k_shape[3], "--k"}, std::pair{v_shape[3], "--v"}})
        if (d % unit != 0)
            throw InvalidArgument("--kv-dtype", to_string(dtype) + (is_fp8(dtype) ? " is quantized on the device in pairs of elements"
                                                                                   : " stores blocks of 32 along the head dimension") +
                                                    ", and " + flag + " has D = " + std::to_string(d) + ", not a multiple of " +
                                                    std::to_string(unit) + ".");
    const std::vector<float> k_values = file_tensor(ka, k_shape, k_file).floats(), v_values = file_tensor(va, v_shape, v_file).floats();
    KvCache cache(context, {.batch = k_shape[0], .kv_heads = k_shape[1], .capacity = k_shape[2], .dim = k_shape[3],
                            .dim_v = v_shape[3], .dtype = dtype,
                            .k_scale = scales, .v_scale = scales});
    const DeviceTensor k_new = DeviceTensor::from_host(context, make_view<const void*>(k_values.data(), DType::f32, Layout::bhnd, k_shape));
    const DeviceTensor v_new = DeviceTensor::from_host(context, make_view<const void*>(v_values.data(), DType::f32, Layout::bhnd, v_shape));
    Batch batch(context);
    cache.append(batch, k_new, v_new);
    batch.submit().wait();
    StoredKv kv{{ka.shape, k_shape, dtype, std::vector<std::uint8_t>(storage_bytes(dtype, k_shape[0] * k_shape[1] * k_shape[2] * k_shape[3]))},
                {va.shape, v_shape, dtype, std::vector<std::uint8_t>(storage_bytes(dtype, v_shape[0] * v_shape[1] * v_shape[2] * v_shape[3]))},
                scales};
    cache.k().download(kv.k.mutable_view());
    cache.v().download(kv.v.mutable_view());
    return kv;
}

}  // namespace vkattn::tool
