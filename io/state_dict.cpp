#include "state_dict.hpp"

#include "safetensors.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace {

std::string key_list(const std::map<std::string, npy::Array>& tensors) {
    if (tensors.empty()) return "none";
    std::string s;
    for (const auto& [key, array] : tensors) s += (s.empty() ? "" : ", ") + key;
    return s;
}

StateDict load_directory(const std::filesystem::path& dir) {
    StateDict dict{.source = dir.string()};
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
        if (file.path().extension() != ".npy" || file.is_directory()) continue;
        dict.tensors.emplace(file.path().stem().string(), npy::read(file.path()));
    }
    if (dict.tensors.empty()) throw InvalidArgument(dict.source, "the directory holds no .npy files.");
    return dict;
}

}  // namespace

const npy::Array* StateDict::find(const std::string& key, npy::ElementType type, const std::vector<std::int64_t>& shape) const {
    const auto it = tensors.find(key);
    if (it == tensors.end()) return nullptr;
    const npy::Array& a = it->second;
    if (a.type != type)
        throw InvalidArgument(source, "tensor '" + key + "' is " + npy::type_name(a.type) + "; expected " + npy::type_name(type) + ".");
    if (a.shape != shape)
        throw InvalidArgument(source, "tensor '" + key + "' has shape " + npy::shape_text(a.shape) + "; expected " +
                                          npy::shape_text(shape) + ".");
    return &a;
}

const npy::Array& StateDict::require(const std::string& key, npy::ElementType type, const std::vector<std::int64_t>& shape) const {
    if (const npy::Array* a = find(key, type, shape)) return *a;
    throw InvalidArgument(source, "the state dict has no tensor '" + key + "' (expected " + npy::type_name(type) + " of shape " +
                                      npy::shape_text(shape) + "; it holds: " + key_list(tensors) + ").");
}

StateDict load_state_dict(const std::filesystem::path& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return load_directory(path);
    if (path.extension() == ".safetensors") return {.source = path.string(), .tensors = safetensors::read(path)};
    if (!std::filesystem::exists(path, ec)) throw InvalidArgument(path.string(), "does not exist.");
    throw InvalidArgument(path.string(), "is neither a directory of .npy files nor a .safetensors file.");
}

}  // namespace vkattn
