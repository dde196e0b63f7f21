// Watching, stopping and resuming a long campaign with the real programs: the progress block
// on a pseudo-terminal and plain lines without one, SIGINT and SIGTERM mid-sweep, the resume
// command a stop prints, refusals of a resume whose conditions changed, and report.html as
// headless Chromium renders it (screenshots kept under build/test-artefacts/).

#include <catch2/catch.hpp>

#include "skip.hpp"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <pty.h>
#include <set>
#include <sstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "programs.hpp"

using nlohmann::json;
using bb::test::run;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string artefacts = BB_BIN_DIR "/../test-artefacts";

// Eight cheap operators of the real traces, one input each, with short timing.
std::vector<std::string> sweep_args(const std::string& log_dir, const std::string& config = BB_SOURCE_DIR "/tests/fast.toml") {
  return {"--suite", "torchbench", "--data", BB_TRACES_DIR "/hf_train", "--ops",
          "relu.default,tanh.default,neg.default,add.Tensor,mul.Tensor,gelu.default,sub.Tensor,div.Tensor",
          "--topn", "1", "--config", config, "--log-dir", log_dir};
}
constexpr size_t sweep_ops = 8;

// bbcluster started in the background, its output in files of `dir`.
pid_t start(const bb::test::temp_dir& dir, const std::vector<std::string>& args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen((dir / "stdout").c_str(), "w", stdout);
    std::freopen((dir / "stderr").c_str(), "w", stderr);
    std::vector<char*> argv{const_cast<char*>(bbcluster.c_str())};
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bbcluster.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

size_t finished_in(const std::string& journal) {
  if (!std::filesystem::exists(journal))
    return 0;
  size_t n = 0;
  std::istringstream in(bb::test::read_file(journal));
  for (std::string line; std::getline(in, line);)
    n += line.find("\"event\":\"job_finished\"") != std::string::npos;
  return n;
}

// Waits until the journal has `n` finished jobs; false after `seconds`.
bool wait_finished(const std::string& journal, size_t n, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (finished_in(journal) >= n)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Each record's verdict by (op, args, test type): is_correct or successfully_ran.
std::map<std::string, bool> verdicts(const std::string& full_results) {
  std::map<std::string, bool> out;
  for (auto& row : json::parse(bb::test::read_file(full_results))) {
    auto key = row["op_name"].get<std::string>() + " " + row["args"].get<std::string>() + " "
               + row["test_type"].get<std::string>();
    INFO(key);
    CHECK(out.count(key) == 0); // no duplicates
    out[key] = row["test_type"] == "correctness" ? row["is_correct"].get<bool>()
                                                 : row["successfully_ran"].get<bool>();
  }
  return out;
}

// The line after "Go on with:" in bbcluster's stderr.
std::string printed_resume_command(const std::string& err) {
  auto at = err.find("Go on with:\n");
  if (at == std::string::npos)
    return "";
  auto start = err.find_first_not_of(' ', at + 12);
  return err.substr(start, err.find('\n', start) - start);
}

bool have_chromium() {
  return std::system("command -v chromium >/dev/null 2>&1") == 0;
}

// Counts the pixels of a PNG whose colour is `rgb` (within a small tolerance), by a short
// Python program (zlib and struct only); -1 when the PNG cannot be read.
long count_pixels(const std::string& png, const std::string& rgb) {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "count.py", R"(import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
want = tuple(int(sys.argv[2][i:i + 2], 16) for i in (0, 2, 4))
pos, idat, w, h, ctype = 8, b'', 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
bpp = {2: 3, 6: 4}[ctype]
raw, stride, prev, count, i = zlib.decompress(idat), w * bpp, bytearray(w * bpp), 0, 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        if all(abs(line[x + k] - want[k]) <= 8 for k in range(3)): count += 1
    prev = line
print(count)
)");
  auto r = run(dir, "python3 " + dir / "count.py" + " " + png + " " + rgb);
  return r.status == 0 ? std::atol(r.out.c_str()) : -1;
}

// Renders `html` in headless Chromium: its DOM after scripts ran, and a screenshot at `png`.
std::string render(const std::string& html, const std::string& png) {
  bb::test::temp_dir dir;
  std::filesystem::create_directories(std::filesystem::path(png).parent_path());
  auto flags = std::string(" --headless --no-sandbox --disable-gpu --hide-scrollbars "
                           "--user-data-dir=") + dir / "profile" + " --window-size=1280,1600 ";
  auto shot = run(dir, "timeout 120 chromium" + flags + "--screenshot=" + png + " file://" + html);
  INFO(shot.err);
  CHECK(std::filesystem::exists(png));
  auto dom = run(dir, "timeout 120 chromium" + flags + "--dump-dom file://" + html);
  return dom.out;
}

} // namespace

TEST_CASE("on a terminal the progress block redraws in place with the right counts",
          "[integration]") {
  bb::test::temp_dir dir;
  auto args = sweep_args(dir / "run");
  int master = -1;
  winsize size{40, 120, 0, 0};
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &size);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(bbcluster.c_str())};
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bbcluster.c_str(), argv.data());
    ::_exit(127);
  }
  std::string screen;
  char buf[4096];
  for (;;) {
    auto n = ::read(master, buf, sizeof(buf));
    if (n <= 0)
      break; // EIO once the child is gone
    screen.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO(screen);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The block is drawn at the start, erased (cursor up, clear to the end) and drawn again.
  CHECK_THAT(screen, Catch::Contains("bbcluster: 0/8 operators, 0/8 inputs"));
  CHECK_THAT(screen, Catch::Contains("\x1b[J"));
  size_t redraws = 0;
  for (auto at = screen.find("A\x1b[J"); at != std::string::npos; at = screen.find("A\x1b[J", at + 1))
    ++redraws;
  CHECK(redraws >= sweep_ops);
  CHECK_THAT(screen, Catch::Contains("  local: 1/1 slots busy:"));
  // The last block stays, with every operator and input counted, above the scores.
  auto last = screen.rfind("bbcluster: 8/8 operators, 8/8 inputs");
  REQUIRE(last != std::string::npos);
  CHECK(screen.find("\x1b[J", last) == std::string::npos);
  CHECK(screen.find("correctness score", last) != std::string::npos);
  // Log lines are printed above the block: each finished operator's line is there.
  CHECK_THAT(screen, Catch::Contains("reporter: [8/8]"));
}

TEST_CASE("without a terminal, progress is a plain line at the interval, and --quiet has none",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "often.toml", bb::test::read_file(BB_SOURCE_DIR "/tests/fast.toml")
                                             + "[progress]\ninterval_s = 0.2\n");
  auto command = [&](const std::string& log_dir) {
    std::string line = bbcluster;
    for (auto& a : sweep_args(log_dir, dir / "often.toml"))
      line += " " + a;
    return line;
  };
  auto r = run(dir, command(dir / "run"));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find('\x1b') == std::string::npos);
  size_t lines = 0;
  for (auto at = r.err.find("bbcluster: progress: "); at != std::string::npos;
       at = r.err.find("bbcluster: progress: ", at + 1))
    ++lines;
  CHECK(lines >= 2);
  // One progress line matched, not the whole log: std::regex recurses per character and runs
  // out of stack on a log of tens of kilobytes.
  auto first = r.err.find("bbcluster: progress: ");
  REQUIRE(first != std::string::npos);
  auto line = r.err.substr(first, r.err.find('\n', first) - first);
  CHECK_THAT(line, Catch::Matches("bbcluster: progress: [0-8]/8 operators, [0-8]/8 inputs, [0-9.]+ inputs/s, "
                                  "elapsed [0-9:]+, .*slots busy; failures: .*"));
  auto quiet = run(dir, command(dir / "quiet") + " --quiet");
  INFO(quiet.err);
  REQUIRE(quiet.status == 0);
  CHECK(quiet.err.find("progress: ") == std::string::npos);
}

TEST_CASE("SIGINT mid-sweep: partial reports, exit 130, and the printed command resumes to the "
          "verdicts of an uninterrupted sweep", "[integration]") {
  bb::test::temp_dir whole, dir;
  auto full = run(whole, [&] {
    std::string line = bbcluster;
    for (auto& a : sweep_args(whole / "run"))
      line += " " + a;
    return line;
  }());
  INFO(full.err);
  REQUIRE(full.status == 0);
  auto expected = verdicts(whole / "run/full_results.json");
  REQUIRE(expected.size() == 2 * sweep_ops);

  auto pid = start(dir, sweep_args(dir / "run"));
  REQUIRE(wait_finished(dir / "run/results.jsonl", 1, 120));
  // Mid-sweep, report.html already holds what finished, and reloads itself.
  auto growing = bb::test::read_file(dir / "run/report.html");
  CHECK_THAT(growing, Catch::Contains("location.reload()"));
  CHECK_THAT(bb::test::read_file(dir / "run/OVERALL_SUMMARY.md"), Catch::Contains("## Running"));
  ::kill(pid, SIGINT);
  auto status = bb::test::wait_exit(pid, 120);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err);
  CHECK(status == 130);
  CHECK_THAT(err, Catch::Contains("SIGINT received: no new jobs"));
  auto done = finished_in(dir / "run/results.jsonl");
  CHECK(done >= 1);
  CHECK(done < sweep_ops);
  auto md = bb::test::read_file(dir / "run/OVERALL_SUMMARY.md");
  CHECK_THAT(md, Catch::Contains("## Partial"));
  CHECK_THAT(md, Catch::Contains(std::to_string(done) + " of 8 operators are in"));
  CHECK_THAT(bb::test::read_file(dir / "run/report.html"), Catch::Contains("Partial: the sweep was stopped"));
  CHECK(json::parse(bb::test::read_file(dir / "run/full_results.json")).size() == 2 * done);
  CHECK_THAT(bb::test::read_file(dir / "stdout"), Catch::StartsWith("correctness score"));

  auto command = printed_resume_command(err);
  CHECK(command == bbcluster + " --resume " + dir / "run");
  auto resumed = run(dir, "cd / && " + command);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(verdicts(dir / "run/full_results.json") == expected);
  auto lines = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
  std::set<std::string> ops;
  for (auto& l : lines)
    ops.insert(l["op_name"].get<std::string>());
  CHECK(lines.size() == sweep_ops);
  CHECK(ops.size() == sweep_ops);
  auto html = bb::test::read_file(dir / "run/report.html");
  CHECK_THAT(html, Catch::Contains("Finished: 8 of 8 operators"));
  CHECK_THAT(html, !Catch::Contains("location.reload()"));
}

TEST_CASE("a second signal cuts the grace short: the runner is killed, its job left for resume, "
          "SIGTERM exits 143", "[integration]") {
  bb::test::temp_dir dir;
  // One long job: many timed calls without a budget (and no bound on a shard, which would cut
  // the operator's correctness and performance inputs apart).
  bb::test::write_file(dir / "slow.toml", "[timing]\ncpu_warmup = 0\ncpu_runs = 2000000\ncpu_max_seconds = 0.0\n"
                                          "[scheduler]\nmax_shard_s = 0\n");
  auto pid = start(dir, {"--suite", "smoke", "--log-dir", dir / "run", "--config", dir / "slow.toml"});
  std::vector<pid_t> runners;
  for (int i = 0; i < 600 && runners.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    runners = bb::test::descendants_named(pid, "bbrunner");
  }
  REQUIRE(runners.size() == 1);
  // The runner has the job once its scratch folder is made (a loaded machine starts it slowly).
  auto scratch = dir / "run/scratch/slot0/job1_1";
  for (int i = 0; i < 600 && !std::filesystem::exists(scratch); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(std::filesystem::exists(scratch));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto started = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGTERM);
  auto status = bb::test::wait_exit(pid, 60);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err);
  CHECK(status == 143);
  // Long before the job (or the 60 s grace) would have ended.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
  CHECK_THAT(err, Catch::Contains("stopping now"));
  // The runner is gone (or a zombie no one reaps in this container).
  auto stat = bb::test::read_file("/proc/" + std::to_string(runners[0]) + "/stat");
  CHECK((stat.empty() || stat.find(") Z ") != std::string::npos));
  CHECK(finished_in(dir / "run/results.jsonl") == 0);
  CHECK_THAT(bb::test::read_file(dir / "run/OVERALL_SUMMARY.md"), Catch::Contains("0 of 1 operators are in"));
  CHECK_THAT(err, Catch::Contains("--resume " + dir / "run"));
}

TEST_CASE("a resume whose conditions changed is refused, naming each change", "[integration]") {
  bb::test::temp_dir dir;
  auto kernels = dir / "kernels";
  std::filesystem::create_directories(kernels + "/relu__default");
  auto kernel = kernels + "/relu__default/relu__default_implementation_v1.py";
  bb::test::write_file(kernel, "import torch\n\ndef relu__default_kernel_impl(x):\n    return torch.relu(x)\n");
  bb::test::write_file(dir / "timing.toml", "[timing]\ncpu_warmup = 1\ncpu_runs = 5\ncpu_max_seconds = 0.5\n");
  auto first = run(dir, "cd " + dir.path + " && " + bbcluster + " --suite smoke --backend directory "
                        "--ops-directory kernels --config timing.toml --log-dir run");
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto record = json::parse(bb::test::read_file(dir / "run/sweep.json"));
  CHECK(record["conditions"]["timing.cpu_runs"] == "5");
  CHECK(record["conditions"]["torch version"].get<std::string>().rfind("2.", 0) == 0);
  CHECK(record["conditions"]["device"] == "cpu");

  // Unchanged: the resume runs (nothing is left to run).
  auto same = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(same.err);
  CHECK(same.status == 0);

  bb::test::write_file(dir / "timing.toml", "[timing]\ncpu_warmup = 1\ncpu_runs = 6\ncpu_max_seconds = 0.5\n");
  bb::test::write_file(kernel, "import torch\n\ndef relu__default_kernel_impl(x):\n    return torch.clamp(x, min=0)\n");
  auto refused = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(refused.err);
  CHECK(refused.status == 2);
  CHECK_THAT(refused.err, Catch::Contains("cannot resume"));
  CHECK_THAT(refused.err, Catch::Contains("timing.cpu_runs: 5 then, 6 now"));
  CHECK_THAT(refused.err, Catch::Contains("kernel kernels/relu__default/relu__default_implementation_v1.py: "));
  CHECK_THAT(refused.err, Catch::Contains("--resume-anyway"));
  auto anyway = run(dir, bbcluster + " --resume " + dir / "run" + " --resume-anyway");
  INFO(anyway.err);
  CHECK(anyway.status == 0);
  CHECK_THAT(anyway.err, Catch::Contains("timing.cpu_runs: 5 then, 6 now"));
}

TEST_CASE("report.html in headless Chromium lists every operator and draws the chart, mid-sweep "
          "and at the end", "[integration]") {
  if (!have_chromium()) {
    BB_SKIP("no chromium on this machine (scripts/test.sh installs it): report.html rendering skipped");
  }
  bb::test::temp_dir dir;
  // report.html rewritten after every operator, so the copy below holds each journaled one.
  bb::test::write_file(dir / "each.toml", bb::test::read_file(BB_SOURCE_DIR "/tests/fast.toml")
                                            + "[progress]\nreports_interval_s = 0\n");
  auto pid = start(dir, sweep_args(dir / "run", dir / "each.toml"));
  REQUIRE(wait_finished(dir / "run/results.jsonl", 2, 120));
  // Rendered from a copy taken mid-sweep (the original goes on growing). The reporter journals
  // an operator before it rewrites the page, so the copy is taken once the page's text names
  // every operator the journal held before it (a copy taken at once can precede that rewrite).
  auto mid_done = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
  auto names_all = [&](const std::string& text) {
    for (auto& l : mid_done)
      if (text.find("<td>" + l["op_name"].get<std::string>().substr(5) + "</td>") == std::string::npos)
        return false;
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    std::filesystem::copy_file(dir / "run/report.html", dir / "mid.html",
                               std::filesystem::copy_options::overwrite_existing);
    if (names_all(bb::test::read_file(dir / "mid.html")) || std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto mid = render(dir / "mid.html", artefacts + "/report-mid-sweep.png");
  CHECK_THAT(mid, Catch::Contains("Running: "));
  for (auto& l : mid_done) {
    auto op = l["op_name"].get<std::string>().substr(5);
    CHECK_THAT(mid, Catch::Contains("<td>" + op + "</td>"));
  }
  REQUIRE(bb::test::wait_exit(pid, 300) == 0);
  auto dom = render(dir / "run/report.html", artefacts + "/report.png");
  for (auto op : {"relu.default", "tanh.default", "neg.default", "add.Tensor", "mul.Tensor", "gelu.default",
                  "sub.Tensor", "div.Tensor"})
    CHECK_THAT(dom, Catch::Contains(std::string("<td>") + op + "</td>"));
  // The sorting script ran: it counts the rows it shows.
  CHECK_THAT(dom, Catch::Contains("<span id=\"shown\">8 of 8 operators</span>"));
  size_t bars = 0;
  for (auto at = dom.find("<g class=\"bar\">"); at != std::string::npos; at = dom.find("<g class=\"bar\">", at + 1))
    ++bars;
  CHECK(bars == 8);
  // The chart's bars and the histogram are on the screenshot: the colour of correct operators.
  CHECK(count_pixels(artefacts + "/report.png", "2e7d32") > 200);
}
