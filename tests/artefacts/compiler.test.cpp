#include <catch2/catch.hpp>

#include "skip.hpp"

#include <filesystem>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "artefacts/compiler.hpp"
#include "artefacts/kernel_dir.hpp"
#include "support.hpp"

using namespace bb;

namespace {

artefact example(const std::string& folder, const std::string& file) {
  artefact a;
  auto err = read_kernel_file(BB_SOURCE_DIR "/examples/kernels/" + folder + "/" + file, folder, a);
  REQUIRE(err.empty());
  return a;
}

compile_settings settings_in(const bb::test::temp_dir& dir) {
  compile_settings s;
  s.tools = default_toolchain();
  s.cache_dir = dir / "cache";
  s.log_dir = dir / "logs";
  s.timeout_s = 300;
  return s;
}

} // namespace

TEST_CASE("cache keys change with the source, the flags and the compiler", "[artefacts]") {
  auto a = example("relu__default", "relu__default_implementation_v1.cpp");
  auto tc = default_toolchain();
  auto key = cache_key(a, tc, "g++ 12");
  CHECK(key.size() == 64);
  CHECK(cache_key(a, tc, "g++ 12") == key);
  CHECK(cache_key(a, tc, "g++ 13") != key);
  auto b = a;
  b.source += "\n";
  CHECK(cache_key(b, tc, "g++ 12") != key);
  auto tc2 = tc;
  tc2.flags.push_back("-O3");
  CHECK(cache_key(a, tc2, "g++ 12") != key);
}

TEST_CASE("the first compiler errors are kept for the report", "[artefacts]") {
  std::string log = "g++ -c x.cpp\nIn file included from x.cpp:1:\nx.cpp:3:5: error: 'foo' was not declared\n"
                    "    3 |     foo();\nx.cpp:4:1: error: expected ';'\n";
  auto trimmed = trim_compiler_log(log, 2);
  CHECK(trimmed == "x.cpp:3:5: error: 'foo' was not declared\n    3 |     foo();\n");
}

TEST_CASE("a kernel compiles once: the second build is a cache hit", "[artefacts][compile]") {
  bb::test::temp_dir dir;
  auto s = settings_in(dir);
  auto a = example("relu__default", "relu__default_implementation_v1.cpp");
  auto first = build_kernel(a, s);
  INFO(first.message);
  REQUIRE(first.status == outcome::ok);
  CHECK_FALSE(first.cached);
  CHECK(std::filesystem::exists(first.object_path));
  // The precompiled header was made for this toolchain.
  CHECK(!ensure_pch(s).empty());
  auto second = build_kernel(a, s);
  CHECK(second.status == outcome::ok);
  CHECK(second.cached);
  CHECK(second.object_path == first.object_path);
  CHECK(second.seconds < 0.1);
  // Nothing is left half-written.
  CHECK(std::filesystem::is_empty(dir / "cache/tmp"));
}

TEST_CASE("a compile error is compile_failed with the message and the full log", "[artefacts][compile]") {
  bb::test::temp_dir dir;
  auto s = settings_in(dir);
  artefact a;
  a.kind = kernel_kind::cpp;
  a.entry = "broken__default_kernel_impl";
  a.source = "#include <bbcluster/kernel.h>\nat::Tensor broken__default_kernel_impl(const at::Tensor& x) {\n"
             "  return undefined_function(x);\n}\nBBCLUSTER_EXPORT_KERNEL(broken__default_kernel_impl)\n";
  auto out = build_kernel(a, s);
  CHECK(out.status == outcome::compile_failed);
  CHECK(out.message.find("undefined_function") != std::string::npos);
  CHECK(out.message.find("error") != std::string::npos);
  CHECK(bb::test::read_file(out.log_path).find("undefined_function") != std::string::npos);
}

TEST_CASE("a CUDA kernel on a node without a GPU is needs_cuda, not a compile", "[artefacts]") {
  bb::test::temp_dir dir;
  auto s = settings_in(dir);
  s.has_cuda = false;
  auto out = build_kernel(example("mul__Tensor", "mul__Tensor_implementation_v1.cu"), s);
  CHECK(out.status == outcome::needs_cuda);
  CHECK(out.message.find("GPU") != std::string::npos);
}

TEST_CASE("two processes compiling the same source into one cache both succeed", "[artefacts][compile]") {
  bb::test::temp_dir dir;
  auto s = settings_in(dir);
  s.tools.use_pch = false;
  auto a = example("relu__default", "relu__default_implementation_v1.cpp");
  a.source += "// a source no other test compiles\n";
  int pipe_fd[2];
  REQUIRE(::pipe(pipe_fd) == 0);
  pid_t child = ::fork();
  if (child == 0) {
    auto out = build_kernel(a, s);
    ::_exit(out.status == outcome::ok ? 0 : 1);
  }
  auto out = build_kernel(a, s);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(out.status == outcome::ok);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::filesystem::exists(out.object_path));
  size_t objects = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir / "cache/objects"))
    objects += e.is_regular_file();
  CHECK(objects == 1);
}

TEST_CASE("a compiler in the sandbox reads no hidden file and is held to its memory limit",
          "[integration][compile]") {
  if (auto why = sandbox_unavailable(); !why.empty()) {
    BB_SKIP("no sandbox on this machine, test skipped: " << why);
  }
  bb::test::temp_dir dir;
  // A home outside /tmp (the sandbox's /tmp is its own anyway) with a secret in it.
  std::string home = bb::test::unhidden_temp_dir("compiler-home");
  bb::test::write_file(home + "/secret.txt", "compiler-secret-5e1f\n");
  auto s = settings_in(dir);
  s.tools.use_pch = false;
  s.sandbox.mode = sandbox_mode::required;
  // As a node hides them: the homes (root's is not searchable by the user a compiler
  // started by root becomes; the headers it needs are shown again), and this one.
  s.sandbox.hidden = default_hidden_folders();
  s.sandbox.hidden.push_back(home);
  artefact a;
  a.kind = kernel_kind::cpp;
  a.entry = "stealer";
  a.source = "#include \"" + home + "/secret.txt\"\n";
  auto out = build_kernel(a, s);
  auto log = bb::test::read_file(out.log_path);
  INFO(log);
  CHECK(out.status == outcome::compile_failed);
  CHECK(log.find("compiler-secret-5e1f") == std::string::npos);
  CHECK(log.find("secret.txt: No such file or directory") != std::string::npos);
  if (::geteuid() == 0) { // a compiler started by root runs as nobody
    a.source = "#include \"/etc/shadow\"\n";
    auto shadow = build_kernel(a, s);
    CHECK(shadow.status == outcome::compile_failed);
    CHECK(bb::test::read_file(shadow.log_path).find("/etc/shadow: Permission denied") != std::string::npos);
  }

  // A plain source builds in the sandbox; with a few MiB of memory it cannot.
  artefact plain;
  plain.kind = kernel_kind::cpp;
  plain.entry = "plain";
  plain.source = "extern \"C\" int plain_answer() { return 42; }\n";
  auto built = build_kernel(plain, s);
  INFO(built.message);
  CHECK(built.status == outcome::ok);
  CHECK(std::filesystem::exists(built.object_path));
  plain.source += "// another source, another cache key\n";
  s.sandbox.limits.max_data_bytes = 4 << 20;
  auto starved = build_kernel(plain, s);
  CHECK(starved.status == outcome::compile_failed);
  std::error_code ec;
  std::filesystem::remove_all(home, ec);
}
