#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

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

TEST_CASE("the store stays under its bound: the entries used least recently go, never the one in use",
          "[artefacts]") {
  bb::test::temp_dir dir;
  auto store = dir / "store";
  bb::jit_bounds roomy;
  roomy.free_bytes = 0;
  // Four kernels' entries of 1000 bytes each, harvested as the evaluator does, used in turn.
  std::vector<std::string> entries;
  auto now = fs::file_time_type::clock::now();
  for (char c : {'a', 'b', 'c', 'd'}) {
    auto name = std::string(32, c);
    auto from = dir / ("runner/" + name);
    fs::create_directories(from + "/triton");
    bb::test::write_file(from + "/triton/kernel.cubin", std::string(1000, c));
    auto entry = store + "/" + name;
    REQUIRE(bb::harvest_jit_cache("", from, entry, roomy).entry_bytes == 1000);
    CHECK(bb::test::read_file(entry + ".bytes") == "1000\n");
    fs::last_write_time(entry, now - std::chrono::hours(10 - (c - 'a')));
    entries.push_back(entry);
  }
  // Without a record, an entry's bytes are counted from its files.
  fs::remove(entries[3] + ".bytes");
  CHECK(bb::jit_entry_bytes(entries[3]) == 1000);
  // Neither a folder that is not an entry nor another's file counts; a trim that ended halfway
  // is finished.
  fs::create_directories(store + "/notes");
  bb::test::write_file(store + "/notes/big", std::string(5000, 'x'));
  fs::create_directories(store + "/" + std::string(32, 'e') + ".trim77");

  // Under the bound: nothing goes.
  auto none = bb::trim_jit_store(store, 4000);
  CHECK(none.entries == 0);
  CHECK(none.held == 4000);
  CHECK(!fs::exists(store + "/" + std::string(32, 'e') + ".trim77"));

  // Over it: the oldest go first, but not the entry in use (a, the oldest of all).
  auto t = bb::trim_jit_store(store, 2500, entries[0]);
  CHECK(t.entries == 2);
  CHECK(t.bytes == 2000);
  CHECK(t.held == 2000);
  CHECK(fs::exists(entries[0]));
  CHECK(!fs::exists(entries[1]));
  CHECK(!fs::exists(entries[1] + ".bytes"));
  CHECK(!fs::exists(entries[2]));
  CHECK(fs::exists(entries[3]));
  CHECK(fs::exists(store + "/notes/big"));

  // Using an entry makes it the newest: d, touched, outlives a, now the oldest.
  fs::last_write_time(entries[3], now - std::chrono::hours(20));
  bb::touch_jit_entry(entries[3]);
  CHECK(fs::last_write_time(entries[3]) > now - std::chrono::minutes(1));
  auto again = bb::trim_jit_store(store, 1000);
  CHECK(again.entries == 1);
  CHECK(!fs::exists(entries[0]));
  CHECK(fs::exists(entries[3]));
}

TEST_CASE("FlagGems' tuning databases are kept whole, replaced when changed, never mid-transaction",
          "[artefacts]") {
  bb::test::temp_dir dir;
  auto from = dir / "runner/flaggems/config_cache";
  auto to = dir / "store/flaggems/local_slot0";
  fs::create_directories(from + "/deeper");
  fs::create_directories(dir / "outside");
  bb::test::write_file(from + "/TunedConfig_H100_triton_3_5.db", "tuned v1");
  bb::test::write_file(from + "/notes.db", "not FlagGems' name");
  bb::test::write_file(from + "/TunedConfig_a b.db", "a name with a space");
  bb::test::write_file(from + "/deeper/TunedConfig_deep.db", "below the folder");
  bb::test::write_file(dir / "outside/secret.db", "secret");
  fs::create_symlink(dir / "outside/secret.db", from + "/TunedConfig_linked.db");

  auto h = bb::harvest_tuning("", from, to, 1 << 20, 0);
  CHECK(h.files == 1);
  CHECK(h.bytes == 8);
  CHECK(h.stopped.empty());
  CHECK(bb::test::read_file(to + "/TunedConfig_H100_triton_3_5.db") == "tuned v1");
  CHECK(!fs::exists(fs::symlink_status(to + "/TunedConfig_linked.db")));
  CHECK(!fs::exists(to + "/notes.db"));
  CHECK(!fs::exists(to + "/TunedConfig_a b.db"));
  CHECK(!fs::exists(to + "/deeper"));
  CHECK(!fs::exists(to + "/TunedConfig_deep.db"));
  // Unchanged since: passed over.
  CHECK(bb::harvest_tuning("", from, to, 1 << 20, 0).files == 0);

  // A database being written (its journal beside it) waits for a later harvest.
  bb::test::write_file(from + "/TunedConfig_H100_triton_3_5.db", "tuned v2, more rows");
  bb::test::write_file(from + "/TunedConfig_H100_triton_3_5.db-journal", "journal");
  CHECK(bb::harvest_tuning("", from, to, 1 << 20, 0).files == 0);
  CHECK(bb::test::read_file(to + "/TunedConfig_H100_triton_3_5.db") == "tuned v1");
  fs::remove(from + "/TunedConfig_H100_triton_3_5.db-journal");
  CHECK(bb::harvest_tuning("", from, to, 1 << 20, 0).files == 1);
  CHECK(bb::test::read_file(to + "/TunedConfig_H100_triton_3_5.db") == "tuned v2, more rows");
  size_t files = 0;
  for (auto& e : fs::directory_iterator(to))
    files += e.is_regular_file();
  CHECK(files == 1); // no temporary file left beside it

  // Bounds: a database above the bound is left out and said; nothing while the disk is short.
  bb::test::write_file(from + "/TunedConfig_H100_triton_3_5.db", std::string(2000, 'x'));
  auto big = bb::harvest_tuning("", from, to, 1000, 0);
  CHECK(big.files == 0);
  CHECK(big.stopped == "TunedConfig_H100_triton_3_5.db holds more than 1000 bytes");

  auto full = bb::harvest_tuning("", from, to, 1 << 20, UINT64_MAX);
  CHECK(full.files == 0);
  CHECK(full.stopped.find("free") != std::string::npos);
  // A new database past the folder's count of them is left out and said; the one it holds,
  // changed, is still replaced.
  bb::test::write_file(from + "/TunedConfig_H200_triton_3_5.db", "another card's");
  auto many = bb::harvest_tuning("", from, to, 1 << 20, 0, 1);
  CHECK(many.files == 1);
  CHECK(many.stopped == "the slot's folder holds 1 databases already");
  CHECK(!fs::exists(to + "/TunedConfig_H200_triton_3_5.db"));
  CHECK(bb::test::read_file(to + "/TunedConfig_H100_triton_3_5.db") == std::string(2000, 'x'));
  // A link on the way to the folder is not followed.
  fs::create_directories(dir / "runner2/flaggems");
  fs::create_directory_symlink(dir / "outside", dir / "runner2/flaggems/config_cache");
  CHECK(bb::harvest_tuning("", dir / "runner2/flaggems/config_cache", dir / "store/l", 1 << 20, 0).files == 0);
  CHECK(!fs::exists(dir / "store/l/secret.db"));
}
