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

// The functions the timer's readings pass through: the CUDA runtime's and driver's event and
// synchronisation functions, c10's device synchronization and current stream (what events
// record on), the C library's and libstdc++'s clocks, and getrusage (the CPU timer's check for
// preempted calls).
const char* const watched_functions[] = {
  "cudaEventElapsedTime", "cudaEventElapsedTime_v2", "cudaEventRecord", "cudaEventRecordWithFlags",
  "cudaEventSynchronize", "cudaEventQuery", "cudaStreamSynchronize", "cudaDeviceSynchronize",
  "cudaStreamWaitEvent",
  "cuEventElapsedTime", "cuEventElapsedTime_v2", "cuEventRecord", "cuEventRecordWithFlags",
  "cuEventSynchronize", "cuEventQuery", "cuStreamSynchronize", "cuCtxSynchronize",
  "_ZN3c104cuda18device_synchronizeEv", "_ZN3c104cuda20getCurrentCUDAStreamEa",
  "clock_gettime", "gettimeofday", "time", "getrusage",
  "_ZNSt6chrono3_V212steady_clock3nowEv", "_ZNSt6chrono3_V212system_clock3nowEv"};

// A GOT entry (a JUMP_SLOT or GLOB_DAT relocation's target) through which an object calls a
// function: a kernel that writes its own address there redirects the calls without touching
// any code.
struct got_entry {
  std::string name; // "clock_gettime's GOT entry in libstdc++.so.6"
  void* const* at = nullptr;
  void* value = nullptr;    // as the baseline found it, or as the loader later bound it
  std::vector<void*> bound; // where the loader binds it (lazy binding), found at the baseline
};

struct guard_state {
  std::mutex mutex;
  bool taken = false;
  bool with_python = false;
  std::vector<watched> functions; // checked often
  std::vector<got_entry> entries; // checked with the functions
  std::vector<uintptr_t> scanned; // the objects whose relocations were read, by load address
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

#if defined(__x86_64__)
constexpr uint32_t jump_slot = R_X86_64_JUMP_SLOT, glob_dat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t jump_slot = R_AARCH64_JUMP_SLOT, glob_dat = R_AARCH64_GLOB_DAT;
#endif

// Whether `name` is one of the watched functions'.
bool watched_name(const char* name) {
  return std::any_of(std::begin(watched_functions), std::end(watched_functions),
                     [&](const char* f) { return std::strcmp(f, name) == 0; });
}

// The loaded objects' GOT entries to watch: in bbrunner (linked with -z now: bound at its start,
// then read-only) every one, since any function it calls may be on the timer's path; in other
// objects those for the watched functions.
struct scan {
  guard_state* state;
  struct object {
    std::string path; // "" for the executable
    std::vector<std::pair<std::string, void* const*>> entries; // (function, entry)
  };
  std::vector<object> objects;
};

int scan_object(dl_phdr_info* info, size_t, void* data) {
#if defined(__x86_64__) || defined(__aarch64__)
  auto& out = *static_cast<scan*>(data);
  auto& s = *out.state;
  uintptr_t base = info->dlpi_addr;
  if (std::find(s.scanned.begin(), s.scanned.end(), base) != s.scanned.end())
    return 0;
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
  bool program = !info->dlpi_name || !*info->dlpi_name;
  std::string path = program ? std::string() : info->dlpi_name;
  if (!dynamic || path.find("linux-vdso") != std::string::npos)
    return 0;
  // The loader relocates the dynamic section's addresses in place, except where it is read-only.
  auto address = [&](ElfW(Addr) p) { return p < base ? base + p : p; };
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  const ElfW(Rela)* plt = nullptr;
  const ElfW(Rela)* rela = nullptr;
  size_t plt_bytes = 0, rela_bytes = 0, relative = 0;
  bool plt_is_rela = true;
  for (auto* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
    case DT_SYMTAB: symbols = reinterpret_cast<const ElfW(Sym)*>(address(d->d_un.d_ptr)); break;
    case DT_STRTAB: strings = reinterpret_cast<const char*>(address(d->d_un.d_ptr)); break;
    case DT_JMPREL: plt = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr)); break;
    case DT_PLTRELSZ: plt_bytes = d->d_un.d_val; break;
    case DT_PLTREL: plt_is_rela = d->d_un.d_val == DT_RELA; break;
    case DT_RELA: rela = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr)); break;
    case DT_RELASZ: rela_bytes = d->d_un.d_val; break;
    case DT_RELACOUNT: relative = d->d_un.d_val; break; // relative relocations come first
    default: break;
    }
  }
  s.scanned.push_back(base);
  if (!symbols || !strings)
    return 0;
  scan::object found{path, {}};
  auto read = [&](const ElfW(Rela)* table, size_t count, size_t from) {
    for (size_t i = from; i < count; ++i) {
      auto type = ELF64_R_TYPE(table[i].r_info);
      auto sym = ELF64_R_SYM(table[i].r_info);
      if ((type != jump_slot && type != glob_dat) || sym == 0)
        continue;
      const char* name = strings + symbols[sym].st_name;
      if (!program && !watched_name(name))
        continue;
      auto* at = reinterpret_cast<void* const*>(base + table[i].r_offset);
      if (std::none_of(found.entries.begin(), found.entries.end(), [&](const auto& e) { return e.second == at; }))
        found.entries.emplace_back(name, at);
    }
  };
  if (plt && plt_is_rela)
    read(plt, plt_bytes / sizeof(ElfW(Rela)), 0);
  if (rela)
    read(rela, rela_bytes / sizeof(ElfW(Rela)), relative);
  if (!found.entries.empty())
    out.objects.push_back(std::move(found));
#else
  (void)info;
  (void)data;
#endif
  return 0;
}

// Adds what is not watched yet; what is watched keeps its first hash, so that a later baseline
// (once Python started) never takes a change for the original.
void take(guard_state& s) {
  auto maps = read_maps();
  std::vector<void*> handles = {RTLD_DEFAULT};
  for (auto* lib : {"libcudart.so.13", "libcudart.so.12", "libcuda.so.1", "libc10_cuda.so", "libc.so.6",
                    "libstdc++.so.6"})
    if (void* h = ::dlopen(lib, RTLD_LAZY | RTLD_NOLOAD))
      handles.push_back(h); // a reference kept for the process's life: nothing is unloaded
  for (void* h : handles)
    for (auto* f : watched_functions)
      watch_function(s, maps, h, f);
  char exe[4096];
  auto n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string self = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string();
  scan found{&s, {}};
  ::dl_iterate_phdr(scan_object, &found);
  for (auto& object : found.objects) {
    // Kept loaded for the process's life (a reference never returned), so that the entries
    // stay readable; an object that cannot be kept is not watched.
    void* own = object.path.empty() ? ::dlopen(nullptr, RTLD_LAZY)
                                    : ::dlopen(object.path.c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (!own)
      continue;
    const auto& path = object.path.empty() ? self : object.path;
    auto slash = path.rfind('/');
    std::string short_name = slash == std::string::npos ? path : path.substr(slash + 1);
    for (auto& [function, at] : object.entries) {
      got_entry e{function + "'s GOT entry in " + short_name, at, *at, {}};
      // Where the loader binds it: the process's first definition, or one in the object's own
      // scope (an RTLD_LOCAL object's bundled library). Never one a kernel brings later.
      for (void* p : {::dlsym(RTLD_DEFAULT, function.c_str()), ::dlsym(own, function.c_str())})
        if (p && std::find(e.bound.begin(), e.bound.end(), p) == e.bound.end())
          e.bound.push_back(p);
      s.entries.push_back(std::move(e));
    }
  }
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

void check_entries(guard_state& s) {
  if (!s.finding.empty())
    return;
  for (auto& e : s.entries) {
    void* now = *static_cast<void* const volatile*>(e.at);
    if (now == e.value)
      continue;
    if (std::find(e.bound.begin(), e.bound.end(), now) == e.bound.end()) {
      s.finding = e.name + " was redirected";
      return;
    }
    e.value = now; // bound lazily
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
  check_entries(s);
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
  if (s.taken) {
    check(s, s.functions);
    check_entries(s);
  }
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
  for (auto& e : s.entries)
    out.push_back(e.name);
  return out;
}

} // namespace bb::runner
