// Results as rows of named fields, printed as an aligned table, CSV, or JSON lines.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

namespace vkattn::tool {

enum class Format { table, csv, json };

using Value = std::variant<std::int64_t, double, std::string, bool>;
struct Row {
    std::vector<std::pair<std::string, Value>> fields;
    void add(std::string name, Value v) { fields.emplace_back(std::move(name), std::move(v)); }
};

// Table: collects rows and prints them aligned at the end; CSV and JSON print as rows arrive.
class Printer {
public:
    Printer(std::ostream& out, Format format) : out_(out), format_(format) {}
    void print(const Row& row);
    void finish();

private:
    std::ostream& out_;
    Format format_;
    std::vector<Row> rows_;
    bool csv_header_done_ = false;
};

std::string format_value(const Value& v);

}  // namespace vkattn::tool
