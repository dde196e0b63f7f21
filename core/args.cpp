#include "core/args.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

namespace bb::args {

namespace {

constexpr std::string_view dtype_names[] = {"bf16", "f16", "f32",  "f64", "c32", "c64", "c128",
                                            "i8",   "i16", "i32", "i64", "b8",  "u8"};
constexpr int64_t dtype_sizes[] = {2, 2, 4, 8, 4, 8, 16, 1, 2, 4, 8, 1, 1};

// A recursive-descent parser over the call string; the first error wins.
class parser {
public:
  explicit parser(std::string_view text) : text_(text) {
  }

  parse_result run() {
    call c;
    expect('(');
    parse_args(c.args);
    expect(',');
    parse_kwargs(c.kwargs);
    skip_ws();
    accept(',');
    expect(')');
    skip_ws();
    if (!failed_ && pos_ != text_.size())
      fail("end of input");
    if (failed_)
      return error_;
    return c;
  }

private:
  void skip_ws() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }

  char peek() {
    skip_ws();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  bool accept(char c) {
    if (failed_ || peek() != c)
      return false;
    ++pos_;
    return true;
  }

  void expect(char c) {
    if (failed_)
      return;
    if (!accept(c))
      fail(std::string("'") + c + "'");
  }

  void fail(std::string expected) {
    if (failed_)
      return;
    failed_ = true;
    skip_ws();
    error_.column = pos_ + 1;
    error_.expected = std::move(expected);
    error_.found = pos_ < text_.size() ? "'" + std::string(text_.substr(pos_, 12)) + "'"
                                       : "end of input";
  }

  // "(" [value {"," value}] [","] ")"
  void parse_args(std::vector<value>& out) {
    expect('(');
    parse_sequence(')', out);
  }

  // Values up to `close`, with an optional trailing comma.
  void parse_sequence(char close, std::vector<value>& out) {
    while (!failed_ && !accept(close)) {
      out.push_back(parse_value());
      if (failed_)
        return;
      if (accept(close))
        return;
      expect(',');
    }
  }

  void parse_kwargs(std::vector<std::pair<std::string, value>>& out) {
    expect('{');
    while (!failed_ && !accept('}')) {
      if (peek() != '\'' && peek() != '"') {
        fail("a keyword string");
        return;
      }
      auto key = parse_string();
      expect(':');
      auto v = parse_value();
      out.emplace_back(std::move(key), std::move(v));
      if (failed_ || accept('}'))
        return;
      expect(',');
    }
  }

  std::string parse_string() {
    char quote = text_[pos_++];
    auto start = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote)
      ++pos_;
    if (pos_ >= text_.size()) {
      pos_ = start - 1;
      fail("a closing quote");
      return {};
    }
    return std::string(text_.substr(start, pos_++ - start));
  }

  std::string_view parse_word() {
    skip_ws();
    auto start = pos_;
    while (pos_ < text_.size()
           && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'
               || text_[pos_] == '.'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }

  std::vector<int64_t> parse_int_list(char close) {
    std::vector<int64_t> out;
    while (!failed_ && !accept(close)) {
      auto v = parse_number();
      if (v.k != value::kind::integer) {
        fail("an integer");
        return out;
      }
      out.push_back(v.i);
      if (accept(close))
        return out;
      expect(',');
    }
    return out;
  }

  value parse_tensor() {
    value v;
    v.k = value::kind::tensor;
    expect('(');
    expect('[');
    v.t.sizes = parse_int_list(']');
    expect(',');
    if (failed_)
      return v;
    auto start = pos_;
    auto dtype = parse_word();
    if (!is_dtype(dtype)) {
      pos_ = start;
      fail("a dtype (bf16 f16 f32 f64 c32 c64 c128 i8 i16 i32 i64 b8 u8)");
      return v;
    }
    v.t.dtype = std::string(dtype);
    if (accept(',')) {
      if (peek() != ')') {
        auto save = pos_;
        if (parse_word() != "stride")
          pos_ = save;
        else
          expect('=');
        if (accept('('))
          v.t.strides = parse_int_list(')');
        else if (accept('['))
          v.t.strides = parse_int_list(']');
        else
          fail("strides in '(...)' or '[...]'");
        v.t.has_strides = true;
      }
    }
    expect(')');
    return v;
  }

  value parse_number() {
    value v;
    skip_ws();
    auto start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+'))
      ++pos_;
    bool is_float = false;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++pos_;
        if ((c == 'e' || c == 'E') && pos_ < text_.size()
            && (text_[pos_] == '-' || text_[pos_] == '+'))
          ++pos_;
      } else {
        break;
      }
    }
    std::string token(text_.substr(start, pos_ - start));
    if (token == "-" || token == "+") {
      auto word = parse_word();
      if (word == "inf") {
        v.k = value::kind::floating;
        v.f = token == "-" ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
        return v;
      }
      pos_ = start;
      fail("a number");
      return v;
    }
    if (token.empty()) {
      fail("a value");
      return v;
    }
    errno = 0;
    char* end = nullptr;
    if (is_float) {
      v.k = value::kind::floating;
      v.f = std::strtod(token.c_str(), &end);
    } else {
      v.k = value::kind::integer;
      v.i = std::strtoll(token.c_str(), &end, 10);
    }
    if (end != token.c_str() + token.size() || errno == ERANGE) {
      pos_ = start;
      fail(is_float ? "a floating-point number" : "a 64-bit integer");
    }
    return v;
  }

  value parse_value() {
    value v;
    char c = peek();
    if (failed_)
      return v;
    if (c == '[') {
      ++pos_;
      v.k = value::kind::list;
      parse_sequence(']', v.items);
      return v;
    }
    if (c == '\'' || c == '"') {
      v.k = value::kind::string;
      v.s = parse_string();
      return v;
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c)))
      return parse_number();
    auto start = pos_;
    auto word = parse_word();
    if (word == "T" && peek() == '(')
      return parse_tensor();
    if (word == "None")
      return v;
    if (word == "True" || word == "False") {
      v.k = value::kind::boolean;
      v.b = word == "True";
      return v;
    }
    if (word == "inf" || word == "nan") {
      v.k = value::kind::floating;
      v.f = word == "inf" ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
      return v;
    }
    if (is_dtype(word)) {
      v.k = value::kind::dtype;
      v.s = std::string(word);
      return v;
    }
    if (word.size() > 6 && word.substr(0, 6) == "torch.") {
      v.k = value::kind::torch_name;
      v.s = std::string(word.substr(6));
      return v;
    }
    pos_ = start;
    fail("a value (tensor, list, number, string, dtype, True, False, None)");
    return v;
  }

  std::string_view text_;
  size_t pos_ = 0;
  bool failed_ = false;
  parse_error error_;
};

int64_t value_bytes(const value& v) {
  if (v.k == value::kind::tensor) {
    int64_t n = 1;
    for (auto s : v.t.sizes)
      n *= s;
    return n * dtype_size(v.t.dtype);
  }
  int64_t total = 0;
  if (v.k == value::kind::list)
    for (auto& item : v.items)
      total += value_bytes(item);
  return total;
}

} // namespace

std::string to_string(const parse_error& e) {
  return "column " + std::to_string(e.column) + ": expected " + e.expected + ", found "
         + e.found;
}

parse_result parse_call(std::string_view text) {
  return parser{text}.run();
}

bool is_dtype(std::string_view name) {
  for (auto d : dtype_names)
    if (d == name)
      return true;
  return false;
}

int64_t dtype_size(std::string_view name) {
  for (size_t i = 0; i < std::size(dtype_names); ++i)
    if (dtype_names[i] == name)
      return dtype_sizes[i];
  return 0;
}

int64_t total_tensor_bytes(const call& c) {
  int64_t total = 0;
  for (auto& v : c.args)
    total += value_bytes(v);
  for (auto& kv : c.kwargs)
    total += value_bytes(kv.second);
  return total;
}

} // namespace bb::args
