#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include <sys/wait.h>
#include <unistd.h>

#include "results/run_lock.hpp"
#include "support.hpp"

using bb::run_lock;

TEST_CASE("a run folder has one lock holder, and the refusal names its pid and command", "[results]") {
  bb::test::temp_dir dir;
  auto run = dir / "runs/run1"; // made by the lock
  run_lock first;
  REQUIRE(first.acquire(run, "bbcluster --suite smoke --log-dir run1") == "");
  CHECK(first.held());
  CHECK(std::filesystem::is_directory(run));
  CHECK(bb::test::read_file(run + "/.lock")
        == "pid " + std::to_string(::getpid()) + "\ncommand bbcluster --suite smoke --log-dir run1\n");

  // Another open of the file is another holder, even in this process.
  run_lock second;
  auto why = second.acquire(run, "bbcluster --resume " + run);
  CHECK_FALSE(second.held());
  CHECK(why == run + " is in use by another sweep (pid " + std::to_string(::getpid())
                 + ": bbcluster --suite smoke --log-dir run1): one sweep per run folder; wait for it "
                   "to end, or give another --log-dir");

  // Moved, it stays held; released, the folder is free.
  run_lock moved = std::move(first);
  CHECK(moved.held());
  CHECK_FALSE(second.acquire(run, "again").empty());
  moved.release();
  CHECK(second.acquire(run, "bbcluster --resume " + run) == "");
  CHECK(bb::test::read_file(run + "/.lock")
        == "pid " + std::to_string(::getpid()) + "\ncommand bbcluster --resume " + run + "\n");
}

TEST_CASE("a folder the lock made goes with it when nothing else was written there", "[results]") {
  bb::test::temp_dir dir;
  {
    run_lock refused_early;
    REQUIRE(refused_early.acquire(dir / "unused", "x") == "");
  }
  CHECK_FALSE(std::filesystem::exists(dir / "unused"));
  {
    run_lock used;
    REQUIRE(used.acquire(dir / "used", "x") == "");
    bb::test::write_file(dir / "used/sweep.json", "{}");
  }
  CHECK(std::filesystem::exists(dir / "used/sweep.json"));
  // A folder that was there before stays, even empty.
  std::filesystem::create_directories(dir / "given");
  {
    run_lock given;
    REQUIRE(given.acquire(dir / "given", "x") == "");
  }
  CHECK(std::filesystem::exists(dir / "given/.lock"));
}

TEST_CASE("the lock of a killed process is free at once", "[results]") {
  bb::test::temp_dir dir;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t holder = ::fork();
  if (holder == 0) {
    run_lock lock;
    bool ok = lock.acquire(dir.path, "holder").empty();
    char c = ok ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  run_lock mine;
  auto why = mine.acquire(dir.path, "me");
  CHECK_THAT(why, Catch::Contains("(pid " + std::to_string(holder) + ": holder)"));
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  CHECK(mine.acquire(dir.path, "me") == "");
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("a run folder that cannot be made is an error naming it", "[results]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "file", "not a folder");
  run_lock lock;
  CHECK_THAT(lock.acquire(dir / "file/run", "x"), Catch::StartsWith("cannot create " + dir / "file/run"));
  CHECK_FALSE(lock.held());
}
