#include "suite/args.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
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

const char* torch_dtype_name(std::string_view short_name) {
  static const std::pair<const char*, const char*> table[] = {
    {"bf16", "torch.bfloat16"}, {"f16", "torch.float16"},     {"f32", "torch.float32"},
    {"f64", "torch.float64"},   {"c32", "torch.complex32"},   {"c64", "torch.complex64"},
    {"c128", "torch.complex128"}, {"i8", "torch.int8"},       {"i16", "torch.int16"},
    {"i32", "torch.int32"},     {"i64", "torch.int64"},       {"b8", "torch.bool"},
    {"u8", "torch.uint8"}};
  for (auto& [s, t] : table)
    if (short_name == s)
      return t;
  return "torch.unknown";
}

std::string python_string_repr(const std::string& s) {
  char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\')
      out += '\\';
    out += c;
  }
  return out + quote;
}

std::string int_list(const std::vector<int64_t>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? ", " : "") + std::to_string(xs[i]);
  return out + "]";
}

std::string serialize_value(const value& v) {
  switch (v.k) {
    case value::kind::none: return "None";
    case value::kind::boolean: return v.b ? "True" : "False";
    case value::kind::integer: return std::to_string(v.i);
    case value::kind::floating: return python_repr(v.f);
    case value::kind::dtype: return torch_dtype_name(v.s);
    case value::kind::torch_name: return "torch." + v.s;
    case value::kind::string: {
      // BackendBench evaluates "torch.device('cpu')" into a device object.
      auto open = v.s.find("torch.device(");
      if (open == 0 && v.s.back() == ')') {
        auto inner = v.s.substr(13, v.s.size() - 14);
        std::string type;
        for (char c : inner)
          if (c != '\'' && c != '"' && c != ' ')
            type += c;
        auto colon = type.find(':');
        if (colon != std::string::npos)
          return "device(type='" + type.substr(0, colon) + "', index=" + type.substr(colon + 1) + ")";
        return "device(type='" + type + "')";
      }
      return python_string_repr(v.s);
    }
    case value::kind::tensor: {
      auto out = "T(" + int_list(v.t.sizes) + ", " + v.t.dtype;
      if (v.t.has_strides && !is_contiguous(v.t.sizes, v.t.strides))
        out += ", " + int_list(v.t.strides);
      return out + ")";
    }
    case value::kind::list: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i)
        out += (i ? ", " : "") + serialize_value(v.items[i]);
      return out + "]";
    }
  }
  return "None";
}

} // namespace

std::string python_repr(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  // buf is "[-]d.ddde[+-]XX": split into sign, digits and decimal exponent.
  std::string text = buf;
  bool negative = text[0] == '-';
  if (negative)
    text = text.substr(1);
  auto e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (text[i] != '.')
      digits += text[i];
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(static_cast<size_t>(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent + 1)) + "."
             + digits.substr(static_cast<size_t>(exponent + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1)
    out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

std::string serialize_text(const std::string& text) {
  auto parsed = parse_call(text);
  if (auto* c = std::get_if<call>(&parsed))
    return serialize(*c);
  return text;
}

bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  for (auto s : sizes)
    if (s == 0)
      return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1)
      continue;
    if (strides[i] != expected)
      return false;
    expected *= sizes[i];
  }
  return true;
}

std::string serialize(const call& c) {
  std::string args;
  for (size_t i = 0; i < c.args.size(); ++i)
    args += (i ? ", " : "") + serialize_value(c.args[i]);
  args = c.args.empty() ? "()" : "(" + args + ",)";
  std::string kwargs;
  for (size_t i = 0; i < c.kwargs.size(); ++i)
    kwargs += (i ? ", " : "") + ("'" + c.kwargs[i].first + "': ") + serialize_value(c.kwargs[i].second);
  return "(" + args + ", {" + kwargs + "})";
}

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
