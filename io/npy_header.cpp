#include "npy_header.hpp"

#include <bit>
#include <optional>

namespace vkattn::npy::detail {
namespace {

// Header bytes quoted in a message: printable ASCII as it is, every other byte (a control byte,
// a byte of a UTF-8 sequence) and the backslash escaped (\x07, \xc3, \\), so a message never
// carries a raw byte of the file; at most `limit` bytes, then "...".
std::string escaped(std::string_view bytes, std::size_t limit = 40) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c == '\\') out += "\\\\";
        else if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
        else out += std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
    if (bytes.size() > limit) out += "...";
    return out;
}

const char* const supported_types =
    "float32 <f4, float16 <f2, bool |b1, int32 <i4, int64 <i8, uint8 |u1, uint16 <u2; little- or big-endian "
    "(>f4 ...)";
struct Dtype {
    ElementType type = ElementType::f32;
    bool big_endian = false;
};

// A NumPy dtype string of one of the supported types: an optional byte order ('<' little, '>' big,
// '=' native, '|' not applicable: one-byte types only) then the kind and size.
std::optional<Dtype> parse_descr(std::string_view descr) {
    Dtype d;
    char order = '=';
    if (!descr.empty() && std::string_view("<>=|").find(descr.front()) != std::string_view::npos) {
        order = descr.front();
        descr.remove_prefix(1);
    }
    if (descr == "f4") d.type = ElementType::f32;
    else if (descr == "f2") d.type = ElementType::f16;
    else if (descr == "b1") d.type = ElementType::boolean;
    else if (descr == "i4") d.type = ElementType::i32;
    else if (descr == "i8") d.type = ElementType::i64;
    else if (descr == "u1") d.type = ElementType::u8;
    else if (descr == "u2") d.type = ElementType::u16;
    else return std::nullopt;
    if (order == '|' && element_size(d.type) != 1) return std::nullopt;
    d.big_endian = order == '>' || (order == '=' && std::endian::native == std::endian::big);
    return d;
}

// The header is a Python dict literal (format 1.0 and 2.0: latin-1, 3.0: UTF-8). Only the three keys
// NumPy writes are read; any other key is skipped. Bytes beyond ASCII are only ever inside strings,
// and a string that is not one of the supported dtypes is refused, so UTF-8 needs no decoding.
class HeaderParser {
public:
    HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

    Header parse() {
        Header h;
        bool descr = false, fortran = false, shape = false;
        skip_space();
        expect('{');
        for (;;) {
            skip_space();
            if (peek() == '}') break;
            const std::string key = string_literal("a key");
            skip_space();
            expect(':');
            skip_space();
            if (key == "descr") {
                read_descr(h);
                descr = true;
            } else if (key == "fortran_order") {
                h.fortran_order = read_bool();
                fortran = true;
            } else if (key == "shape") {
                h.shape = read_shape();
                shape = true;
            } else {
                skip_value();
            }
            skip_space();
            if (peek() == ',') ++at_;
            else if (peek() != '}') malformed("',' or '}'");
        }
        // Whatever follows the closing brace is padding (spaces and a newline) and is not read.
        if (!descr) fail(name_, "the .npy header has no 'descr' field.");
        if (!fortran) fail(name_, "the .npy header has no 'fortran_order' field.");
        if (!shape) fail(name_, "the .npy header has no 'shape' field.");
        return h;
    }

private:
    std::string_view text_;
    const std::string& name_;
    std::size_t at_ = 0;

    int peek() const { return at_ < text_.size() ? static_cast<unsigned char>(text_[at_]) : -1; }
    void skip_space() {
        while (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r') ++at_;
    }
    [[noreturn]] void malformed(const std::string& expected) const {
        if (at_ >= text_.size())
            fail(name_, "the .npy header is malformed: it ends where " + expected + " was expected.");
        fail(name_, "the .npy header is malformed at byte " + std::to_string(at_) + ": expected " + expected +
                        ", found '" + escaped(text_.substr(at_), 20) + "'.");
    }
    void expect(char c) {
        if (peek() != static_cast<unsigned char>(c)) malformed(std::string("'") + c + "'");
        ++at_;
    }

    // A quoted Python string; a backslash takes the next byte as it is.
    std::string string_literal(const std::string& what) {
        const int quote = peek();
        if (quote != '\'' && quote != '"') malformed(what + " in quotes");
        ++at_;
        std::string s;
        for (;;) {
            if (peek() < 0) malformed("the end of a string");
            const char c = text_[at_++];
            if (c == quote) return s;
            if (c == '\\' && peek() >= 0) s += text_[at_++];
            else s += c;
        }
    }

    // Any value up to the next ',' or '}' outside brackets and strings.
    std::string_view skip_value() {
        const std::size_t start = at_;
        int depth = 0;
        for (;;) {
            const int c = peek();
            if (c < 0) malformed("',' or '}'");
            if (c == '\'' || c == '"') {
                string_literal("a string");
                continue;
            }
            if (depth == 0 && (c == ',' || c == '}')) break;
            if (c == '(' || c == '[' || c == '{') ++depth;
            else if (c == ')' || c == ']' || c == '}') --depth;
            if (depth < 0) malformed("',' or '}'");
            ++at_;
        }
        return text_.substr(start, at_ - start);
    }

    void read_descr(Header& h) {
        if (peek() != '\'' && peek() != '"') {
            const std::string_view value = skip_value();
            fail(name_, "the dtype " + escaped(value) + " is a structured or sub-array dtype; supported: " +
                            supported_types + ".");
        }
        const std::string descr = string_literal("the descr");
        const auto type = parse_descr(descr);
        if (!type) fail(name_, "the dtype '" + escaped(descr) + "' is not supported (" + supported_types + ").");
        h.type = type->type;
        h.big_endian = type->big_endian;
    }

    bool read_bool() {
        for (const std::string_view word : {"True", "False"}) {
            if (text_.substr(at_, word.size()) == word) {
                at_ += word.size();
                return word == "True";
            }
        }
        malformed("True or False for 'fortran_order'");
    }

    // A tuple of non-negative integers: (), (3,), (2, 3), Python 2's (2L, 3L).
    std::vector<std::int64_t> read_shape() {
        expect('(');
        std::vector<std::int64_t> shape;
        for (;;) {
            skip_space();
            if (peek() == ')') break;
            std::size_t digits = 0;
            std::int64_t d = 0;
            while (peek() >= '0' && peek() <= '9') {
                if (++digits > 18) fail(name_, "a dimension of the .npy shape is too large.");
                d = d * 10 + (peek() - '0');
                ++at_;
            }
            if (digits == 0) malformed("a non-negative integer in the shape");
            if (peek() == 'L' || peek() == 'l') ++at_;
            shape.push_back(d);
            if (shape.size() > 8) fail(name_, "the array has more than 8 dimensions; at most 8 are supported.");
            skip_space();
            if (peek() == ',') ++at_;
            else if (peek() != ')') malformed("',' or ')' in the shape");
        }
        ++at_;
        return shape;
    }
};

}  // namespace

Header parse_header(std::string_view text, const std::string& name) { return HeaderParser(text, name).parse(); }

}  // namespace vkattn::npy::detail
