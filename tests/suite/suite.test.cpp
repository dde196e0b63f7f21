#include <catch2/catch.hpp>

#include "suite/ops.hpp"
#include "suite/suite.hpp"

using namespace bb;

TEST_CASE("the smoke suite is BackendBench's", "[suite]") {
  auto s = smoke_suite();
  REQUIRE(s.ops.size() == 1);
  CHECK(s.ops[0].op_name == "aten.relu.default");
  CHECK(s.ops[0].correctness == std::vector<std::string>{"((T([2], f32),), {})"});
  CHECK(s.ops[0].performance == std::vector<std::string>{"((T([1024, 1024], f32),), {})"});
}

TEST_CASE("the ops filter matches full names, names without aten. and base names, never substrings",
          "[suite]") {
  CHECK(ops::matches("aten.relu.default", "aten.relu.default"));
  CHECK(ops::matches("relu.default", "aten.relu.default"));
  CHECK(ops::matches("relu", "aten.relu.default"));
  CHECK(ops::matches("relu", "aten.relu.out"));
  CHECK_FALSE(ops::matches("relu.default", "aten.leaky_relu.default"));
  CHECK_FALSE(ops::matches("relu", "aten.leaky_relu.default"));
  CHECK_FALSE(ops::matches("relu_", "aten.relu.default"));
  CHECK(ops::matches("relu_", "aten.relu_.default"));
}

TEST_CASE("select_ops keeps matches and warns about unknown tokens with close names", "[suite]") {
  suite s{"t", {{"aten.relu.default", {}, {}}, {"aten.leaky_relu.default", {}, {}},
                {"aten.add.Tensor", {}, {}}}};
  auto sel = select_ops(s, ops::split_tokens("relu.default, add"));
  REQUIRE(sel.selected.ops.size() == 2);
  CHECK(sel.selected.ops[0].op_name == "aten.relu.default");
  CHECK(sel.selected.ops[1].op_name == "aten.add.Tensor");
  CHECK(sel.warnings.empty());
  auto miss = select_ops(s, {"relu.defualt"});
  CHECK(miss.selected.ops.empty());
  REQUIRE(miss.warnings.size() == 1);
  CHECK(miss.warnings[0].find("closest: aten.relu.default") != std::string::npos);
  CHECK(select_ops(s, {}).selected.ops.size() == 3);
}

TEST_CASE("op names map to dispatcher schema names", "[suite]") {
  auto a = ops::to_schema_name("aten.relu.default");
  CHECK(a.name == "aten::relu");
  CHECK(a.overload == "");
  auto b = ops::to_schema_name("aten.add.Tensor");
  CHECK(b.name == "aten::add");
  CHECK(b.overload == "Tensor");
  CHECK(ops::split_tokens(" a, ,b ") == std::vector<std::string>{"a", "b"});
}
