#include "process/files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bb {

namespace {

// Empties the folder open as `dir` (which this call owns and closes), depth first.
uint64_t empty_folder(int dir, const std::string& where, std::string& error) {
  DIR* d = ::fdopendir(dir);
  if (!d) {
    if (error.empty())
      error = "cannot read " + where + ": " + std::strerror(errno);
    ::close(dir);
    return 0;
  }
  uint64_t removed = 0;
  // One pass over the folder's entries: how many it removed.
  auto pass = [&] {
    uint64_t n = 0;
    while (dirent* e = ::readdir(d)) {
      const char* name = e->d_name;
      if (!std::strcmp(name, ".") || !std::strcmp(name, ".."))
        continue;
      struct stat st{};
      if (::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        continue; // gone meanwhile
      if (S_ISDIR(st.st_mode)) {
        int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
          n += empty_folder(sub, where + "/" + name, error);
        else if (error.empty())
          error = "cannot open " + where + "/" + name + ": " + std::strerror(errno);
        if (::unlinkat(dir, name, AT_REMOVEDIR) == 0)
          ++n;
        else if (errno != ENOENT && error.empty())
          error = "cannot remove " + where + "/" + name + ": " + std::strerror(errno);
      } else if (::unlinkat(dir, name, 0) == 0) {
        ++n;
      } else if (errno != ENOENT && error.empty()) {
        error = "cannot remove " + where + "/" + name + ": " + std::strerror(errno);
      }
    }
    return n;
  };
  // Entries removed while the folder is read can make readdir skip others (NFS, where a
  // scratch folder may live without a sandbox): read it again until a pass removes nothing.
  while (uint64_t n = pass()) {
    removed += n;
    ::rewinddir(d);
  }
  ::closedir(d); // closes `dir`
  return removed;
}

} // namespace

uint64_t remove_tree(const std::string& given, std::string& error) {
  error.clear();
  // "link/" would name the folder a link points to, even with O_NOFOLLOW.
  std::string path = given;
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      error = "cannot read " + path + ": " + std::strerror(errno);
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) == 0)
      return 1;
    if (errno != ENOENT)
      error = "cannot remove " + path + ": " + std::strerror(errno);
    return 0;
  }
  uint64_t removed = 0;
  int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir >= 0)
    removed = empty_folder(dir, path, error);
  else if (errno != ENOENT)
    error = "cannot open " + path + ": " + std::strerror(errno);
  if (::rmdir(path.c_str()) == 0)
    ++removed;
  else if (errno != ENOENT && error.empty())
    error = "cannot remove " + path + ": " + std::strerror(errno);
  return removed;
}

std::string std_filesystem_library() {
  using remove_all_fn = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  remove_all_fn f = &std::filesystem::remove_all;
  Dl_info where{};
  if (::dladdr(reinterpret_cast<void*>(f), &where) == 0 || !where.dli_fname)
    return "";
  return where.dli_fname;
}

} // namespace bb
