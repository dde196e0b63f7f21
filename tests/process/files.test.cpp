#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "process/files.hpp"
#include "support.hpp"

TEST_CASE("remove_tree removes a folder with contents, and a link but not what it points to",
          "[process]") {
  bb::test::temp_dir dir;
  auto root = dir / "tree";
  std::filesystem::create_directories(root + "/a/b/c");
  bb::test::write_file(root + "/a/b/c/deep", "x");
  bb::test::write_file(root + "/a/file", "x");
  std::filesystem::create_directories(dir / "outside");
  bb::test::write_file(dir / "outside/kept", "x");
  std::filesystem::create_directory_symlink(dir / "outside", root + "/a/link");
  std::string error;
  // tree, a, b, c, deep, file, link
  CHECK(bb::remove_tree(root, error) == 7);
  CHECK(error.empty());
  CHECK(!std::filesystem::exists(root));
  CHECK(bb::test::read_file(dir / "outside/kept") == "x");
  // A link to a folder, named with a trailing slash: the link goes, not what it points to.
  std::filesystem::create_directory_symlink(dir / "outside", dir / "link");
  CHECK(bb::remove_tree(dir / "link/", error) == 1);
  CHECK(error.empty());
  CHECK(!std::filesystem::exists(std::filesystem::symlink_status(dir / "link")));
  CHECK(bb::test::read_file(dir / "outside/kept") == "x");
}

TEST_CASE("remove_tree: a missing path is no error, a file is removed, a failure is told",
          "[process]") {
  bb::test::temp_dir dir;
  std::string error;
  CHECK(bb::remove_tree(dir / "missing", error) == 0);
  CHECK(error.empty());
  bb::test::write_file(dir / "file", "x");
  CHECK(bb::remove_tree(dir / "file", error) == 1);
  CHECK(error.empty());
  CHECK(!std::filesystem::exists(dir / "file"));
  if (::geteuid() == 0)
    return; // root removes from a read-only folder all the same
  std::filesystem::create_directories(dir / "locked/inner");
  bb::test::write_file(dir / "locked/inner/file", "x");
  ::chmod((dir / "locked/inner").c_str(), 0555);
  bb::remove_tree(dir / "locked", error);
  CHECK(error.find("cannot remove " + dir.path + "/locked/inner/file") == 0);
  ::chmod((dir / "locked/inner").c_str(), 0755);
}
