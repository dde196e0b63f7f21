#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "suite/args.hpp"

using namespace bb::args;

namespace {

call parse_ok(const std::string& text) {
  auto r = parse_call(text);
  if (auto* e = std::get_if<parse_error>(&r))
    FAIL("did not parse: " << text << ": " << to_string(*e));
  return std::get<call>(r);
}

parse_error parse_bad(const std::string& text) {
  auto r = parse_call(text);
  REQUIRE(std::holds_alternative<parse_error>(r));
  return std::get<parse_error>(r);
}

} // namespace

TEST_CASE("a single tensor argument with a trailing comma", "[suite]") {
  auto c = parse_ok("((T([2], f32),), {})");
  REQUIRE(c.args.size() == 1);
  CHECK(c.args[0].k == value::kind::tensor);
  CHECK(c.args[0].t.sizes == std::vector<int64_t>{2});
  CHECK(c.args[0].t.dtype == "f32");
  CHECK_FALSE(c.args[0].t.has_strides);
  CHECK(c.kwargs.empty());
}

TEST_CASE("strides: positional tuple, one-element tuple, stride= and list", "[suite]") {
  auto a = parse_ok("((T([5, 3], f16, [1, 5]),), {})");
  CHECK(a.args[0].t.strides == std::vector<int64_t>{1, 5});
  auto b = parse_ok("((T([4], f32, (2,)),), {})");
  CHECK(b.args[0].t.strides == std::vector<int64_t>{2});
  auto c = parse_ok("((T([2, 2], bf16, stride=(0, 1)),), {})");
  CHECK(c.args[0].t.has_strides);
  CHECK(c.args[0].t.strides == std::vector<int64_t>{0, 1});
}

TEST_CASE("numbers: -inf, INT64_MAX, scientific floats, negative ints", "[suite]") {
  auto c = parse_ok("((-inf, 9223372036854775807, 1e-05, -3, 2.5E+3, inf, nan), {})");
  REQUIRE(c.args.size() == 7);
  CHECK(c.args[0].f == -std::numeric_limits<double>::infinity());
  CHECK(c.args[1].k == value::kind::integer);
  CHECK(c.args[1].i == std::numeric_limits<int64_t>::max());
  CHECK(c.args[2].f == Approx(1e-05));
  CHECK(c.args[3].i == -3);
  CHECK(c.args[4].f == 2500.0);
  CHECK(std::isinf(c.args[5].f));
  CHECK(std::isnan(c.args[6].f));
}

TEST_CASE("kwargs with dtypes, devices, booleans, None and torch names", "[suite]") {
  auto c = parse_ok("((T([3], i64),), {'dtype': torch.float16, 'layout': torch.strided, "
                    "'device': \"torch.device('cpu')\", 'pin_memory': False, 'x': None, 'd': f32})");
  REQUIRE(c.kwargs.size() == 6);
  CHECK(c.kwargs[0].first == "dtype");
  CHECK(c.kwargs[0].second.k == value::kind::torch_name);
  CHECK(c.kwargs[0].second.s == "float16");
  CHECK(c.kwargs[2].second.k == value::kind::string);
  CHECK(c.kwargs[2].second.s == "torch.device('cpu')");
  CHECK(c.kwargs[3].second.k == value::kind::boolean);
  CHECK_FALSE(c.kwargs[3].second.b);
  CHECK(c.kwargs[4].second.k == value::kind::none);
  CHECK(c.kwargs[5].second.k == value::kind::dtype);
}

TEST_CASE("lists: empty, nested, with None and tensors", "[suite]") {
  auto c = parse_ok("(([], [None, T([2], f32)], [[1, 2], [3]], T([0, 4], b8)), {})");
  REQUIRE(c.args.size() == 4);
  CHECK(c.args[0].k == value::kind::list);
  CHECK(c.args[0].items.empty());
  CHECK(c.args[1].items[0].k == value::kind::none);
  CHECK(c.args[1].items[1].k == value::kind::tensor);
  CHECK(c.args[2].items[1].items[0].i == 3);
  CHECK(c.args[3].t.sizes == std::vector<int64_t>{0, 4});
}

TEST_CASE("0-d tensors and whitespace anywhere", "[suite]") {
  auto c = parse_ok(" ( ( T( [ ] , f64 ) , ) , { } ) ");
  CHECK(c.args[0].t.sizes.empty());
  CHECK(c.args[0].t.dtype == "f64");
}

TEST_CASE("total tensor bytes count nested lists", "[suite]") {
  auto c = parse_ok("(([T([2, 3], f32), T([4], f16)], T([1], c128)), {})");
  CHECK(total_tensor_bytes(c) == 2 * 3 * 4 + 4 * 2 + 16);
}

TEST_CASE("malformed lines name the column and what was expected", "[suite]") {
  auto e = parse_bad("((T([2], f33),), {})");
  CHECK(e.column == 10);
  CHECK(e.expected.find("a dtype") == 0);
  CHECK(to_string(e).find("column 10: expected a dtype") == 0);
  auto f = parse_bad("((T([2], f32),)");
  CHECK(f.expected == "','");
  auto g = parse_bad("((1,), {3: 4})");
  CHECK(g.expected == "a keyword string");
  auto h = parse_bad("((99999999999999999999,), {})");
  CHECK(h.expected == "a 64-bit integer");
  auto i = parse_bad("((1,), {}) trailing");
  CHECK(i.expected == "end of input");
}
