#include "tune/table.hpp"

#include <fstream>
#include <sstream>

#include "vkattn/variants.hpp"

namespace vkattn::detail {
namespace {

// Version 2 added the backward's buckets, which version 1's readers would refuse by variant name:
// they now refuse the header (and keep the heuristics) instead. Version 1 tables, forward winners
// only, still load.
constexpr std::string_view kHeader = "vkattn tuning table 2", kVersion1 = "vkattn tuning table 1";
constexpr std::string_view kBackwardBucket = "backward ";

// n rounded up to a power of 8, past 32768 "more".
std::string length_bucket(std::int64_t n) {
    for (std::int64_t b = 1; b <= 32768; b *= 8)
        if (n <= b) return std::to_string(b);
    return "more";
}

// Splits off the next line of `text` (without its newline).
bool next_line(std::string_view& text, std::string_view& line) {
    if (text.empty()) return false;
    const std::size_t end = text.find('\n');
    line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    return true;
}

}  // namespace

std::string tuning_bucket(const Problem& p) {
    std::ostringstream s;
    s << "q=" << to_string(p.dtype) << " k=" << to_string(p.k_dtype) << " v=" << to_string(p.v_dtype) << " dk=" << p.Dk
      << " dv=" << p.Dv << " causal=" << (p.causal != Causal::none ? 1 : 0) << " group=" << length_bucket(p.group)
      << " rows=" << length_bucket(p.group * p.Nq) << " keys=" << length_bucket(p.Nkv);
    return s.str();
}

std::string backward_tuning_bucket(const Problem& p) { return std::string(kBackwardBucket) + tuning_bucket(p); }

std::string TuningTable::serialize() const {
    std::ostringstream s;
    s << kHeader << "\ndevice " << device_uuid << "\ndriver " << driver << '\n';
    for (const auto& [bucket, w] : winners) s << bucket << '\t' << w.variant << '\t' << w.ms << '\n';
    return s.str();
}

std::optional<TuningTable> TuningTable::parse(std::string_view text, std::string* why) {
    auto fail = [&](const std::string& reason) -> std::optional<TuningTable> {
        if (why) *why = reason;
        return std::nullopt;
    };
    std::string_view line;
    if (!next_line(text, line) || (line != kHeader && line != kVersion1))
        return fail("not a vkattn tuning table (version 1 or 2)");
    TuningTable t;
    if (!next_line(text, line) || !line.starts_with("device ")) return fail("no device line");
    t.device_uuid = std::string(line.substr(7));
    if (!next_line(text, line) || !line.starts_with("driver ")) return fail("no driver line");
    t.driver = std::string(line.substr(7));
    while (next_line(text, line)) {
        if (line.empty()) continue;
        const std::size_t a = line.find('\t'), b = a == std::string_view::npos ? a : line.find('\t', a + 1);
        if (b == std::string_view::npos) return fail("a winner line without bucket, variant and time: " + std::string(line));
        TuningWinner w{std::string(line.substr(a + 1, b - a - 1)), 0.0};
        const bool backward = line.starts_with(kBackwardBucket);
        if (backward ? !find_backward_variant(w.variant) : !find_kernel_variant(w.variant))
            return fail("the variant '" + w.variant + "' is not in the " + (backward ? "backward's " : "") + "catalogue");
        try {
            w.ms = std::stod(std::string(line.substr(b + 1)));
        } catch (const std::exception&) {
            return fail("a winner line with a time that is not a number: " + std::string(line));
        }
        t.winners[std::string(line.substr(0, a))] = w;
    }
    return t;
}

const std::string* TuningTable::winner_of(const std::string& bucket) const {
    const auto found = winners.find(bucket);
    return found == winners.end() ? nullptr : &found->second.variant;
}

const std::string* TuningTable::winner(const Problem& p) const { return winner_of(tuning_bucket(p)); }

const std::string* TuningTable::backward_winner(const Problem& p) const { return winner_of(backward_tuning_bucket(p)); }

std::filesystem::path tuning_table_file(const std::filesystem::path& dir, const std::string& device_uuid) {
    return dir / ("tuning-" + device_uuid + ".txt");
}

std::optional<TuningTable> load_tuning_table(const std::filesystem::path& file, const std::string& device_uuid,
                                             const std::string& driver, std::string* why) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        if (why) *why = "no table at " + file.string();
        return std::nullopt;
    }
    std::ostringstream text;
    text << in.rdbuf();
    auto table = TuningTable::parse(text.str(), why);
    if (!table) return std::nullopt;
    if (table->device_uuid != device_uuid || table->driver != driver) {
        if (why) *why = "the table was measured on device " + table->device_uuid + " with driver " + table->driver;
        return std::nullopt;
    }
    return table;
}

}  // namespace vkattn::detail
