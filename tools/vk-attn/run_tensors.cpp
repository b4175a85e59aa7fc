#include "run_tensors.hpp"

#include <cstring>

#include "npy.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

// A tensor file of rank 2 to 4 with no empty dimension, and its shape promoted to rank 4.
npy::Array read_tensor(const std::string& path, const char* flag, std::array<std::int64_t, 4>& shape) {
    if (path.empty()) throw InvalidArgument(flag, "is required.");
    npy::Array a = npy::read(path);
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

// A float file's values as f32.
std::vector<float> floats_of(const npy::Array& a, DType file_type) {
    const auto n = static_cast<std::size_t>(a.count());
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i)
        out[i] = file_type == DType::f32   ? a.as<float>()[i]
                 : file_type == DType::f16 ? half_to_float(a.as<std::uint16_t>()[i])
                                           : bf16_to_float(a.as<std::uint16_t>()[i]);
    return out;
}

// Values stored in a float type, rounded to nearest even (a file of that type is kept bit for bit).
std::vector<std::uint8_t> stored_as(const std::vector<float>& values, DType dtype) {
    std::vector<std::uint8_t> bytes(storage_bytes(dtype, static_cast<std::int64_t>(values.size())));
    if (dtype == DType::f32) {
        std::memcpy(bytes.data(), values.data(), bytes.size());
        return bytes;
    }
    auto* out = reinterpret_cast<std::uint16_t*>(bytes.data());
    for (std::size_t i = 0; i < values.size(); ++i)
        out[i] = dtype == DType::f16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
    return bytes;
}

StoredTensor floats_tensor(const npy::Array& a, const std::array<std::int64_t, 4>& shape, DType file_type, DType dtype) {
    StoredTensor t{a.shape, shape, dtype, {}};
    if (file_type == dtype) {  // bit for bit: no rounding twice
        t.bytes.resize(a.data.size());
        std::memcpy(t.bytes.data(), a.data.data(), a.data.size());
    } else {
        t.bytes = stored_as(floats_of(a, file_type), dtype);
    }
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
    StoredTensor t{a.shape, shape, dtype, {}};
    t.bytes.resize(a.data.size());
    std::memcpy(t.bytes.data(), a.data.data(), a.data.size());
    return t;
}

bool is_float_storage(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

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

DType file_float_type(const std::string& path, const char* flag) {
    std::array<std::int64_t, 4> shape{};
    return float_type_of(read_tensor(path, flag, shape), path, flag);
}

std::int64_t kv_heads_of(const std::string& path) {
    std::array<std::int64_t, 4> shape{};
    read_tensor(path, "--k", shape);
    return shape[1];
}

StoredTensor load_floats(const std::string& path, const char* flag, DType dtype) {
    std::array<std::int64_t, 4> shape{};
    const npy::Array a = read_tensor(path, flag, shape);
    return floats_tensor(a, shape, float_type_of(a, path, flag), dtype);
}

StoredKv load_kv(Context& context, const std::string& k_path, const std::string& v_path, DType dtype,
                 std::span<const float> scales, std::int64_t dk) {
    std::array<std::int64_t, 4> k_shape{}, v_shape{};
    const npy::Array ka = read_tensor(k_path, "--k", k_shape), va = read_tensor(v_path, "--v", v_shape);
    const bool k_rows = ka.type == npy::ElementType::u8, v_rows = va.type == npy::ElementType::u8;
    const bool quantized = is_block_type(dtype) || is_fp8(dtype);
    for (const auto& [rows, path, flag] : {std::tuple{k_rows, &k_path, "--k"}, std::tuple{v_rows, &v_path, "--v"}})
        if (rows && !quantized)
            throw InvalidArgument(flag, *path + " holds uint8 rows, which are the bytes of a block or fp8 type; "
                                                "name it with --kv-dtype (K and V are " + to_string(dtype) + ").");
    if (k_rows != v_rows)
        throw InvalidArgument("--v", std::string("K and V come as ") + (k_rows ? "quantized rows and floats" : "floats and quantized rows") +
                                         "; give both as floats (quantized on the device) or both as uint8 rows.");
    if (k_rows) {
        StoredKv kv{quantized_tensor(ka, k_shape, dtype, k_path, "--k"), quantized_tensor(va, v_shape, dtype, v_path, "--v")};
        if (kv.k.shape[3] != dk)
            throw InvalidArgument("--k", k_path + " has rows of " + std::to_string(k_shape[3]) + " bytes, " +
                                             std::to_string(kv.k.shape[3]) + " " + to_string(dtype) + " elements; --q has Dk = " +
                                             std::to_string(dk) + " (" + std::to_string(row_bytes(dtype, dk)) + " bytes).");
        return kv;
    }
    const DType k_file = float_type_of(ka, k_path, "--k"), v_file = float_type_of(va, v_path, "--v");
    if (is_float_storage(dtype))
        return {floats_tensor(ka, k_shape, k_file, dtype), floats_tensor(va, v_shape, v_file, dtype)};

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
    const std::vector<float> k_values = floats_of(ka, k_file), v_values = floats_of(va, v_file);
    KvCache cache(context, {.batch = k_shape[0], .kv_heads = k_shape[1], .capacity = k_shape[2], .dim = k_shape[3],
                            .dim_v = v_shape[3], .dtype = dtype,
                            .k_scale = {scales.begin(), scales.end()}, .v_scale = {scales.begin(), scales.end()}});
    const DeviceTensor k_new = DeviceTensor::from_host(context, make_view<const void*>(k_values.data(), DType::f32, Layout::bhnd, k_shape));
    const DeviceTensor v_new = DeviceTensor::from_host(context, make_view<const void*>(v_values.data(), DType::f32, Layout::bhnd, v_shape));
    Batch batch(context);
    cache.append(batch, k_new, v_new);
    batch.submit().wait();
    StoredKv kv{{ka.shape, k_shape, dtype, std::vector<std::uint8_t>(storage_bytes(dtype, k_shape[0] * k_shape[1] * k_shape[2] * k_shape[3]))},
                {va.shape, v_shape, dtype, std::vector<std::uint8_t>(storage_bytes(dtype, v_shape[0] * v_shape[1] * v_shape[2] * v_shape[3]))}};
    cache.k().download(kv.k.mutable_view());
    cache.v().download(kv.v.mutable_view());
    return kv;
}

}  // namespace vkattn::tool
