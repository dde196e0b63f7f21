#include <catch2/catch.hpp>

#include <ctime>

#include <nlohmann/json.hpp>

#include "generate/llm_client.hpp"

using namespace bb;
using json = nlohmann::json;

namespace {

llm_config openai_config() {
  llm_config c;
  c.provider = "openai";
  c.base_url = "http://127.0.0.1:9/v1/";
  c.model = "m";
  c.api_key = "sk-secret-key-123";
  c.dsl = kernel_dsl::pytorch;
  c.max_retries = 2;
  c.backoff_s = 1.0;
  c.max_backoff_s = 30.0;
  return c;
}

http_response ok_reply(const std::string& content) {
  http_response r;
  r.status = 200;
  r.body = json{{"choices", json::array({{{"message", {{"role", "assistant"}, {"content", content}}}}})}}
             .dump();
  return r;
}

author_request relu_request() {
  author_request req;
  req.op = make_op_brief("aten.relu.default", "aten::relu(Tensor self) -> Tensor", {});
  req.version = 1;
  return req;
}

} // namespace

TEST_CASE("chat completions and messages requests carry model, prompt and key", "[generate]") {
  auto c = openai_config();
  auto r = make_llm_request(c, "write relu");
  CHECK(r.url == "http://127.0.0.1:9/v1/chat/completions");
  CHECK(r.headers == std::vector<std::string>{"Authorization: Bearer sk-secret-key-123"});
  auto body = json::parse(r.body);
  CHECK(body["model"] == "m");
  CHECK(body["messages"][1]["role"] == "user");
  CHECK(body["messages"][1]["content"] == "write relu");
  c.api_key.clear();
  CHECK(make_llm_request(c, "x").headers.empty()); // local servers need no key
  c.provider = "anthropic";
  c.base_url = "https://api.anthropic.com/v1";
  c.api_key = "ak";
  auto a = make_llm_request(c, "write relu");
  CHECK(a.url == "https://api.anthropic.com/v1/messages");
  CHECK(a.headers == std::vector<std::string>{"x-api-key: ak", "anthropic-version: 2023-06-01"});
  auto ab = json::parse(a.body);
  CHECK(ab["messages"][0]["content"] == "write relu");
  CHECK(ab.contains("system"));
  CHECK(ab["max_tokens"] == 8192);
}

TEST_CASE("replies are read for both providers, and bad ones say why", "[generate]") {
  std::string err;
  auto text = reply_text("openai", ok_reply("hello").body, err);
  REQUIRE(text);
  CHECK(*text == "hello");
  auto anthropic = reply_text(
    "anthropic", R"({"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]})", err);
  REQUIRE(anthropic);
  CHECK(*anthropic == "ab");
  CHECK_FALSE(reply_text("openai", "<html>", err));
  CHECK_THAT(err, Catch::Contains("not JSON"));
  CHECK_FALSE(reply_text("openai", R"({"choices":[]})", err));
  CHECK_THAT(err, Catch::Contains("unexpected shape"));
}

TEST_CASE("retries wait as Retry-After says, else back off exponentially", "[generate]") {
  auto c = openai_config();
  http_response r;
  r.status = 429;
  CHECK(is_retryable(r));
  CHECK(retry_delay(c, 1, r) == Approx(1.0));
  CHECK(retry_delay(c, 3, r) == Approx(4.0));
  CHECK(retry_delay(c, 10, r) == Approx(30.0)); // capped
  r.headers["retry-after"] = "7";
  CHECK(retry_delay(c, 1, r) == Approx(7.0));
  auto later = std::time(nullptr) + 20;
  char date[64];
  std::strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", std::gmtime(&later));
  r.headers["retry-after"] = date;
  CHECK(retry_delay(c, 1, r) == Approx(20.0).margin(2.0));
  http_response server_error;
  server_error.status = 503;
  CHECK(is_retryable(server_error));
  http_response refused;
  refused.error = "Couldn't connect to server";
  CHECK(is_retryable(refused));
  http_response unauthorized;
  unauthorized.status = 401;
  CHECK_FALSE(is_retryable(unauthorized));
}

TEST_CASE("failures are described without the key", "[generate]") {
  auto c = openai_config();
  http_response r;
  r.status = 401;
  r.body = R"({"error":{"message":"Incorrect API key provided: sk-secret-key-123"}})";
  auto text = describe_failure(c, r);
  CHECK_THAT(text, Catch::Contains("HTTP 401: Incorrect API key provided: ***"));
  CHECK_THAT(text, !Catch::Contains("sk-secret"));
}

TEST_CASE("ask_llm retries 429 and 5xx, takes the code, and explains what it could not", "[generate]") {
  auto c = openai_config();
  std::vector<double> slept;
  auto sleep = [&](double s) { slept.push_back(s); };
  SECTION("429 with Retry-After, then a kernel") {
    int calls = 0;
    auto post = [&](const llm_request& req, double) {
      CHECK_THAT(req.body, Catch::Contains("relu__default_kernel_impl"));
      if (calls++ == 0) {
        http_response busy;
        busy.status = 429;
        busy.headers["retry-after"] = "3";
        return busy;
      }
      return ok_reply("```python\ndef relu__default_kernel_impl(x):\n    return x.clamp(min=0)\n```");
    };
    auto reply = ask_llm(c, relu_request(), post, sleep);
    CHECK(reply.tries == 2);
    CHECK(slept == std::vector<double>{3.0});
    CHECK(reply.why.empty());
    CHECK(reply.kind == kernel_kind::py);
    CHECK_THAT(reply.code, Catch::StartsWith("def relu__default_kernel_impl(x):"));
  }
  SECTION("a server that keeps failing: retries run out") {
    auto post = [&](const llm_request&, double) {
      http_response r;
      r.error = "Timeout was reached";
      r.timed_out = true;
      return r;
    };
    auto reply = ask_llm(c, relu_request(), post, sleep);
    CHECK(reply.tries == 3);
    CHECK(slept == std::vector<double>{1.0, 2.0});
    CHECK(reply.code.empty());
    CHECK(reply.transient);
    CHECK_THAT(reply.why, Catch::Contains("no answer within"));
    CHECK_THAT(reply.why, Catch::Contains("after 3 tries"));
  }
  SECTION("a 400 is not retried") {
    auto post = [&](const llm_request&, double) {
      http_response r;
      r.status = 400;
      r.body = R"({"error":{"message":"model not found"}})";
      return r;
    };
    auto reply = ask_llm(c, relu_request(), post, sleep);
    CHECK(reply.tries == 1);
    CHECK(slept.empty());
    CHECK_FALSE(reply.transient);
    CHECK_THAT(reply.why, Catch::Contains("HTTP 400: model not found"));
  }
  SECTION("a reply without code") {
    auto post = [&](const llm_request&, double) { return ok_reply("I cannot help with that."); };
    auto reply = ask_llm(c, relu_request(), post, sleep);
    CHECK(reply.code.empty());
    CHECK_THAT(reply.why, Catch::Contains("no fenced code block"));
  }
}

TEST_CASE("the llm configuration is checked before a campaign", "[generate]") {
  auto c = openai_config();
  CHECK(check(c).empty());
  c.model.clear();
  CHECK_THAT(check(c), Catch::Contains("--llm-model"));
  c = openai_config();
  c.base_url = "127.0.0.1:8000";
  CHECK_THAT(check(c), Catch::Contains("http://"));
  c = openai_config();
  c.provider = "anthropic";
  c.api_key.clear();
  CHECK_THAT(check(c), Catch::Contains("ANTHROPIC_API_KEY"));
  CHECK(default_base_url("anthropic") == "https://api.anthropic.com/v1");
  CHECK(std::string(api_key_variable("openai")) == "OPENAI_API_KEY");
}
