// A model's weights by name, as PyTorch's state_dict() keys them ("in_proj_weight", "out_proj.bias"),
// loaded from either form users export:
//   - a directory of .npy files, one per tensor, named after its key: out_proj.weight.npy -> "out_proj.weight"
//     (files with other extensions and subdirectories are ignored);
//   - a .safetensors file holding the tensors under the same names.
// Lookups check the dtype and shape the caller expects and name the key, the expected and the found
// shape when they differ, so a wrong export fails with a sentence instead of a wrong answer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "npy.hpp"

namespace vkattn {

struct StateDict {
    std::string source;  // the path loaded from; starts every error message
    std::map<std::string, npy::Array> tensors;

    // The tensor under `key`, which must exist with this dtype and shape.
    // Throws vkattn::InvalidArgument(source, ...) naming the key otherwise.
    const npy::Array& require(const std::string& key, npy::ElementType type, const std::vector<std::int64_t>& shape) const;
    // As require(), but a missing key gives nullptr (a layer built with bias=False has no biases).
    const npy::Array* find(const std::string& key, npy::ElementType type, const std::vector<std::int64_t>& shape) const;
};

// A directory -> its *.npy files; a file ending in .safetensors -> its tensors; anything else is
// rejected. Throws vkattn::InvalidArgument naming the path (or the offending file) on any problem.
StateDict load_state_dict(const std::filesystem::path& path);

}  // namespace vkattn
