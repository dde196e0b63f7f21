#pragma once

// A test that cannot run here (no GPU, no sandbox, no Slurm) says so and is counted as skipped,
// never as passed: BB_SKIP records why and returns from the test case, and the test program
// (tests/main.cpp) then exits with skip_exit_code when nothing failed, which ctest reports as
// "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace bb::test {

inline constexpr int skip_exit_code = 77;

/// Why the test cases of this run that were skipped were: empty when none was.
inline std::string& skip_reasons() {
  static std::string reasons;
  return reasons;
}

/// Says so on stdout and, where $BB_TEST_SKIP_LOG names a file, in a line of it (scripts/test.sh
/// lists them after ctest, which does not show a skipped test's output).
inline void skip(const std::string& test, const std::string& why) {
  std::cout << "SKIPPED: " << test << ": " << why << std::endl;
  skip_reasons() += test + ": " + why + "\n";
  if (const char* log = std::getenv("BB_TEST_SKIP_LOG"); log && *log)
    std::ofstream(log, std::ios::app) << test << ": " << why << "\n";
}

} // namespace bb::test

/// Skips the running test case with a reason (streamed, as WARN takes it) and returns from it.
#define BB_SKIP(why)                                                                               \
  do {                                                                                             \
    std::ostringstream bb_skip_why;                                                                \
    bb_skip_why << why;                                                                            \
    bb::test::skip(Catch::getResultCapture().getCurrentTestName(), bb_skip_why.str());            \
    return;                                                                                        \
  } while (0)
