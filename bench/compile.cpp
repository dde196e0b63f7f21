// Compile benchmark: a cold compile, a compile with the precompiled header, and a cache hit,
// per native kernel kind, measured side by side in one run and printed as seconds and as
// ratios to the cold compile.
//
//   bench_compile [CUDA_ARCH]     (default sm_90; .cu needs nvcc, not a GPU)

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "artefacts/compiler.hpp"
#include "artefacts/kernel_dir.hpp"

namespace {

bb::compile_settings fresh(const std::string& root, const std::string& name, bool pch) {
  bb::compile_settings s;
  s.tools = bb::default_toolchain();
  s.tools.use_pch = pch;
  s.cache_dir = root + "/" + name;
  s.log_dir = root + "/logs";
  s.timeout_s = 900;
  s.has_cuda = true;
  return s;
}

bb::artefact example(const std::string& folder, const std::string& file) {
  bb::artefact a;
  bb::read_kernel_file(BB_SOURCE_DIR "/examples/kernels/" + folder + "/" + file, folder, a);
  return a;
}

void row(const char* what, const bb::compile_outcome& o, double cold) {
  std::printf("  %-28s %-15s %8.3f s   %6.3fx of cold  (%.1fx faster)\n", what, bb::to_string(o.status),
              o.seconds, cold > 0 ? o.seconds / cold : 0.0, o.seconds > 0 ? cold / o.seconds : 0.0);
}

} // namespace

int main(int argc, char** argv) {
  std::string arch = argc > 1 ? argv[1] : "sm_90";
  char tmpl[] = "/tmp/bench-compile-XXXXXX";
  std::string root = ::mkdtemp(tmpl);

  std::printf(".cpp (examples/kernels/relu__default):\n");
  auto cpp = example("relu__default", "relu__default_implementation_v1.cpp");
  auto cold = bb::build_kernel(cpp, fresh(root, "cold", false));
  row("cold (no precompiled header)", cold, cold.seconds);
  auto warm = fresh(root, "pch", true);
  auto pch_start = std::chrono::steady_clock::now();
  bb::ensure_pch(warm);
  double pch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - pch_start).count();
  std::printf("  %-28s %-15s %8.3f s   (once per toolchain and flag set)\n", "precompiling the header",
              "ok", pch_s);
  auto with_pch = bb::build_kernel(cpp, warm);
  row("with precompiled header", with_pch, cold.seconds);
  auto hit = bb::build_kernel(cpp, warm);
  row("cache hit", hit, cold.seconds);

  auto cu = example("mul__Tensor", "mul__Tensor_implementation_v1.cu");
  auto s = fresh(root, "cu", false);
  s.tools.cuda_arch = arch;
  if (s.tools.nvcc.empty()) {
    std::printf(".cu: no nvcc in this build, skipped\n");
  } else {
    std::printf(".cu (examples/kernels/mul__Tensor, -arch=%s):\n", arch.c_str());
    auto cu_cold = bb::build_kernel(cu, s);
    row("cold", cu_cold, cu_cold.seconds);
    if (cu_cold.status != bb::outcome::ok)
      std::printf("%s\n", cu_cold.message.c_str());
    auto cu_hit = bb::build_kernel(cu, s);
    row("cache hit", cu_hit, cu_cold.seconds);
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
