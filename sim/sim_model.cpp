#include "sim/sim_model.hpp"

#include <cmath>
#include <cstdint>

#include "suite/shards.hpp"

namespace bb::sim {

namespace {

// FNV-1a: the same draw in every process of the simulation.
uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = 14695981039346656037ull ^ seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// A standard normal draw from a hash (Box-Muller on its two halves).
double normal_from(uint64_t h) {
  double u1 = (static_cast<double>(h >> 32) + 1.0) / 4294967297.0;
  double u2 = static_cast<double>(h & 0xffffffffu) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

} // namespace

double call_ms(const std::string& op, const std::string& input, const std::string& device) {
  double op_factor = std::exp(1.0 * normal_from(fnv1a(op, 1)));
  double input_factor = std::exp(0.5 * normal_from(fnv1a(op + "\n" + input, 2)));
  return call_ms_from_bytes(input, device) * op_factor * input_factor;
}

double input_seconds(const std::string& op, const std::string& input, const runner_options& opts,
                     bool timed) {
  return expected_input_seconds(call_ms(op, input, opts.device), opts, timed);
}

double op_seconds(const op_inputs& op, const runner_options& opts) {
  bool paired = op.correctness == op.performance;
  double sum = 0.0;
  for (auto& text : op.correctness)
    sum += input_seconds(op.op_name, text, opts, paired);
  if (!paired)
    for (auto& text : op.performance)
      sum += input_seconds(op.op_name, text, opts, true);
  return sum;
}

} // namespace bb::sim
