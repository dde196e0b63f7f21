#include "artefacts/compiler.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include <unistd.h>

#include "bb_build_config.hpp"
#include "artefacts/sha256.hpp"
#include "process/subprocess.hpp"

namespace bb {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ';');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

// A private folder beside the final place, so the last step is one rename on one filesystem.
fs::path fresh_tmp(const std::string& cache_dir) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex m;
  std::lock_guard<std::mutex> guard(m);
  auto dir = fs::path(cache_dir) / "tmp"
             / (std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000));
  fs::create_directories(dir);
  return dir;
}

// The compiler's first version line: part of every cache key.
std::string compiler_identity(const std::string& program, const std::string& cache_dir) {
  static std::mutex m;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> guard(m);
  if (auto it = known.find(program); it != known.end())
    return it->second;
  auto tmp = fresh_tmp(cache_dir);
  auto log = (tmp / "version.txt").string();
  auto r = run_process({program, "--version"}, log, 30);
  auto text = read_text(log);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  std::string id = program + "\n" + (r.ok() ? text : "unknown");
  known[program] = id;
  return id;
}

std::vector<std::string> cxx_command(const toolchain& tc, const std::string& pch_dir) {
  std::vector<std::string> cmd{tc.cxx};
  cmd.insert(cmd.end(), tc.flags.begin(), tc.flags.end());
  if (!pch_dir.empty())
    cmd.push_back("-I" + pch_dir);
  for (auto& d : tc.include_dirs)
    cmd.push_back("-I" + d);
  return cmd;
}

std::vector<std::string> nvcc_command(const toolchain& tc) {
  std::vector<std::string> cmd{tc.nvcc, "-std=c++17", "-O2", "-Xcompiler", "-fPIC",
                               "-arch=" + tc.cuda_arch};
  for (auto& f : tc.flags)
    if (f.rfind("-D", 0) == 0)
      cmd.push_back(f);
  for (auto& d : tc.include_dirs)
    cmd.push_back("-I" + d);
  return cmd;
}

// The sandbox of one compiler run: its private folder writable, the headers it includes and
// the precompiled headers readable, every GPU for nvcc's "native" arch. Started by root, the
// compiler runs as an unprivileged user: the folder becomes that user's.
sandbox_policy compiler_sandbox(const compile_settings& s, const fs::path& tmp, bool cuda) {
  auto p = s.sandbox;
  p.writable.push_back(tmp.string());
  p.read_only.insert(p.read_only.end(), s.tools.include_dirs.begin(), s.tools.include_dirs.end());
  p.read_only.push_back((fs::path(s.cache_dir) / "pch").string());
  if (cuda)
    p.devices = all_gpu_device_nodes();
  if (p.mode != sandbox_mode::off && ::geteuid() == 0) {
    std::error_code ec;
    bool owned = ::chown(tmp.c_str(), p.unprivileged_uid, static_cast<gid_t>(-1)) == 0;
    for (auto& e : fs::recursive_directory_iterator(tmp, ec))
      if (e.is_directory(ec))
        owned = owned && ::chown(e.path().c_str(), p.unprivileged_uid, static_cast<gid_t>(-1)) == 0;
    if (!owned)
      p.writable.clear(); // the build then fails, and its log says why
  }
  return p;
}

} // namespace

toolchain default_toolchain() {
  toolchain tc;
  tc.cxx = BB_KERNEL_CXX;
  tc.nvcc = BB_KERNEL_NVCC;
  tc.flags = {"-std=c++17", "-O2", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=" BB_TORCH_CXX11_ABI};
  tc.include_dirs = split_list(BB_KERNEL_INCLUDE_DIR ";" BB_TORCH_INCLUDE_DIRS);
  tc.torch_version = BB_TORCH_VERSION;
  return tc;
}

std::string default_cache_dir() {
  if (const char* env = std::getenv("BBCLUSTER_CACHE"); env && *env)
    return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/bbcluster/kernels";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/bbcluster/kernels";
}

std::string cache_key(const artefact& a, const toolchain& tc, const std::string& compiler_id) {
  std::string material = "bbcluster-kernel-1\n" + std::string(to_string(a.kind)) + "\n" + a.entry + "\n" + a.source + "\n";
  for (auto& f : tc.flags)
    material += f + "\n";
  for (auto& d : tc.include_dirs)
    material += d + "\n";
  material += compiler_id + "\n" + tc.torch_version + "\n" + (a.kind == kernel_kind::cu ? tc.cuda_arch : "");
  return sha256_hex(material);
}

std::string trim_compiler_log(const std::string& log, size_t max_lines) {
  std::stringstream in(log);
  std::string out;
  size_t lines = 0;
  bool seen_error = false;
  for (std::string line; std::getline(in, line) && lines < max_lines;) {
    seen_error = seen_error || line.find("error") != std::string::npos;
    if (!seen_error)
      continue;
    out += line.substr(0, 300) + "\n";
    ++lines;
  }
  if (out.empty())
    out = log.substr(0, 2000);
  return out;
}

std::string ensure_pch(const compile_settings& s) {
  static std::mutex m;
  std::lock_guard<std::mutex> guard(m); // one build per process; other processes race safely
  auto header_src = fs::path(s.tools.include_dirs.front()) / "bbcluster" / "kernel.h";
  auto header = read_text(header_src);
  std::string material = header + "\n" + compiler_identity(s.tools.cxx, s.cache_dir) + "\n"
                         + s.tools.torch_version;
  for (auto& f : s.tools.flags)
    material += "\n" + f;
  for (auto& d : s.tools.include_dirs)
    material += "\n" + d;
  auto dir = fs::path(s.cache_dir) / "pch" / sha256_hex(material).substr(0, 24);
  if (fs::exists(dir / "bbcluster" / "kernel.h.gch"))
    return dir.string();
  auto tmp = fresh_tmp(s.cache_dir);
  fs::create_directories(tmp / "bbcluster");
  std::ofstream(tmp / "bbcluster" / "kernel.h", std::ios::binary) << header;
  auto cmd = cxx_command(s.tools, "");
  cmd.insert(cmd.end(), {"-x", "c++-header", (tmp / "bbcluster" / "kernel.h").string(), "-o",
                         (tmp / "bbcluster" / "kernel.h.gch").string()});
  auto r = run_process(cmd, (tmp / "pch.log").string(), s.timeout_s, compiler_sandbox(s, tmp, false));
  std::error_code ec;
  if (!r.ok()) {
    fs::remove_all(tmp, ec);
    return "";
  }
  fs::create_directories(dir.parent_path(), ec);
  fs::rename(tmp, dir, ec); // fails harmlessly when another process published first
  if (ec)
    fs::remove_all(tmp, ec);
  return fs::exists(dir / "bbcluster" / "kernel.h.gch") ? dir.string() : "";
}

compile_outcome build_kernel(const artefact& a, const compile_settings& s) {
  auto start = std::chrono::steady_clock::now();
  compile_outcome out;
  auto finish = [&](outcome status) {
    out.status = status;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  };
  if (a.kind == kernel_kind::cu && (!s.has_cuda || s.tools.nvcc.empty())) {
    out.message = s.has_cuda ? "no nvcc on this node" : "a CUDA kernel needs a GPU; this node has none";
    return finish(outcome::needs_cuda);
  }
  auto tc = s.tools;
  auto key = cache_key(a, tc, compiler_identity(a.kind == kernel_kind::cu ? tc.nvcc : tc.cxx, s.cache_dir));
  auto object = fs::path(s.cache_dir) / "objects" / key.substr(0, 2) / (key + ".so");
  if (fs::exists(object)) {
    out.object_path = object.string();
    out.cached = true;
    return finish(outcome::ok);
  }
  auto tmp = fresh_tmp(s.cache_dir);
  auto source = tmp / (a.entry + (a.kind == kernel_kind::cu ? ".cu" : ".cpp"));
  std::ofstream(source, std::ios::binary) << a.source;
  std::vector<std::string> cmd;
  if (a.kind == kernel_kind::cu) {
    cmd = nvcc_command(tc);
  } else {
    cmd = cxx_command(tc, tc.use_pch ? ensure_pch(s) : "");
  }
  auto built = tmp / "kernel.so";
  cmd.insert(cmd.end(), {"-shared", "-o", built.string(), source.string()});
  std::error_code ec;
  fs::create_directories(s.log_dir, ec);
  out.log_path = (fs::path(s.log_dir) / (a.entry + "_" + key.substr(0, 12) + ".log")).string();
  {
    std::ofstream log(out.log_path, std::ios::trunc);
    for (auto& w : cmd)
      log << w << " ";
    log << "\n";
  }
  auto r = run_process(cmd, out.log_path, s.timeout_s, compiler_sandbox(s, tmp, a.kind == kernel_kind::cu));
  if (!r.ok()) {
    out.message = r.timed_out ? "the compiler ran past " + std::to_string(int(s.timeout_s)) + " s"
                              : trim_compiler_log(read_text(out.log_path));
    fs::remove_all(tmp, ec);
    return finish(outcome::compile_failed);
  }
  fs::create_directories(object.parent_path(), ec);
  fs::rename(built, object, ec); // atomic; a concurrent identical build may have won: fine
  fs::remove_all(tmp, ec);
  if (!fs::exists(object)) {
    out.message = "cannot publish the object into " + object.parent_path().string();
    return finish(outcome::compile_failed);
  }
  out.object_path = object.string();
  return finish(outcome::ok);
}

} // namespace bb
