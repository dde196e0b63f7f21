// bbcluster: the coordinator process of a sweep. Parses the command line (BackendBench's
// flags plus ours) and hands the sweep to nodes/sweep.hpp, which starts its parts, runs it
// and prints BackendBench's three scores. `bbcluster keygen DIR [--force]` makes a cluster's
// CURVE keys (replacing keys already in DIR only with --force); `bbcluster serve` keeps the
// cluster up for clients (programs/serve.hpp); `bbcluster settings
// toml|markdown` prints every setting with its default (configs/default.toml) or as a table.

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cluster/config.hpp"
#include "cluster/curve_keys.hpp"
#include "programs/cli.hpp"
#include "programs/serve.hpp"
#include "programs/sweep.hpp"

namespace {

int keygen(int argc, char** argv) {
  std::vector<std::string> words(argv + 2, argv + argc);
  bool force = std::find(words.begin(), words.end(), "--force") != words.end();
  words.erase(std::remove(words.begin(), words.end(), "--force"), words.end());
  if (words.size() != 1 || words[0].rfind("-", 0) == 0) {
    std::cerr << "bbcluster: usage: bbcluster keygen DIR [--force]\n";
    return 2;
  }
  auto& dir = words[0];
  // New keys lock out every node and coordinator that has the old ones: only on purpose.
  if (auto existing = bb::existing_curve_key_files(dir); !existing.empty() && !force) {
    std::cerr << "bbcluster: " << existing.front() << " exists: keygen would replace the keys in "
              << dir << ", which every node and coordinator using them would then refuse; give "
              << "--force to replace them\n";
    return 2;
  }
  if (auto err = bb::generate_curve_keys(dir); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 1;
  }
  std::cout << "keys in " << dir << ": coordinator.key stays with bbcluster (nodes.keys = \"" << dir
            << "\"); copy the folder to every node and start bbnode --keys " << dir << "\n";
  return 0;
}

// `bbcluster settings toml|markdown`: configs/default.toml, or the README's table of
// settings, as messages/settings.def makes them.
int print_settings(int argc, char** argv) {
  std::string what = argc == 3 ? argv[2] : "";
  if (what == "toml")
    std::cout << bb::settings_toml();
  else if (what == "markdown")
    std::cout << bb::settings_markdown();
  else {
    std::cerr << "bbcluster: usage: bbcluster settings toml|markdown\n";
    return 2;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "keygen")
    return keygen(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "settings")
    return print_settings(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "serve") {
    spdlog::set_default_logger(spdlog::stderr_color_mt("bbcluster"));
    return bb::serve_main(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::string(argv[1]) == "submit") {
    spdlog::set_default_logger(spdlog::stderr_color_mt("bbcluster"));
    return bb::submit_main(std::vector<std::string>(argv + 2, argv + argc));
  }
  CLI::App app{"bbcluster: evaluates generated PyTorch operator kernels, BackendBench-compatible"};
  bb::program::flags f;
  bb::program::add_flags(app, f);
  // --resume RUN_DIR runs the recorded sweep again, from where it is started.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (auto err = bb::program::expand_resume(args); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 2;
  }
  std::vector<char*> words{argv[0]};
  for (auto& a : args)
    words.push_back(a.data());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbcluster: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbcluster"));

  bb::sweep_setup setup;
  if (int rc = bb::prepare_sweep(app, f, args, words, setup); rc >= 0)
    return rc;
  bb::sweep sweep(std::move(setup));
  if (auto err = sweep.start(); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 2;
  }
  return sweep.run();
}
