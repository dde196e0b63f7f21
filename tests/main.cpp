#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>
#include <string>

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

// Test names that ctest or Catch cannot handle, each told on stderr: their count.
static int refused_names(Catch::Session& session) {
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
    // A '[' or ']' in a name: CMake does not split a list inside brackets, so every later
    // test of the file joins this one's name and none of them runs.
    if (test.name.find_first_of("[]") != std::string::npos) {
      std::cerr << test.lineInfo << ": the test name \"" << test.name
                << "\" has a '[' or ']', which makes ctest join it with the names after it\n";
      ++bad;
    }
    // ctest passes the name to the test program, which reads one starting with '-' as an
    // option ("Unrecognised token: --set") and runs nothing.
    if (!test.name.empty() && test.name[0] == '-') {
      std::cerr << test.lineInfo << ": the test name \"" << test.name
                << "\" starts with '-', which the test program would read as an option\n";
      ++bad;
    }
  }
  return bad;
}

int main(int argc, char* argv[]) {
  Catch::Session session;
  // --check-test-names, run by the build after linking: a refused name fails the build (ctest's
  // discovery would only print the refusal and go on with the tests it could list).
  if (argc == 2 && std::string(argv[1]) == "--check-test-names")
    return refused_names(session) == 0 ? 0 : 2;
  if (int status = session.applyCommandLine(argc, argv); status != 0)
    return status;
  // A run that selects no test fails: ctest names each test, and a name that matches nothing
  // would otherwise pass without running.
  session.configData().warnings =
    static_cast<Catch::WarnAbout::What>(session.configData().warnings | Catch::WarnAbout::NoTests);
  if (refused_names(session) > 0)
    return 2;
  int failed = session.run();
  // Skipped and nothing failed: ctest reports the test as skipped (SKIP_RETURN_CODE).
  if (failed == 0 && !bb::test::skip_reasons().empty())
    return bb::test::skip_exit_code;
  return failed;
}
