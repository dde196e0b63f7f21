#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "skip.hpp"

// Catch 2's console reporter prints a failed test's name wrapped to the console's width, with
// the lines after the first indented past the name's first ": ". Where that indent is wider
// than the console, the wrapping never ends: the failure prints "-" lines without end and ctest,
// keeping all of it, runs out of memory. Such a name is refused before any test runs.
static bool header_wraps(const std::string& name) {
  auto colon = name.find(": ");
  auto indent = colon == std::string::npos ? 0 : colon + 2;
  auto column = Catch::clara::TextFlow::Column(name).width(CATCH_CONFIG_CONSOLE_WIDTH - 1).indent(indent).initialIndent(0);
  size_t lines = 0;
  for (auto it = column.begin(); it != column.end(); ++it)
    if (++lines > name.size())
      return false;
  return true;
}

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (int status = session.applyCommandLine(argc, argv); status != 0)
    return status;
  // A run that selects no test fails: ctest names each test, and a name that matches nothing
  // would otherwise pass without running.
  session.configData().warnings =
    static_cast<Catch::WarnAbout::What>(session.configData().warnings | Catch::WarnAbout::NoTests);
  int bad = 0;
  for (auto& test : Catch::getAllTestCasesSorted(session.config())) {
    if (!header_wraps(test.name)) {
      std::cerr << test.lineInfo << ": the test name \"" << test.name
                << "\" has its first \": \" too far right for Catch's console reporter, which "
                   "would print its failure without end; move or drop the \": \"\n";
      ++bad;
    }
    // CMake splits a list at ';': ctest would run each half of such a name, and neither matches.
    if (test.name.find(';') != std::string::npos) {
      std::cerr << test.lineInfo << ": the test name \"" << test.name
                << "\" has a ';', which splits it in two for ctest, neither half running the test\n";
      ++bad;
    }
  }
  if (bad)
    return 2;
  int failed = session.run();
  // Skipped and nothing failed: ctest reports the test as skipped (SKIP_RETURN_CODE).
  if (failed == 0 && !bb::test::skip_reasons().empty())
    return bb::test::skip_exit_code;
  return failed;
}
