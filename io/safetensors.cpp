#include "safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <ostream>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "vkattn/errors.hpp"
#include "whole_file.hpp"

namespace vkattn::safetensors {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "tensor bytes are copied as they lie in the file");

[[noreturn]] void fail(const std::string& name, const std::string& what) { throw InvalidArgument(name, what); }

// A file dtype: its name in the header, the npy type it loads as, and its size in the file.
struct Dtype {
    std::string_view name;
    npy::ElementType type;
    std::size_t file_bytes;
};
constexpr Dtype bf16{"BF16", npy::ElementType::f32, 2};  // widened to float32 on load
constexpr Dtype dtypes[] = {
    {"F32", npy::ElementType::f32, 4},       {"F16", npy::ElementType::f16, 2},
    {"BOOL", npy::ElementType::boolean, 1},  {"I32", npy::ElementType::i32, 4},
    {"I64", npy::ElementType::i64, 8},       bf16,
    {"U8", npy::ElementType::u8, 1},         {"U16", npy::ElementType::u16, 2},
};
constexpr std::string_view supported = "F32, F16, BF16, BOOL, I32, I64, U8, U16";

std::string_view dtype_name(npy::ElementType type) {
    for (const Dtype& d : dtypes)
        if (d.type == type && d.name != bf16.name) return d.name;
    return "?";
}

// The format needs three levels of nesting: the top object, a tensor's entry, its shape or offsets.
constexpr int max_container_depth = 2;  // nlohmann's depth of the deepest container's start event
constexpr std::size_t max_rank = 8;     // as for .npy files

// Thrown from inside the JSON parser's callback, turned into InvalidArgument by parse_header.
struct HeaderRejected {
    std::string reason;
};

json parse_header(std::string_view text, const std::string& name) {
    std::set<std::string> names;
    std::size_t elements_in_entry_field = 0;
    // The callback stops a hostile header early: nesting deeper than the format needs and long lists
    // are rejected while parsing, before they are allocated; a name given twice (which a JSON parser
    // would silently resolve to the last one) is rejected too.
    auto check = [&](int depth, json::parse_event_t event, json& parsed) {
        const bool starts_container = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
        if (starts_container && depth > max_container_depth)
            throw HeaderRejected{"the header nests deeper than the format allows (a tensor entry's fields are "
                                 "a string and two lists of integers)."};
        if (starts_container && depth == max_container_depth) elements_in_entry_field = 0;
        if (event == json::parse_event_t::value && depth == max_container_depth + 1 && ++elements_in_entry_field > max_rank)
            throw HeaderRejected{"a list in the header holds more than " + std::to_string(max_rank) +
                                 " elements; a shape has at most " + std::to_string(max_rank) + " dimensions."};
        if (event == json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second)
            throw HeaderRejected{"the header names '" + parsed.get<std::string>() + "' twice."};
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), check);
    } catch (const HeaderRejected& e) {
        fail(name, e.reason);
    } catch (const json::parse_error& e) {
        fail(name, "the header is not valid JSON (the parser stopped at byte " + std::to_string(e.byte) + " of its " +
                       std::to_string(text.size()) + ").");
    } catch (const json::out_of_range&) {
        // The parser's other refusal (error 406): a number beyond every JSON number type, such as
        // 1e999. Found by fuzz_safetensors: it escaped as json::out_of_range and ended the program.
        fail(name, "the header holds a number too large to represent (the JSON parser refused it).");
    }
}

// What one entry promises, checked against the data region but not yet copied.
struct Entry {
    std::string name;
    const Dtype* dtype = nullptr;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;
};

const Dtype& parse_dtype(const json& value, const std::string& where, const std::string& name) {
    if (!value.is_string()) fail(name, where + ": \"dtype\" is not a string.");
    const auto& text = value.get_ref<const std::string&>();
    for (const Dtype& d : dtypes)
        if (d.name == text) return d;
    fail(name, where + " has dtype " + text.substr(0, 32) + ", which is not supported (" + std::string(supported) + ").");
}

std::vector<std::int64_t> parse_shape(const json& value, const std::string& where, const std::string& name) {
    if (!value.is_array()) fail(name, where + ": \"shape\" is not a list of integers.");
    std::vector<std::int64_t> shape;
    for (const json& d : value) {
        const std::string dim = where + ": dimension " + std::to_string(shape.size());
        if (d.is_number_unsigned()) {
            const auto u = d.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                fail(name, dim + " is " + std::to_string(u) + ", more than the limit of 2^63 - 1.");
            shape.push_back(static_cast<std::int64_t>(u));
        } else if (d.is_number_integer()) {
            fail(name, dim + " is " + std::to_string(d.get<std::int64_t>()) + "; dimensions must be non-negative.");
        } else {
            fail(name, dim + " is not an integer.");
        }
    }
    return shape;
}

std::uint64_t parse_offset(const json& value, const std::string& where, const std::string& name) {
    if (!value.is_number_unsigned())
        fail(name, where + ": \"data_offsets\" must be two non-negative integers [begin, end].");
    return value.get<std::uint64_t>();
}

Entry parse_entry(const std::string& tensor, const json& entry, std::uint64_t data_bytes, const std::string& name) {
    const std::string where = "tensor '" + tensor + "'";
    if (!entry.is_object())
        fail(name, where + ": its entry is a JSON " + std::string(entry.type_name()) +
                       ", not an object with dtype, shape and data_offsets.");
    auto field = [&](const char* key) -> const json& {
        const auto it = entry.find(key);
        if (it == entry.end()) fail(name, where + " has no \"" + std::string(key) + "\" field.");
        return *it;
    };
    Entry e{.name = tensor};
    e.dtype = &parse_dtype(field("dtype"), where, name);
    e.shape = parse_shape(field("shape"), where, name);

    const json& offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2)
        fail(name, where + ": \"data_offsets\" must be two non-negative integers [begin, end].");
    e.begin = parse_offset(offsets[0], where, name);
    e.end = parse_offset(offsets[1], where, name);
    const std::string range = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) fail(name, where + ": " + range + " end before they begin.");
    if (e.end > data_bytes)
        fail(name, where + ": " + range + " run past the end of the data region, which holds " + std::to_string(data_bytes) +
                       " bytes.");

    std::uint64_t needed = e.dtype->file_bytes;
    for (const std::int64_t d : e.shape)
        if (__builtin_mul_overflow(needed, static_cast<std::uint64_t>(d), &needed))
            fail(name, where + ": the byte size of shape " + npy::shape_text(e.shape) + " overflows 64 bits.");
    if (needed != e.end - e.begin)
        fail(name, where + " has shape " + npy::shape_text(e.shape) + " of " + std::string(e.dtype->name) + ", which needs " +
                       std::to_string(needed) + " bytes, but its " + range + " hold " + std::to_string(e.end - e.begin) + ".");
    return e;
}

void check_metadata(const json& metadata, const std::string& name) {
    const bool strings_only =
        metadata.is_object() && std::all_of(metadata.begin(), metadata.end(), [](const json& v) { return v.is_string(); });
    if (!strings_only) fail(name, "the \"__metadata__\" entry must be an object mapping strings to strings.");
}

void check_no_overlap(std::vector<const Entry*> entries, const std::string& name) {
    std::erase_if(entries, [](const Entry* e) { return e->begin == e->end; });  // empty tensors occupy nothing
    std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < entries.size(); ++i) {
        const Entry& a = *entries[i - 1];
        const Entry& b = *entries[i];
        if (b.begin < a.end)
            fail(name, "tensors '" + a.name + "' and '" + b.name + "' overlap in the data region (bytes [" +
                           std::to_string(a.begin) + ", " + std::to_string(a.end) + ") and [" + std::to_string(b.begin) +
                           ", " + std::to_string(b.end) + ")).");
    }
}

npy::Array load(const Entry& e, std::span<const std::byte> data) {
    npy::Array a;
    a.type = e.dtype->type;
    a.shape = e.shape;
    const std::byte* first = data.data() + e.begin;
    if (e.dtype->name != bf16.name) {
        a.data.assign(first, data.data() + e.end);
        return a;
    }
    // bfloat16 is the top 16 bits of a float32: widening is a shift, exact for every value.
    const std::size_t count = (e.end - e.begin) / 2;
    a.data.resize(count * 4);
    for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t half;
        std::memcpy(&half, first + 2 * i, 2);
        const std::uint32_t full = static_cast<std::uint32_t>(half) << 16;
        std::memcpy(a.data.data() + 4 * i, &full, 4);
    }
    return a;
}

}  // namespace

Tensors parse(std::span<const std::byte> bytes, const std::string& name) {
    if (bytes.size() < 8)
        fail(name, "the file is " + std::to_string(bytes.size()) +
                       " bytes long; a .safetensors file starts with an 8-byte header length.");
    std::uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);
    if (header_bytes > max_header_bytes)
        fail(name, "the header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                       std::to_string(max_header_bytes) + " bytes.");
    if (header_bytes > bytes.size() - 8)
        fail(name, "the header length " + std::to_string(header_bytes) + " runs past the end of the file, which holds " +
                       std::to_string(bytes.size() - 8) + " bytes after the length.");
    if (header_bytes == 0) fail(name, "the header length is 0; the header must be a JSON object.");
    const json header = parse_header({reinterpret_cast<const char*>(bytes.data() + 8), header_bytes}, name);
    if (!header.is_object()) fail(name, "the header is a JSON " + std::string(header.type_name()) + ", not an object.");

    const std::span<const std::byte> data = bytes.subspan(8 + header_bytes);
    std::vector<Entry> entries;
    for (const auto& [tensor, entry] : header.items()) {
        if (tensor == "__metadata__") check_metadata(entry, name);
        else entries.push_back(parse_entry(tensor, entry, data.size(), name));
    }
    std::vector<const Entry*> all;
    for (const Entry& e : entries) all.push_back(&e);
    check_no_overlap(std::move(all), name);

    Tensors tensors;
    for (const Entry& e : entries) tensors.emplace(e.name, load(e, data));
    return tensors;
}

Tensors read(const std::filesystem::path& path) {
    const std::vector<std::byte> bytes = io::read_whole_file(path);
    return parse(bytes, path.string());
}

void write(const std::filesystem::path& path, const Tensors& tensors) {
    const std::string name = path.string();
    json header = json::object();
    std::uint64_t offset = 0;
    for (const auto& [tensor, a] : tensors) {
        if (tensor == "__metadata__") fail(name, "'__metadata__' is reserved and cannot name a tensor.");
        std::uint64_t needed = npy::element_size(a.type);
        for (const std::int64_t d : a.shape)
            if (d < 0 || __builtin_mul_overflow(needed, static_cast<std::uint64_t>(d), &needed))
                fail(name, "tensor '" + tensor + "' has an invalid shape " + npy::shape_text(a.shape) + ".");
        if (needed != a.data.size())
            fail(name, "tensor '" + tensor + "' holds " + std::to_string(a.data.size()) + " bytes, but its shape " +
                           npy::shape_text(a.shape) + " needs " + std::to_string(needed) + ".");
        header[tensor] = {{"dtype", dtype_name(a.type)}, {"shape", a.shape}, {"data_offsets", {offset, offset + needed}}};
        offset += needed;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data region 8-byte aligned, as other writers do
    io::write_file_atomically(path, [&](std::ostream& out) {
        const std::uint64_t length = text.size();
        out.write(reinterpret_cast<const char*>(&length), 8);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        for (const auto& [tensor, a] : tensors)
            out.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(a.data.size()));
    });
}

}  // namespace vkattn::safetensors
