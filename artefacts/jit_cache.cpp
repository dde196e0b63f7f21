#include "artefacts/jit_cache.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include <dirent.h>
#include <sys/file.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "artefacts/sha256.hpp"
#include "process/files.hpp"

namespace bb {

namespace fs = std::filesystem;

std::string jit_store_for(const std::string& base, const provenance& where) {
  auto material = "bbcluster-jit-1\n" + where.device + "\n" + where.driver + "\n" + where.torch_version;
  return (fs::path(base) / sha256_hex(material).substr(0, 16)).string();
}

std::string jit_entry_name(const std::string& kernel_hash) {
  if (kernel_hash.size() < 32)
    return "";
  for (size_t i = 0; i < 32; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(kernel_hash[i])))
      return "";
  return kernel_hash.substr(0, 32);
}

namespace {

// A descriptor closed at the end of its scope.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Calls `file(dir_fd, name, relative)` for each regular file under the folder open as `dir`
// and `folder(relative)` for each folder, never following a link: every step is an openat
// with O_NOFOLLOW, so a link put in place while the walk runs is refused, not followed.
// Folders deeper than `depth` below `dir` are not entered.
void walk(int dir, const fs::path& relative, const std::function<void(int, const std::string&, const fs::path&)>& file,
          const std::function<void(const fs::path&)>& folder, size_t depth) {
  int copy = ::dup(dir);
  if (copy < 0)
    return;
  DIR* d = ::fdopendir(copy);
  if (!d) {
    ::close(copy);
    return;
  }
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth == 0)
        continue;
      fd_guard sub{::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
      if (sub.fd < 0)
        continue;
      folder(relative / name);
      walk(sub.fd, relative / name, file, folder, depth - 1);
    } else if (S_ISREG(st.st_mode)) {
      file(dir, name, relative / name);
    }
  }
  ::closedir(d);
}

// Copies the regular file `name` of the folder `dir` to `target` whole (a temporary file
// beside it, then a rename). Returns the bytes copied, or -1.
int64_t copy_whole(int dir, const std::string& name, const fs::path& target, uint64_t max_bytes) {
  fd_guard in{::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  struct stat st {};
  if (in.fd < 0 || ::fstat(in.fd, &st) != 0 || !S_ISREG(st.st_mode)
      || static_cast<uint64_t>(st.st_size) > max_bytes)
    return -1;
  static std::atomic<uint64_t> counter{0};
  auto tmp = target;
  tmp += ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  int64_t copied = 0;
  {
    fd_guard out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
    if (out.fd < 0)
      return -1;
    char buf[1 << 16];
    for (;;) {
      auto n = ::read(in.fd, buf, sizeof(buf));
      if (n < 0 || static_cast<uint64_t>(copied + n) > max_bytes) {
        copied = -1;
        break;
      }
      if (n == 0)
        break;
      for (ssize_t done = 0; done < n;) {
        auto w = ::write(out.fd, buf + done, static_cast<size_t>(n - done));
        if (w <= 0) {
          copied = -1;
          break;
        }
        done += w;
      }
      if (copied < 0)
        break;
      copied += n;
    }
  }
  std::error_code ec;
  if (copied >= 0)
    fs::rename(tmp, target, ec);
  if (copied < 0 || ec) {
    fs::remove(tmp, ec);
    return -1;
  }
  return copied;
}

// Triton's folder being written (tmp.pid_...), its older half-written files
// (<name>.tmp.pid_...), and this file's own temporary files.
bool half_written(const fs::path& relative) {
  for (auto& part : relative) {
    auto p = part.string();
    if (p.rfind("tmp.", 0) == 0 || p.find(".tmp") != std::string::npos)
      return true;
  }
  return false;
}

// Opens the absolute `path` below the folder `root`, one component at a time, none followed
// if it is a link: -1 when any step is not a plain folder.
int open_beneath(const std::string& root, const fs::path& path) {
  int fd = ::open(root.empty() ? "/" : root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (auto& part : path.relative_path()) {
    if (fd < 0)
      break;
    auto name = part.string();
    if (name.empty() || name == ".")
      continue;
    int next = name == ".." ? -1 : ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ::close(fd);
    fd = next;
  }
  return fd;
}

} // namespace

jit_harvest harvest_jit_cache(const std::string& root, const std::string& from, const std::string& to,
                              const jit_bounds& bounds) {
  jit_harvest h;
  fd_guard top{open_beneath(root, from)};
  if (top.fd < 0)
    return h;
  std::error_code ec;
  // The entry is made by its first file: a job that compiled nothing leaves no empty folder.
  auto existing = fs::path(to);
  while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.parent_path())
    existing = existing.parent_path();
  struct statvfs vfs {};
  if (::statvfs(existing.c_str(), &vfs) == 0
      && static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < bounds.free_bytes) {
    h.stopped = "the store's file system has less than " + std::to_string(bounds.free_bytes >> 20) + " MiB free";
    return h;
  }
  // What the entry holds already counts against its bounds.
  uint64_t held = 0;
  size_t files = 0;
  for (auto it = fs::recursive_directory_iterator(to, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    ++files;
    if (it->is_regular_file(ec))
      held += it->file_size(ec);
  }
  auto max_bytes = bounds.entry_bytes;
  auto full = [&] {
    if (files < bounds.entry_files)
      return false;
    if (h.stopped.empty())
      h.stopped = "the entry would hold more than " + std::to_string(bounds.entry_files) + " files";
    return true;
  };
  walk(top.fd, {},
       [&](int dir, const std::string& name, const fs::path& relative) {
         if (!h.stopped.empty() || half_written(relative) || full())
           return;
         auto target = fs::path(to) / relative;
         std::error_code e;
         if (fs::exists(fs::symlink_status(target, e)))
           return;
         struct stat st {};
         if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
           return;
         if (held + static_cast<uint64_t>(st.st_size) > max_bytes) {
           h.stopped = "the entry would hold more than " + std::to_string(max_bytes >> 20) + " MiB";
           return;
         }
         fs::create_directories(target.parent_path(), e);
         auto n = copy_whole(dir, name, target, max_bytes - held);
         if (n < 0)
           return;
         held += static_cast<uint64_t>(n);
         h.bytes += static_cast<uint64_t>(n);
         ++h.files;
         ++files;
       },
       [&](const fs::path& relative) {
         std::error_code e;
         if (h.stopped.empty() && !half_written(relative) && !fs::exists(fs::path(to) / relative, e) && !full())
           ++files;
       },
       bounds.depth);
  h.entry_bytes = held;
  if (h.files > 0) {
    // Written whole, as the entry's files are: a reader sees the old record or the new.
    static std::atomic<uint64_t> records{0};
    auto record = fs::path(to).string() + ".bytes";
    auto tmp = record + ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(records++);
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << held << "\n";
    }
    fs::rename(tmp, record, ec);
    if (ec)
      fs::remove(tmp, ec);
  }
  return h;
}

tuning_harvest harvest_tuning(const std::string& root, const std::string& from, const std::string& to,
                              uint64_t max_bytes, uint64_t free_bytes, size_t max_files) {
  tuning_harvest h;
  fd_guard top{open_beneath(root, from)};
  if (top.fd < 0)
    return h;
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) {
    h.stopped = "cannot make " + to;
    return h;
  }
  // FlagGems' names only (TunedConfig_<device>_triton_<version>.db), and at most max_files
  // of them in the slot's folder.
  auto tuning_name = [](const std::string& name) {
    static const std::string head = "TunedConfig_", tail = ".db";
    if (name.size() <= head.size() + tail.size() || name.size() > 255 || name.compare(0, head.size(), head) != 0
        || name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
  };
  size_t held = 0;
  for (auto it = fs::directory_iterator(to, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    held += tuning_name(it->path().filename().string());
  walk(top.fd, {},
       [&](int dir, const std::string& name, const fs::path& relative) {
         if (relative.has_parent_path() || !tuning_name(name))
           return;
         struct stat st {}, journal {}, kept {};
         if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)
             || ::fstatat(dir, (name + "-journal").c_str(), &journal, AT_SYMLINK_NOFOLLOW) == 0
             || ::fstatat(dir, (name + "-wal").c_str(), &journal, AT_SYMLINK_NOFOLLOW) == 0)
           return;
         if (static_cast<uint64_t>(st.st_size) > max_bytes) {
           h.stopped = name + " holds more than " + std::to_string(max_bytes) + " bytes";
           return;
         }
         auto target = fs::path(to) / name;
         bool there = ::lstat(target.c_str(), &kept) == 0;
         if (there && kept.st_size == st.st_size && kept.st_mtim.tv_sec == st.st_mtim.tv_sec
             && kept.st_mtim.tv_nsec == st.st_mtim.tv_nsec)
           return;
         if (!there && held >= max_files) {
           h.stopped = "the slot's folder holds " + std::to_string(max_files) + " databases already";
           return;
         }
         struct statvfs room {};
         uint64_t avail = 0;
         if (::statvfs(to.c_str(), &room) == 0)
           avail = static_cast<uint64_t>(room.f_bavail) * room.f_frsize;
         if (avail < free_bytes || avail - free_bytes < static_cast<uint64_t>(st.st_size)) {
           h.stopped = "the store's file system has less than " + std::to_string(free_bytes >> 20) + " MiB free";
           return;
         }
         auto n = copy_whole(dir, name, target, max_bytes);
         if (n < 0)
           return;
         // The source's time on the copy: the next harvest passes over a database unchanged since.
         struct timespec times[2] = {st.st_atim, st.st_mtim};
         ::utimensat(AT_FDCWD, target.c_str(), times, AT_SYMLINK_NOFOLLOW);
         ++h.files;
         h.bytes += static_cast<uint64_t>(n);
         held += !there;
       },
       [](const fs::path&) {}, 0);
  return h;
}

uint64_t jit_entry_bytes(const std::string& entry) {
  std::ifstream in(entry + ".bytes");
  uint64_t recorded = 0;
  if (in >> recorded)
    return recorded;
  uint64_t held = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(entry, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec))
      held += it->file_size(ec);
  return held;
}

void touch_jit_entry(const std::string& entry) {
  ::utimensat(AT_FDCWD, entry.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

jit_trim trim_jit_store(const std::string& store, uint64_t max_bytes, const std::string& keep) {
  struct entry {
    fs::path path;
    fs::file_time_type used;
    uint64_t bytes;
  };
  std::vector<entry> entries;
  jit_trim t;
  std::error_code ec;
  // One trim at a time per store (slots of a node, nodes sharing a home): each sums what the
  // one before left, so two never both make room for the same bytes.
  fd_guard lock{::open((fs::path(store) / ".trim.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (lock.fd >= 0)
    ::flock(lock.fd, LOCK_EX);
  for (auto it = fs::directory_iterator(store, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code e;
    auto name = it->path().filename().string();
    if (!it->is_directory(e) || it->is_symlink(e))
      continue;
    if (name.size() > 32 && name.compare(32, 5, ".trim") == 0 && jit_entry_name(name) == name.substr(0, 32)) {
      fs::remove_all(it->path(), e); // a trim that ended halfway
      continue;
    }
    if (jit_entry_name(name) != name)
      continue;
    auto used = fs::last_write_time(it->path(), e);
    if (e)
      continue;
    entries.push_back({it->path(), used, jit_entry_bytes(it->path().string())});
    t.held += entries.back().bytes;
  }
  if (t.held <= max_bytes)
    return t;
  std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.used < b.used; });
  for (auto& e : entries) {
    if (t.held <= max_bytes)
      break;
    if (!keep.empty() && fs::path(keep).lexically_normal() == e.path.lexically_normal())
      continue;
    // Away first, under a name no reader looks for: of evaluators trimming at once, one wins.
    auto away = e.path;
    away += ".trim" + std::to_string(::getpid());
    std::error_code r;
    fs::rename(e.path, away, r);
    if (r)
      continue;
    fs::remove(e.path.string() + ".bytes", r);
    fs::remove_all(away, r);
    t.held -= std::min(t.held, e.bytes);
    t.bytes += e.bytes;
    ++t.entries;
  }
  return t;
}

std::string seed_jit_folder(const std::string& from, const std::string& to) {
  // In the runner, beside libtorch: not std::filesystem::remove_all (process/files.hpp).
  std::string removing;
  remove_tree(to, removing);
  if (!removing.empty())
    return "cannot empty " + to + ": " + removing;
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec)
    return "cannot make " + to + ": " + ec.message();
  fd_guard root{from.empty() ? -1 : ::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (root.fd < 0)
    return ""; // nothing kept for this kernel yet
  std::string why;
  walk(root.fd, {},
       [&](int dir, const std::string& name, const fs::path& relative) {
         if (copy_whole(dir, name, fs::path(to) / relative, UINT64_MAX) < 0 && why.empty())
           why = "cannot copy " + (fs::path(from) / relative).string();
       },
       [&](const fs::path& relative) {
         std::error_code e;
         fs::create_directories(fs::path(to) / relative, e);
       },
       jit_bounds{}.depth);
  if (!why.empty()) {
    // Part of an entry (one trimmed while it was copied) is none: the JIT libraries compile.
    remove_tree(to, removing);
    fs::create_directories(to, ec);
  }
  return why;
}

} // namespace bb
