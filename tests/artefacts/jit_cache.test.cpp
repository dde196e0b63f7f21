#include <catch2/catch.hpp>

#include <filesystem>

#include "artefacts/jit_cache.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

TEST_CASE("the JIT cache's store is keyed by GPU, driver and torch, its entries by source hash",
          "[artefacts]") {
  bb::provenance h100;
  h100.device = "NVIDIA H100 80GB HBM3";
  h100.driver = "580.95";
  h100.torch_version = "2.9.0+cu130";
  auto base = bb::jit_store_for("/x", h100);
  CHECK(base.rfind("/x/", 0) == 0);
  CHECK(bb::jit_store_for("/x", h100) == base);
  for (auto change : {&bb::provenance::device, &bb::provenance::driver, &bb::provenance::torch_version}) {
    auto other = h100;
    other.*change += "1";
    CHECK(bb::jit_store_for("/x", other) != base);
  }
  std::string hash(64, 'a');
  CHECK(bb::jit_entry_name(hash) == std::string(32, 'a'));
  CHECK(bb::jit_entry_name("aten").empty());
  CHECK(bb::jit_entry_name("../../" + std::string(40, 'a')).empty());
}

TEST_CASE("harvesting copies what the entry lacks, whole, and never follows a link", "[artefacts]") {
  bb::test::temp_dir dir;
  auto from = dir / "runner/jit/k";
  auto to = dir / "store/k";
  fs::create_directories(from + "/triton/abc");
  fs::create_directories(to + "/triton/abc");
  fs::create_directories(dir / "outside");
  bb::test::write_file(from + "/triton/abc/kernel.cubin", "new cubin");
  bb::test::write_file(from + "/triton/abc/kept.json", "runner's copy");
  bb::test::write_file(to + "/triton/abc/kept.json", "store's copy");
  bb::test::write_file(dir / "outside/secret.txt", "secret");
  fs::create_symlink(dir / "outside/secret.txt", from + "/triton/abc/link.cubin");
  fs::create_directory_symlink(dir / "outside", from + "/triton/escape");
  fs::create_directories(from + "/triton/tmp.pid_7_x");
  bb::test::write_file(from + "/triton/tmp.pid_7_x/half.cubin", "half");

  bb::jit_bounds roomy;
  roomy.free_bytes = 0;
  auto h = bb::harvest_jit_cache("", from, to, roomy);
  CHECK(h.files == 1);
  CHECK(h.bytes == 9);
  CHECK(h.stopped.empty());
  CHECK(bb::test::read_file(to + "/triton/abc/kernel.cubin") == "new cubin");
  // What the entry holds is never replaced.
  CHECK(bb::test::read_file(to + "/triton/abc/kept.json") == "store's copy");
  CHECK(!fs::exists(fs::symlink_status(to + "/triton/abc/link.cubin")));
  CHECK(!fs::exists(to + "/triton/escape"));
  CHECK(!fs::exists(to + "/triton/tmp.pid_7_x"));
  // No temporary file is left beside the copies.
  size_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(to))
    files += e.is_regular_file();
  CHECK(files == 2);

  // A second harvest finds nothing new; one from a folder that is not there copies nothing.
  CHECK(bb::harvest_jit_cache("", from, to, roomy).files == 0);
  CHECK(bb::harvest_jit_cache("", dir / "none", to, roomy).files == 0);

  // A link anywhere on the way to the folder is not followed either: a kernel that replaced
  // its JIT folder with a link to the host's files gets nothing copied.
  fs::create_directories(dir / "runner2");
  fs::create_directory_symlink(dir / "outside", dir / "runner2/jit");
  CHECK(bb::harvest_jit_cache("", dir / "runner2/jit", dir / "store/l", roomy).files == 0);
  CHECK(!fs::exists(dir / "store/l/secret.txt"));
  // Nor is `root` left by "..".
  CHECK(bb::harvest_jit_cache(dir / "runner", "/jit/../../outside", dir / "store/u", roomy).files == 0);
  // Seen from a root, the path is the root's.
  CHECK(bb::harvest_jit_cache(dir / "runner", "/jit/k", dir / "store/r", roomy).files == 2);
}

TEST_CASE("an entry holds at most its bound: the harvest stops there and says so", "[artefacts]") {
  bb::test::temp_dir dir;
  auto from = dir / "jit";
  fs::create_directories(from);
  for (int i = 0; i < 4; ++i)
    bb::test::write_file(from + "/f" + std::to_string(i), std::string(400, 'x'));
  bb::jit_bounds small;
  small.entry_bytes = 1000;
  small.free_bytes = 0;
  auto h = bb::harvest_jit_cache("", from, dir / "store", small);
  CHECK(h.files == 2);
  CHECK(h.bytes == 800);
  CHECK(h.stopped == "the entry would hold more than 0 MiB");
  // What the entry already holds counts: nothing more fits.
  CHECK(bb::harvest_jit_cache("", from, dir / "store", small).files == 0);

  // Files and folders are counted too (empty ones weigh nothing), and depth is bounded.
  small.entry_bytes = 1 << 20;
  small.entry_files = 3;
  for (int i = 0; i < 5; ++i)
    bb::test::write_file(from + "/empty" + std::to_string(i), "");
  auto counted = bb::harvest_jit_cache("", from, dir / "store2", small);
  CHECK(counted.files == 3);
  CHECK(counted.stopped == "the entry would hold more than 3 files");
  fs::create_directories(from + "/a/b/c/d");
  bb::test::write_file(from + "/a/b/c/d/deep", "deep");
  bb::test::write_file(from + "/a/b/shallow", "shallow");
  small.entry_files = 100;
  small.depth = 2;
  CHECK(bb::harvest_jit_cache("", from + "/a", dir / "store3", small).files == 1);
  CHECK(bb::test::read_file(dir / "store3/b/shallow") == "shallow");
  CHECK(!fs::exists(dir / "store3/b/c/d/deep"));

  // Nothing is kept while the disk is short of room.
  small.free_bytes = UINT64_MAX;
  auto refused = bb::harvest_jit_cache("", from, dir / "store4", small);
  CHECK(refused.files == 0);
  CHECK(refused.stopped.find("free") != std::string::npos);
}

TEST_CASE("seeding a runner's JIT folder empties it, then copies the entry", "[artefacts]") {
  bb::test::temp_dir dir;
  fs::create_directories(dir / "store/k/triton/abc");
  bb::test::write_file(dir / "store/k/triton/abc/kernel.cubin", "cubin");
  fs::create_directories(dir / "jit/k");
  bb::test::write_file(dir / "jit/k/planted.cubin", "left by another kernel");
  CHECK(bb::seed_jit_folder(dir / "store/k", dir / "jit/k").empty());
  CHECK(bb::test::read_file(dir / "jit/k/triton/abc/kernel.cubin") == "cubin");
  CHECK(!fs::exists(dir / "jit/k/planted.cubin"));
  // An entry not kept yet: an empty folder.
  CHECK(bb::seed_jit_folder(dir / "store/none", dir / "jit/n").empty());
  CHECK(fs::is_directory(dir / "jit/n"));
  CHECK(fs::is_empty(dir / "jit/n"));
}
