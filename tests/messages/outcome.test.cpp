#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "messages/records.hpp"
#include "results/journal.hpp"

using namespace bb;

TEST_CASE("every outcome has a name that reads back as itself", "[messages]") {
  for (int i = 0; i <= static_cast<int>(last_outcome); ++i) {
    auto x = static_cast<outcome>(i);
    std::string name = to_string(x);
    CHECK(name != "unknown");
    outcome back = outcome::ok;
    REQUIRE(from_string(name, back));
    CHECK(back == x);
  }
  outcome x;
  CHECK_FALSE(from_string("okay", x));
  CHECK(outcome_prefix("reference_error: the reference raised") == outcome::reference_error);
  CHECK_FALSE(outcome_prefix("incorrectly: no").has_value());
}

TEST_CASE("the rules of the outcomes", "[messages]") {
  CHECK(is_retryable(outcome::crashed));
  CHECK(is_retryable(outcome::timed_out));
  CHECK(is_retryable(outcome::infra_error));
  CHECK_FALSE(is_retryable(outcome::incorrect));
  CHECK_FALSE(is_retryable(outcome::reference_error));
  CHECK(is_infrastructure(outcome::infra_error));
  CHECK_FALSE(is_infrastructure(outcome::crashed));
  CHECK(is_skipped(outcome::reference_error));
  CHECK(is_skipped(outcome::unsupported));
  CHECK(is_skipped(outcome::needs_cuda));
  CHECK_FALSE(is_skipped(outcome::exception));
  CHECK(spoils_runner(outcome::cuda_error));
  CHECK_FALSE(spoils_runner(outcome::oom));
  CHECK(fails_job(outcome::crashed));
  CHECK(fails_job(outcome::no_kernel));
  CHECK_FALSE(fails_job(outcome::ok));
  CHECK_FALSE(fails_job(outcome::unsupported));
}

TEST_CASE("an outcome travels by name in msgpack and in the journal", "[messages]") {
  eval_result r;
  r.op_name = "aten.relu.default";
  r.outcome = outcome::timed_out;
  auto back = unpack<eval_result>(pack(r));
  CHECK(back.outcome == outcome::timed_out);
  // On the wire it is the name, not a number: look inside the map.
  auto handle = msgpack::unpack(pack(r).data(), pack(r).size());
  auto map = handle.get().as<std::map<std::string, msgpack::object>>();
  CHECK(map.at("outcome").as<std::string>() == "timed_out");
  auto line = journal_line(r);
  CHECK(line.find("\"outcome\":\"timed_out\"") != std::string::npos);
  CHECK(parse_journal_line(line).outcome == outcome::timed_out);
  auto bad = line;
  bad.replace(bad.find("timed_out"), 9, "timed_oot");
  CHECK_THROWS(parse_journal_line(bad));
}
