#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "programs/serve.hpp"

using namespace bb;
using nlohmann::json;

namespace {

const char* honest = "import torch\ndef relu_kernel_impl(x):\n    return torch.clamp(x, min=0)\n";

json smoke_request(json kernels) {
  return {{"kind", "evaluate"}, {"id", "r1"}, {"suite", "smoke"}, {"kernels", std::move(kernels)}};
}

std::string refusal(const json& msg) {
  serve_request req;
  return read_request(msg, default_settings(), req);
}

} // namespace

TEST_CASE("a served request selects its operators and gives each the kernel named for it", "[programs]") {
  serve_request req;
  auto msg = smoke_request({{"relu", {{"kind", "py"}, {"source", honest}}}});
  msg["settings"] = {{"timing.rounds", 3}, {"timing.timer", "adaptive"}, {"checks.exploits", false}};
  auto why = read_request(msg, default_settings(), req);
  INFO(why);
  REQUIRE(why.empty());
  CHECK(req.id == "r1");
  REQUIRE(req.work.ops.size() == 1);
  CHECK(req.work.ops[0].op_name == "aten.relu.default");
  REQUIRE(req.kernels.size() == 1);
  CHECK(req.kernels[0].first == "aten.relu.default");
  CHECK(req.kernels[0].second.kind == kernel_kind::py);
  CHECK(req.kernels[0].second.entry == "relu_kernel_impl");
  CHECK(req.kernels[0].second.hash.size() == 64);
  CHECK(req.s.timing.rounds == 3);
  CHECK(req.s.timing.timer == "adaptive");
  CHECK_FALSE(req.s.timing.exploit_checks);

  serve_request aten;
  REQUIRE(read_request(smoke_request({{"aten.relu.default", {{"kind", "aten"}}}}), default_settings(), aten).empty());
  CHECK(aten.kernels[0].second.kind == kernel_kind::aten);
}

TEST_CASE("a served request is refused before it starts, naming the field at fault", "[programs]") {
  auto py = json{{"kind", "py"}, {"source", honest}};
  CHECK(refusal(json{{"kind", "evaluate"}, {"kernels", {{"relu", py}}}}).find("'id'") != std::string::npos);
  CHECK(refusal(smoke_request(json::object())).find("'kernels'") != std::string::npos);
  CHECK(refusal(smoke_request({{"nosuchop", py}})).find("nosuchop") != std::string::npos);
  CHECK(refusal(smoke_request({{"relu", {{"kind", "rust"}, {"source", honest}}}})).find("unknown kind 'rust'")
        != std::string::npos);
  CHECK(refusal(smoke_request({{"relu", {{"kind", "py"}}}})).find("no source") != std::string::npos);
  CHECK(refusal(smoke_request({{"relu", {{"kind", "py"}, {"source", "def f(x):\n    return x\n"}}}}))
          .find("relu_kernel_impl") != std::string::npos);
  // An entry point is a name: never a pattern for the search that finds it.
  CHECK(refusal(smoke_request({{"relu", {{"kind", "py"}, {"source", honest}, {"entry", "(a+)+$"}}}}))
          .find("is not a name") != std::string::npos);
  auto with = [&](json settings) {
    auto msg = smoke_request({{"relu", py}});
    msg["settings"] = std::move(settings);
    return refusal(msg);
  };
  CHECK(with({{"timing.nosuch", 1}}).find("unknown key 'timing.nosuch'") != std::string::npos);
  CHECK(with({{"evaluator.devices", 4}}).find("the server's own") != std::string::npos);
  CHECK(with({{"timing.rounds", 0}}).find("timing.rounds") != std::string::npos);
  auto topn = smoke_request({{"relu", py}});
  topn["topn"] = -1;
  CHECK(refusal(topn).find("'topn'") != std::string::npos);
  auto suite = smoke_request({{"relu", py}});
  suite["suite"] = "nosuite";
  CHECK(refusal(suite).find("nosuite") != std::string::npos);
}

TEST_CASE("default_entry and path_component", "[programs]") {
  CHECK(default_entry("aten.relu.default") == "relu_kernel_impl");
  CHECK(default_entry("aten.add.Tensor") == "add__Tensor_kernel_impl");
  CHECK(default_entry("aten.add_.Tensor") == "add___Tensor_kernel_impl");
  CHECK(path_component("alice#3") == "alice_3");
  CHECK(path_component("..") == "_..");
  CHECK(path_component("") == "_");
  CHECK(path_component("a/b") == "a_b");
}
