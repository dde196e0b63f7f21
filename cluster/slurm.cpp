#include "cluster/slurm.hpp"

#include <cctype>
#include <sstream>
#include <utility>

extern char** environ;

namespace bb {

namespace {

// Slurm's own bound on one range (MAX_RANGE in hostlist.c); also bounds the whole list.
constexpr uint64_t max_hosts = 1 << 20;

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

bool is_separator(char c) {
  return c == ',' || std::isspace(static_cast<unsigned char>(c));
}

// Parses the digits at `pos` (at most 18 of them); false when there are none.
bool read_number(const std::string& s, size_t& pos, uint64_t& value, size_t& width) {
  size_t b = pos;
  while (pos < s.size() && is_digit(s[pos]) && pos - b < 18)
    ++pos;
  width = pos - b;
  if (width > 0)
    value = std::stoull(s.substr(b, width));
  return width > 0;
}

std::string found(const std::string& s, size_t pos) {
  return "expected a number, found " + (pos < s.size() ? "'" + s.substr(pos, 1) + "'"
                                                       : std::string("the end"));
}

bool fail(std::string& why, size_t& at, std::string what, size_t where) {
  why = std::move(what);
  at = where;
  return false;
}

// Expands the well-bracketed name s[b, e) into `out`; on error sets `why` and `at`.
bool expand_name(const std::string& s, size_t b, size_t e, std::vector<std::string>& out,
                 std::string& why, size_t& at) {
  auto open = s.find('[', b);
  if (open >= e) {
    out.push_back(s.substr(b, e - b));
    return true;
  }
  auto close = s.find(']', open);
  std::vector<std::string> numbers;
  for (size_t pos = open + 1; pos <= close; ++pos) {
    uint64_t lo = 0, hi = 0;
    size_t width = 0, hi_width = 0, lo_at = pos;
    if (!read_number(s, pos, lo, width))
      return fail(why, at, found(s, pos), pos);
    hi = lo;
    if (s[pos] == '-' && !read_number(s, ++pos, hi, hi_width))
      return fail(why, at, found(s, pos), pos);
    if (s[pos] != ',' && s[pos] != ']')
      return fail(why, at, "expected ',', '-' or ']', found '" + s.substr(pos, 1) + "'", pos);
    if (hi < lo)
      return fail(why, at, "range " + s.substr(lo_at, pos - lo_at) + " goes down", lo_at);
    if (hi - lo + 1 + numbers.size() > max_hosts)
      return fail(why, at, "more than " + std::to_string(max_hosts) + " hosts", lo_at);
    for (auto v = lo; v <= hi; ++v) {
      auto digits = std::to_string(v);
      numbers.push_back(std::string(width > digits.size() ? width - digits.size() : 0, '0')
                        + digits);
    }
  }
  std::vector<std::string> tails;
  if (!expand_name(s, close + 1, e, tails, why, at))
    return false;
  if (numbers.size() * tails.size() + out.size() > max_hosts)
    return fail(why, at, "more than " + std::to_string(max_hosts) + " hosts", b);
  auto prefix = s.substr(b, open - b);
  for (auto& n : numbers)
    for (auto& t : tails)
      out.push_back(prefix + n + t);
  return true;
}

// Counts the non-empty entries of a comma list.
uint32_t count_entries(const std::string& list) {
  std::istringstream in(list);
  uint32_t n = 0;
  for (std::string entry; std::getline(in, entry, ',');)
    n += !entry.empty();
  return n;
}

bool parse_count(const std::string& s, uint32_t& n) {
  if (s.empty() || s.size() > 6)
    return false;
  for (char c : s)
    if (!is_digit(c))
      return false;
  n = static_cast<uint32_t>(std::stoul(s));
  return true;
}

// `4`, `gpu:4`, `h100:4` or `gpu:h100:4`; a comma list of those is summed.
bool parse_gpus_per_node(const std::string& s, uint32_t& n) {
  std::istringstream in(s);
  n = 0;
  for (std::string entry; std::getline(in, entry, ',');) {
    uint32_t part = 0;
    if (!parse_count(entry.substr(entry.rfind(':') + 1), part))
      return false;
    n += part;
  }
  return true;
}

} // namespace

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos)
      env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::vector<std::string> expand_nodelist(const std::string& list, std::string& error) {
  std::vector<std::string> out;
  std::string why;
  size_t at = 0, start = 0, open = std::string::npos;
  // Checks the brackets while cutting the list at separators outside them.
  for (size_t i = 0; i <= list.size() && why.empty(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[' && open != std::string::npos)
      fail(why, at, "'[' inside brackets", i);
    else if (c == '[')
      open = i;
    else if (c == ']' && open == std::string::npos)
      fail(why, at, "']' without '['", i);
    else if (c == ']')
      open = std::string::npos;
    else if (i == list.size() && open != std::string::npos)
      fail(why, at, "'[' is never closed", open);
    else if (is_separator(c) && open == std::string::npos) {
      if (i > start)
        expand_name(list, start, i, out, why, at);
      start = i + 1;
    }
  }
  if (why.empty())
    return out;
  error = "node list '" + list + "', character " + std::to_string(at + 1) + ": " + why;
  return {};
}

std::optional<slurm_allocation> read_slurm_allocation(
  const std::map<std::string, std::string>& env, std::string& error) {
  auto get = [&](const std::string& name) -> const std::string* {
    auto it = env.find(name);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
  };
  auto job_id = get("SLURM_JOB_ID");
  if (!job_id) {
    error = "not inside a Slurm allocation (no SLURM_JOB_ID): run bbcluster under salloc or "
            "sbatch";
    return std::nullopt;
  }
  slurm_allocation out;
  out.job_id = *job_id;
  std::string list_var = get("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  auto list = get(list_var);
  if (!list) {
    error = "Slurm job " + out.job_id + " names no nodes (no SLURM_JOB_NODELIST)";
    return std::nullopt;
  }
  std::string why;
  out.nodes = expand_nodelist(*list, why);
  if (out.nodes.empty()) {
    error = list_var + ": " + (why.empty() ? "no nodes in '" + *list + "'" : why);
    return std::nullopt;
  }
  if (auto on_node = get("SLURM_GPUS_ON_NODE")) {
    if (!parse_count(*on_node, out.gpus_per_node)) {
      error = "SLURM_GPUS_ON_NODE is '" + *on_node + "', not a GPU count";
      return std::nullopt;
    }
  } else if (auto per_node = get("SLURM_GPUS_PER_NODE")) {
    if (!parse_gpus_per_node(*per_node, out.gpus_per_node)) {
      error = "SLURM_GPUS_PER_NODE is '" + *per_node
              + "', expected N, gpu:N, TYPE:N or gpu:TYPE:N";
      return std::nullopt;
    }
  } else if (auto job_gpus = get("SLURM_JOB_GPUS")) {
    out.gpus_per_node = count_entries(*job_gpus);
  } else if (auto visible = get("CUDA_VISIBLE_DEVICES")) {
    // Slurm sets NoDevFiles when the job was given no GPU.
    out.gpus_per_node = *visible == "NoDevFiles" ? 0 : count_entries(*visible);
  }
  return out;
}

} // namespace bb
