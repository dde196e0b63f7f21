// Each record crosses every encoding it has (msgpack, CAF's serialization, the journal's
// JSON) with every field set away from its default: a field an encoding drops comes back as
// its default, and the record's msgpack bytes then differ.

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "artefacts/reference_cache.hpp"
#include "messages/types.hpp"
#include "results/journal.hpp"
#include "results/resume.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A value away from the default, for each kind of field.
void perturb(std::string& x) {
  x += "-changed";
}
void perturb(bool& x) {
  x = !x;
}
void perturb(double& x) {
  x += 0.5;
}
template <class T>
std::enable_if_t<std::is_integral_v<T>> perturb(T& x) {
  x = static_cast<T>(x + 3);
}
// A named enum: its next value (its default is its first).
template <class E>
std::enable_if_t<is_named_enum<E>> perturb(E& x) {
  x = static_cast<E>((static_cast<size_t>(x) + 1) % enum_names<E>::count);
}
void perturb(std::map<std::string, double>& x) {
  x["a phase"] += 1.5;
}
void perturb(std::map<std::string, std::string>& x) {
  x["a setting"] += "changed";
}
void perturb(artefact& x);
void perturb(input_failure& x);
void perturb(cached_reference& x);
void perturb(shard_span& x);
void perturb(correctness_record& x);
void perturb(performance_record& x);
void perturb(provenance& x);
template <class T>
void perturb(std::vector<T>& x) {
  x.emplace_back();
  perturb(x.back());
}

// Every field of a record, from its list.
#define BB_PERTURB_MEMBER(r, x, field) perturb(x.field);
#define BB_PERTURB(type, ...)                                                                     \
  void perturb(type& x) {                                                                         \
    MSGPACK_PP_SEQ_FOR_EACH(BB_PERTURB_MEMBER, x, MSGPACK_PP_VARIADIC_TO_SEQ(__VA_ARGS__))        \
  }
BB_PERTURB(artefact, BB_FIELDS_ARTEFACT)
BB_PERTURB(compile_outcome, BB_FIELDS_COMPILE_OUTCOME)
BB_PERTURB(input_failure, BB_FIELDS_INPUT_FAILURE)
BB_PERTURB(cached_reference, BB_FIELDS_CACHED_REFERENCE)
BB_PERTURB(shard_span, BB_FIELDS_SHARD_SPAN)
BB_PERTURB(eval_job, BB_FIELDS_EVAL_JOB)
BB_PERTURB(correctness_record, BB_FIELDS_CORRECTNESS_RECORD)
BB_PERTURB(performance_record, BB_FIELDS_PERFORMANCE_RECORD)
BB_PERTURB(provenance, BB_FIELDS_PROVENANCE)
BB_PERTURB(eval_result, BB_FIELDS_EVAL_RESULT)

template <class T>
T changed() {
  T x;
  perturb(x);
  return x;
}

template <class T>
T through_caf(const T& x) {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto copy = x;
  REQUIRE_FALSE(sink(copy));
  T out;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(source(out));
  return out;
}

} // namespace

TEMPLATE_TEST_CASE("a record crosses msgpack and CAF with every field it lists", "[messages]",
                   artefact, compile_outcome, input_failure, cached_reference, shard_span, eval_job,
                   correctness_record, performance_record, provenance, eval_result) {
  auto x = changed<TestType>();
  // Every field was changed: the bytes are not the default record's.
  REQUIRE(pack(x) != pack(TestType{}));
  CHECK(pack(unpack<TestType>(pack(x))) == pack(x));
  CHECK(pack(through_caf(x)) == pack(x));
}

TEST_CASE("a result crosses the journal's JSON with every field it lists", "[messages]") {
  auto x = changed<eval_result>();
  // A shard that is part of its operator (a whole operator's span is left out of the line).
  x.shard.correctness_total += 5;
  auto back = parse_journal_line(journal_line(x, "job_finished"));
  CHECK(pack(back) == pack(x));
  // The same for a result with its optional fields at their defaults (left out of the line).
  eval_result plain;
  plain.op_name = "aten.relu.default";
  CHECK(pack(parse_journal_line(journal_line(plain, "job_finished"))) == pack(plain));
}

TEST_CASE("sweep.json and a reference-time cache file keep every field they list", "[messages]") {
  sweep_record r;
  r.format = 7;
  r.args = {"--suite", "torchbench"};
  r.cwd = "/somewhere";
  r.conditions = {{"timing.timer", "adaptive"}};
  test::temp_dir dir;
  REQUIRE(write_sweep_record(dir.path, r).empty());
  sweep_record back;
  REQUIRE(read_sweep_record(dir.path, back).empty());
  CHECK(back.format == r.format);
  CHECK(back.args == r.args);
  CHECK(back.cwd == r.cwd);
  CHECK(back.conditions == r.conditions);

  reference_entry e{"{\"op\":\"aten.relu.default\"}", 0.25, {0.24, 0.26}};
  auto f = parse_reference_entry(reference_entry_json(e));
  CHECK(f.key == e.key);
  CHECK(f.mean_ms == e.mean_ms);
  CHECK(f.round_means_ms == e.round_means_ms);
}
