// vk-attn bench: its sweeps and the columns every point prints (bench_common.hpp).
#include <optional>
#include <sstream>

#include "bench_common.hpp"
#include "parse_integer.hpp"
#include "vkattn/testing/clock_probe.hpp"

namespace vkattn::tool {

// "256,1024,4096" or "256:4096:x2" (geometric) or "64:256:+64" (arithmetic).
std::vector<std::int64_t> parse_sweep(const std::string& text, const std::string& flag) {
    std::vector<std::int64_t> out;
    auto number = [&](const std::string& s) {
        const std::optional<std::int64_t> v = parse_integer(s);
        if (!v || *v < 1) throw InvalidArgument(flag, "\"" + s + "\" is not a positive integer.");
        return *v;
    };
    if (const auto colon = text.find(':'); colon != std::string::npos) {
        const auto second = text.find(':', colon + 1);
        if (second == std::string::npos || second + 2 > text.size())
            throw InvalidArgument(flag, "a range is FROM:TO:xFACTOR or FROM:TO:+STEP, not \"" + text + "\".");
        const std::int64_t from = number(text.substr(0, colon)), to = number(text.substr(colon + 1, second - colon - 1));
        const char kind = text[second + 1];
        const std::int64_t step = number(text.substr(second + 2));
        if ((kind != 'x' && kind != '+') || (kind == 'x' && step < 2))
            throw InvalidArgument(flag, "a range step is xFACTOR (FACTOR >= 2) or +STEP, not \"" + text.substr(second + 1) + "\".");
        for (std::int64_t v = from; v <= to; v = kind == 'x' ? v * step : v + step) out.push_back(v);
        return out;
    }
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) out.push_back(number(item));
    if (out.empty()) throw InvalidArgument(flag, "no values given.");
    return out;
}

// A point's shape, mask and timing columns (every row of a point has them in this order).
void add_point(Row& r, const Point& p, bool causal, const std::string& feature_text, const testing::Timing& t) {
    r.add("batch", p.B);
    r.add("heads", p.Hq);
    r.add("kv_heads", p.Hkv);
    r.add("seq_q", p.Nq);
    r.add("seq_kv", p.Nkv);
    r.add("dim", p.Dk);
    r.add("dim_v", p.Dv);
    r.add("causal", causal);
    if (!feature_text.empty()) r.add("features", feature_text);
    r.add("median_ms", t.median_ms);
    r.add("min_ms", t.min_ms);
    r.add("max_ms", t.max_ms);
}

void add_shader_clock(Row& r, Context& context) {
    if (const std::optional<double> mhz = testing::shader_clock_mhz(context)) r.add("sm_mhz", *mhz);
}

}  // namespace vkattn::tool
