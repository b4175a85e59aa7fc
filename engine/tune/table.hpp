// The tuner's stored winners (issue #32): which catalogued variant (vkattn/variants.hpp) ran fastest
// on one device and driver for each bucket of problems. `vk-attn tune` measures and writes it beside
// the pipeline cache; a context loads the table that names its own device's UUID and driver (any
// other is ignored, as is every table under VKATTN_TUNING=off), and automatic path choice takes its
// winner where the problem's bucket has one and the caller forced nothing.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "attention/problem.hpp"

namespace vkattn::detail {

// A problem's bucket: its storage types, head dimensions, mask kind, the GQA group and its query
// rows and keys rounded up to powers of 8 (1, 8, 64, ... 32768, then "more"). Problems in one bucket
// are expected to share a winner.
std::string tuning_bucket(const Problem& problem);
// The backward pass's bucket for the same problem: "backward " and the forward's.
std::string backward_tuning_bucket(const Problem& problem);

struct TuningWinner {
    std::string variant;  // a catalogued variant's name (a backward variant's in a backward bucket)
    double ms = 0;        // its median GPU time at the bucket's measured shape
};

struct TuningTable {
    std::string device_uuid;  // DeviceInfo::uuid
    std::string driver;       // DeviceInfo::driver
    std::map<std::string, TuningWinner> winners;  // by tuning_bucket

    // The text format: a header line, the device and driver, then one "bucket<TAB>variant<TAB>ms" line
    // per bucket.
    std::string serialize() const;
    // Empty, with the reason in *why, for text that is not a table of this version or names a
    // variant the catalogue lacks.
    static std::optional<TuningTable> parse(std::string_view text, std::string* why);
    // The winner's name for a problem, or nullptr; and its backward pass's.
    const std::string* winner(const Problem& problem) const;
    const std::string* backward_winner(const Problem& problem) const;

private:
    const std::string* winner_of(const std::string& bucket) const;
};

// Where a device's table lives: beside the pipeline cache (`dir`), one file per device UUID.
std::filesystem::path tuning_table_file(const std::filesystem::path& dir, const std::string& device_uuid);

// The table at `file` if it exists, parses, and names this device and driver; else empty (a table of
// another device or driver, or an unreadable one, is ignored: *why says why when asked).
std::optional<TuningTable> load_tuning_table(const std::filesystem::path& file, const std::string& device_uuid,
                                             const std::string& driver, std::string* why = nullptr);

}  // namespace vkattn::detail
