#include "output_table.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace vkattn::tool {

std::string format_value(const Value& v) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
    if (const auto* b = std::get_if<bool>(&v)) return *b ? "yes" : "no";
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
    const double d = std::get<double>(v);
    std::ostringstream out;
    if (d != 0 && (std::fabs(d) < 1e-3 || std::fabs(d) >= 1e6)) out << std::scientific << std::setprecision(2) << d;
    else out << std::fixed << std::setprecision(std::fabs(d) < 10 ? 3 : 1) << d;
    return out.str();
}

void Printer::print(const Row& row) {
    switch (format_) {
        case Format::table:
            rows_.push_back(row);
            break;
        case Format::csv: {
            if (!csv_header_done_) {
                for (std::size_t i = 0; i < row.fields.size(); ++i) out_ << (i ? "," : "") << row.fields[i].first;
                out_ << '\n';
                csv_header_done_ = true;
            }
            for (std::size_t i = 0; i < row.fields.size(); ++i) {
                const auto& v = row.fields[i].second;
                out_ << (i ? "," : "");
                if (const auto* d = std::get_if<double>(&v)) out_ << std::setprecision(9) << *d;
                else if (const auto* b = std::get_if<bool>(&v)) out_ << (*b ? "true" : "false");
                else out_ << format_value(v);
            }
            out_ << '\n' << std::flush;
            break;
        }
        case Format::json: {
            nlohmann::ordered_json j;
            for (const auto& [name, v] : row.fields) std::visit([&, n = name](const auto& x) { j[n] = x; }, v);
            out_ << j.dump() << '\n' << std::flush;
            break;
        }
    }
}

void Printer::finish() {
    if (format_ != Format::table || rows_.empty()) return;
    // Columns are the union of all rows' fields, in order of first appearance.
    std::vector<std::string> columns;
    for (const auto& r : rows_)
        for (const auto& f : r.fields)
            if (std::find(columns.begin(), columns.end(), f.first) == columns.end()) columns.push_back(f.first);
    std::vector<std::vector<std::string>> cells;
    std::vector<std::size_t> width;
    for (const auto& c : columns) width.push_back(c.size());
    for (const auto& r : rows_) {
        std::vector<std::string> line;
        for (std::size_t c = 0; c < columns.size(); ++c) {
            std::string text;
            for (const auto& f : r.fields)
                if (f.first == columns[c]) text = format_value(f.second);
            width[c] = std::max(width[c], text.size());
            line.push_back(text);
        }
        cells.push_back(line);
    }
    for (std::size_t c = 0; c < columns.size(); ++c) out_ << (c ? "  " : "") << std::setw(static_cast<int>(width[c])) << columns[c];
    out_ << '\n';
    for (const auto& line : cells) {
        for (std::size_t c = 0; c < line.size(); ++c) out_ << (c ? "  " : "") << std::setw(static_cast<int>(width[c])) << line[c];
        out_ << '\n';
    }
    rows_.clear();
}

}  // namespace vkattn::tool
