#include "runner/code_guard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "runner/python_kernel.hpp"

namespace bb::runner {

namespace {

// A stretch of code and its hash when the baseline was taken.
struct watched {
  std::string name;
  const unsigned char* at = nullptr;
  size_t size = 0;
  uint64_t hash = 0;
};

// One line of /proc/self/maps.
struct mapping {
  uintptr_t start = 0, end = 0;
  std::string perms, path;
};

std::vector<mapping> read_maps() {
  std::vector<mapping> out;
  std::ifstream in("/proc/self/maps");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    auto dash = range.find('-');
    if (dash == std::string::npos)
      continue;
    mapping m;
    m.start = std::stoull(range.substr(0, dash), nullptr, 16);
    m.end = std::stoull(range.substr(dash + 1), nullptr, 16);
    m.perms = perms;
    m.path = path;
    out.push_back(std::move(m));
  }
  return out;
}

uint64_t hash_of(const unsigned char* p, size_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i)
    h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// The functions the timer's readings pass through, by library.
const char* const runtime_functions[] = {
  "cudaEventElapsedTime", "cudaEventElapsedTime_v2", "cudaEventRecord", "cudaEventRecordWithFlags",
  "cudaEventSynchronize", "cudaEventQuery", "cudaStreamSynchronize", "cudaDeviceSynchronize",
  "cudaStreamWaitEvent"};
const char* const driver_functions[] = {
  "cuEventElapsedTime", "cuEventElapsedTime_v2", "cuEventRecord", "cuEventRecordWithFlags",
  "cuEventSynchronize", "cuEventQuery", "cuStreamSynchronize", "cuCtxSynchronize"};
const char* const clock_functions[] = {"clock_gettime", "gettimeofday", "time",
                                       "_ZNSt6chrono3_V212steady_clock3nowEv",
                                       "_ZNSt6chrono3_V212system_clock3nowEv"};

struct guard_state {
  std::mutex mutex;
  bool taken = false;
  bool with_python = false;
  std::vector<watched> functions; // checked often
  std::vector<watched> regions;   // bbrunner's code, the vDSO: at load and at a job's end
  std::vector<std::string> code_paths; // files whose code was mapped executable at the baseline
  std::string finding;
};

guard_state& state() {
  static guard_state* s = new guard_state; // never destroyed: checked until the process ends
  return *s;
}

// The end of the executable mapping holding `p` (0 when none does).
uintptr_t mapping_end(const std::vector<mapping>& maps, uintptr_t p) {
  for (auto& m : maps)
    if (p >= m.start && p < m.end && m.perms.find('x') != std::string::npos)
      return m.end;
  return 0;
}

void watch_function(guard_state& s, const std::vector<mapping>& maps, void* handle, const char* name) {
  void* p = ::dlsym(handle, name);
  if (!p)
    return;
  for (auto& w : s.functions)
    if (w.at == p)
      return;
  auto at = reinterpret_cast<uintptr_t>(p);
  auto end = mapping_end(maps, at);
  if (end == 0)
    return;
  size_t size = 256;
  Dl_info info{};
  void* entry = nullptr;
  if (::dladdr1(p, &info, &entry, RTLD_DL_SYMENT) && entry) {
    auto* sym = static_cast<const ElfW(Sym)*>(entry);
    if (sym->st_size >= 16)
      size = std::min<size_t>(sym->st_size, 4096);
  }
  size = std::min<size_t>(size, end - at);
  auto* bytes = reinterpret_cast<const unsigned char*>(p);
  s.functions.push_back({name, bytes, size, hash_of(bytes, size)});
}

// Adds what is not watched yet; what is watched keeps its first hash, so that a later baseline
// (once Python started) never takes a change for the original.
void take(guard_state& s) {
  auto maps = read_maps();
  std::vector<void*> handles = {RTLD_DEFAULT};
  for (auto* lib : {"libcudart.so.13", "libcudart.so.12", "libcuda.so.1", "libc.so.6", "libstdc++.so.6"})
    if (void* h = ::dlopen(lib, RTLD_LAZY | RTLD_NOLOAD))
      handles.push_back(h); // a reference kept for the process's life: nothing is unloaded
  for (void* h : handles) {
    for (auto* f : runtime_functions)
      watch_function(s, maps, h, f);
    for (auto* f : driver_functions)
      watch_function(s, maps, h, f);
    for (auto* f : clock_functions)
      watch_function(s, maps, h, f);
  }
  char exe[4096];
  auto n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string self = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string();
  for (auto& m : maps) {
    if (m.perms.find('x') == std::string::npos)
      continue;
    if (!m.path.empty() && (m.path[0] == '/' || m.path == "[vdso]")
        && std::find(s.code_paths.begin(), s.code_paths.end(), m.path) == s.code_paths.end())
      s.code_paths.push_back(m.path);
    bool known = std::any_of(s.regions.begin(), s.regions.end(), [&](const watched& w) {
      return w.at == reinterpret_cast<const unsigned char*>(m.start);
    });
    if (!known && ((m.path == self && !self.empty()) || m.path == "[vdso]")) {
      auto* bytes = reinterpret_cast<const unsigned char*>(m.start);
      s.regions.push_back({m.path == "[vdso]" ? "the vDSO" : "bbrunner's own code", bytes, m.end - m.start,
                           hash_of(bytes, m.end - m.start)});
    }
  }
  s.taken = true;
  s.with_python = python_started();
}

void check(guard_state& s, const std::vector<watched>& list) {
  if (!s.finding.empty())
    return;
  for (auto& w : list)
    if (hash_of(w.at, w.size) != w.hash) {
      s.finding = "the machine code of " + w.name + " was rewritten";
      return;
    }
}

// Code of a file that was executable at the baseline, now mapped writable too.
void check_maps(guard_state& s) {
  if (!s.finding.empty())
    return;
  for (auto& m : read_maps()) {
    if (m.perms.find('w') == std::string::npos || m.perms.find('x') == std::string::npos)
      continue;
    for (auto& p : s.code_paths)
      if (p == m.path) {
        s.finding = "code of " + m.path + " was mapped writable and executable";
        return;
      }
  }
}

// The functions, bbrunner's code and the vDSO, and the maps.
void check_everything(guard_state& s) {
  check(s, s.functions);
  check(s, s.regions);
  check_maps(s);
}

} // namespace

void code_baseline() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.taken && s.with_python == python_started())
    return;
  if (s.taken)
    check_everything(s); // before more is added: a change is never taken for the original
  take(s);
}

void check_timing_code() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.taken)
    check(s, s.functions);
}

void check_all_code() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.taken)
    check_everything(s);
}

std::string code_finding() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.finding;
}

std::vector<std::string> code_watched() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::string> out;
  for (auto* list : {&s.functions, &s.regions})
    for (auto& w : *list)
      out.push_back(w.name);
  return out;
}

} // namespace bb::runner
