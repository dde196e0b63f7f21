#include "cluster/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <toml++/toml.h>
#include <unistd.h>

#include "artefacts/reference_cache.hpp"
#include "bb_build_config.hpp"
#include "messages/authoring.hpp"
#include "messages/errors.hpp"
#include "suite/args.hpp"
#include "suite/printable.hpp"

namespace bb {

namespace {

using setter = std::function<bool(const toml::node&)>;

template <class T>
setter bind(T& target) {
  return [&target](const toml::node& n) {
    if constexpr (std::is_same_v<T, double>) {
      if (auto v = n.value<double>(); v && (n.is_floating_point() || n.is_integer())) {
        target = *v;
        return true;
      }
      return false;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!n.is_boolean())
        return false;
      target = *n.value<bool>();
      return true;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (!n.is_integer())
        return false;
      target = *n.value<int64_t>();
      return true;
    } else {
      if (!n.is_string())
        return false;
      target = *n.value<std::string>();
      return true;
    }
  };
}

const char* type_name_of(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", x);
  return buf;
}

// Seconds a timeout or period may be at most: the evaluator passes milliseconds as an int.
constexpr double week_s = 7 * 24 * 3600.0;

/// What values a setting takes (messages/settings.def, RULE).
struct rule {
  enum kind_t { any, choices, bounded } kind = any;
  std::vector<std::string> options; ///< choices
  double lo = 0;
  bool lo_open = false;
  double hi = 0;
  const char* unit = ""; ///< "seconds", "GiB", ...; "" for a plain number
  const char* note = ""; ///< what a special value means ("0: never"); "" for none
};

// The rules messages/settings.def names.
rule any_text() {
  return {};
}
rule any_boolean() {
  return {};
}
rule choice(std::initializer_list<const char*> options) {
  rule r;
  r.kind = rule::choices;
  for (auto o : options)
    r.options.push_back(o);
  return r;
}
// The names of a named enum, in its order: the setting takes exactly that closed set.
template <class E>
rule choice_of() {
  rule r;
  r.kind = rule::choices;
  for (auto o : enum_names<E>::names)
    r.options.push_back(o);
  return r;
}
rule range(double lo, double hi, const char* unit = "", const char* note = "") {
  rule r;
  r.kind = rule::bounded;
  r.lo = lo;
  r.hi = hi;
  r.unit = unit;
  r.note = note;
  return r;
}
rule above(double lo, double hi, const char* unit = "", const char* note = "") {
  auto r = range(lo, hi, unit, note);
  r.lo_open = true;
  return r;
}
rule count(double lo, double hi, const char* note = "") {
  return range(lo, hi, "", note);
}
/// A timeout or period: (0, hi] seconds.
rule seconds(double hi = week_s) {
  return above(0, hi, "seconds");
}
/// A delay or budget that may be 0: [0, hi] seconds.
rule delay(double hi, const char* note = "") {
  return range(0, hi, "seconds", note);
}

std::string choice_text(const std::string& c) {
  return c.empty() ? "\"\"" : c;
}

// "a, b or c"
std::string options_text(const std::vector<std::string>& options) {
  std::string out;
  for (size_t i = 0; i < options.size(); ++i)
    out += (i == 0 ? "" : i + 1 == options.size() ? " or " : ", ") + choice_text(options[i]);
  return out;
}

// What a bounded setting must be: "an integer in [1, 1000]", "a finite number of seconds in (0, 604800] (0: never)".
std::string bounds_text(const rule& r, bool integer) {
  std::string what = integer ? "an integer" : "a finite number";
  if (*r.unit)
    what += std::string(" of ") + r.unit;
  what += std::string(" in ") + (r.lo_open ? "(" : "[") + number_text(r.lo) + ", " + number_text(r.hi) + "]";
  if (*r.note)
    what += std::string(" (") + r.note + ")";
  return what;
}

// `text` as a TOML basic string: "a \"b\"".
std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// `x` as a TOML float: Python's repr (shortest round-trip digits, "1.0", "0.005", "1e+308",
// "inf", "nan") is valid TOML.
std::string toml_float(double x) {
  return args::python_repr(x);
}

struct key_info {
  const char* key;
  setting_scope scope;
  const char* flag;
  const char* doc;
  const char* type;     ///< "string", "boolean", "integer" or "number"
  const char* expected; ///< "a string", "an integer", ...
  rule values;
  setter set;
  /// The value as TOML writes it.
  std::function<std::string()> get;
  /// The value as a reader sees it: a string as it is, any other value as TOML writes it.
  std::function<std::string()> shown;
  /// "" when the value set is allowed, else what it must be ("must be ..., not 1e+308").
  std::function<std::string()> check;
};

template <class T>
key_info entry(const char* key, T& target, rule values, setting_scope scope, const char* flag,
               const char* doc) {
  key_info k{key, scope, flag, doc, "", "", values, bind(target), {}, {}, {}};
  k.get = [&target] {
    if constexpr (std::is_same_v<T, std::string>) {
      return toml_string(target);
    } else if constexpr (std::is_same_v<T, double>) {
      return toml_float(target);
    } else {
      std::ostringstream out;
      out << toml::value<T>(target);
      return out.str();
    }
  };
  k.shown = [&target, get = k.get] {
    if constexpr (std::is_same_v<T, std::string>)
      return target;
    else
      return get();
  };
  if constexpr (std::is_same_v<T, std::string>) {
    k.type = "string";
    k.expected = "a string";
    if (values.kind == rule::choices)
      k.check = [&target, values]() -> std::string {
        for (auto& o : values.options)
          if (target == o)
            return "";
        return "must be " + options_text(values.options) + ", not '" + target + "'";
      };
  } else if constexpr (std::is_same_v<T, bool>) {
    k.type = "boolean";
    k.expected = "a boolean";
  } else {
    constexpr bool integer = std::is_same_v<T, int64_t>;
    k.type = integer ? "integer" : "number";
    k.expected = integer ? "an integer" : "a number";
    k.check = [&target, values]() -> std::string {
      auto v = static_cast<double>(target);
      if (std::isfinite(v) && (values.lo_open ? v > values.lo : v >= values.lo) && v <= values.hi)
        return "";
      return "must be " + bounds_text(values, integer) + ", not "
             + (integer ? std::to_string(static_cast<int64_t>(target)) : number_text(v));
    };
  }
  return k;
}

/// messages/settings.def, each key bound to its member of `s`, in the list's order.
std::vector<key_info> setting_list(settings& s) {
  return {
#define BB_SETTING(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)                           \
  entry(KEY, s.MEMBER, RULE, setting_scope::SCOPE, FLAG, DOC),
#define BB_RUNNER_SETTING(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)                    \
  entry(KEY, s.timing.MEMBER, RULE, setting_scope::SCOPE, FLAG, DOC),
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
  };
}

key_info* find_key(std::vector<key_info>& list, const std::string& key) {
  for (auto& k : list)
    if (key == k.key)
      return &k;
  return nullptr;
}

// Sets `k` from a TOML value; "" or why not (without the key's name).
std::string set_from(key_info& k, const toml::node& value) {
  if (!k.set(value))
    return std::string("must be ") + k.expected + ", not " + type_name_of(value);
  if (k.check)
    return k.check();
  return "";
}

// `text` as a TOML value ("5", "\"x\"", "true"); nullopt when it is none.
std::optional<toml::table> parse_value(const std::string& text) {
  try {
    return toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

} // namespace

std::string to_string(setting_scope s) {
  switch (s) {
    case setting_scope::coordinator: return "coordinator";
    case setting_scope::node: return "node";
    case setting_scope::sweep: return "sweep";
  }
  return "?";
}

std::vector<std::string> setting_names() {
  settings s;
  std::vector<std::string> out;
  for (auto& k : setting_list(s))
    out.push_back(k.key);
  return out;
}

std::vector<setting_doc> setting_docs() {
  settings s;
  std::vector<setting_doc> out;
  for (auto& k : setting_list(s)) {
    setting_doc d{k.key, k.type, k.get(), "", k.scope, k.flag, k.doc};
    if (k.values.kind == rule::choices)
      d.allowed = options_text(k.values.options);
    else if (k.values.kind == rule::bounded)
      d.allowed = bounds_text(k.values, d.type == "integer");
    else if (d.type == "boolean")
      d.allowed = "true or false";
    out.push_back(std::move(d));
  }
  return out;
}

std::string settings_toml() {
  std::string out = "# bbcluster settings. Every key is shown with its default. Load a file with --config FILE;\n"
                    "# --set KEY=VALUE and command-line flags override what it sets. An unknown key or a wrong\n"
                    "# type is an error. Made from messages/settings.def by `bbcluster settings toml`.\n";
  std::string section;
  for (auto& d : setting_docs()) {
    auto dot = d.key.find('.');
    auto sec = d.key.substr(0, dot);
    if (sec != section) {
      section = sec;
      out += "\n[" + section + "]\n";
    }
    std::istringstream lines(d.doc);
    for (std::string line; std::getline(lines, line);)
      out += line.empty() ? "#\n" : "# " + line + "\n";
    out += d.key.substr(dot + 1) + " = " + d.default_text + "\n";
  }
  return out;
}

std::string settings_markdown() {
  std::string out = "| key | default | values | scope | flag |\n|---|---|---|---|---|\n";
  for (auto& d : setting_docs()) {
    auto allowed = d.allowed.empty() ? "any " + d.type : d.allowed;
    out += "| `" + d.key + "` | `" + d.default_text + "` | " + allowed + " | " + to_string(d.scope)
           + " | " + (d.flag.empty() ? std::string() : "`" + std::string(d.flag) + "`") + " |\n";
  }
  return out;
}

caf::error set_setting(settings& s, const std::string& key, const std::string& value,
                       const std::string& origin) {
  settings copy = s;
  auto list = setting_list(copy);
  auto* k = find_key(list, key);
  if (!k)
    return make_error(errc::bad_config, origin + ": unknown key '" + key
                                          + "' (`bbcluster settings toml` lists every key)");
  auto parsed = parse_value(value);
  // A string key takes its value unquoted too: --set timing.timer=adaptive.
  if (std::string(k->type) == "string" && (!parsed || !(*parsed)["v"].is_string()))
    parsed = toml::table{{"v", value}};
  if (!parsed)
    return make_error(errc::bad_config, origin + ": key '" + key + "' must be " + k->expected
                                          + ", not '" + value + "'");
  if (auto why = set_from(*k, *(*parsed)["v"].node()); !why.empty())
    return make_error(errc::bad_config, origin + ": " + key + " " + why);
  s = copy;
  return {};
}

std::map<std::string, std::string> sweep_settings_of(const settings& s) {
  settings copy = s;
  std::map<std::string, std::string> out;
  for (auto& k : setting_list(copy))
    if (k.scope == setting_scope::sweep)
      out[k.key] = k.get();
  return out;
}

namespace {

bool is_runner_key(const std::string& key) {
  static const std::set<std::string> keys = {
#define BB_SETTING(KEY, ...)
#define BB_RUNNER_SETTING(KEY, ...) KEY,
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
  };
  return keys.count(key) > 0;
}

// The settings of scope sweep in `s` that `keep` takes, by key, as a reader sees them.
template <class Keep>
std::map<std::string, std::string> shown_sweep_settings(settings s, Keep keep) {
  std::map<std::string, std::string> out;
  for (auto& k : setting_list(s))
    if (k.scope == setting_scope::sweep && keep(std::string(k.key)))
      out[k.key] = k.shown();
  return out;
}

} // namespace

std::map<std::string, std::string> sweep_conditions_of(const settings& s) {
  auto out = shown_sweep_settings(s, [](const std::string&) { return true; });
  // What a result records of these, alike (checks.extra_inputs resolved for the backend).
  for (auto& [key, value] : result_settings_of(s.timing, s.job_timeout_s, s.call_timeout_s))
    out[key] = value;
  return out;
}

std::map<std::string, std::string> result_settings_of(const runner_options& o, double job_timeout_s,
                                                      double call_timeout_s) {
  settings s;
  s.timing = o;
  s.job_timeout_s = job_timeout_s;
  s.call_timeout_s = call_timeout_s;
  auto out = shown_sweep_settings(s, [](const std::string& key) {
    return is_runner_key(key) || key == "evaluator.job_timeout_s" || key == "evaluator.call_timeout_s";
  });
  out["checks.extra_inputs"] = o.extra_inputs ? "on" : "off";
  return out;
}

caf::error apply_sweep_settings(settings& s, const std::map<std::string, std::string>& values) {
  settings copy = s;
  auto list = setting_list(copy);
  for (auto& [key, text] : values) {
    auto* k = find_key(list, key);
    if (!k)
      return make_error(errc::bad_config, "unknown setting '" + key + "' (another bbcluster version?)");
    if (k->scope != setting_scope::sweep)
      return make_error(errc::bad_config, key + " is a " + to_string(k->scope)
                                            + " setting, which a coordinator does not send");
    auto parsed = parse_value(text);
    if (!parsed)
      return make_error(errc::bad_config, key + ": '" + text + "' is not a TOML value");
    if (auto why = set_from(*k, *(*parsed)["v"].node()); !why.empty())
      return make_error(errc::bad_config, key + " " + why);
  }
  s = copy;
  return {};
}

std::vector<std::string> settings_differences(const std::map<std::string, std::string>& sent,
                                              const std::map<std::string, std::string>& applied) {
  std::vector<std::string> out;
  for (auto& [key, value] : sent) {
    auto it = applied.find(key);
    if (it == applied.end())
      out.push_back(key + ": sent " + value + ", not applied");
    else if (it->second != value)
      out.push_back(key + ": sent " + value + ", applied " + it->second);
  }
  return out;
}

caf::error load_settings(const std::string& path, settings& out) {
  settings s = out;
  auto keys = setting_list(s);
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(errc::bad_config, path + ":" + std::to_string(e.source().begin.line) + ":"
                                          + std::to_string(e.source().begin.column) + ": "
                                          + printable(std::string(e.description())));
  }
  auto where = [&](const toml::source_region& r) {
    return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column) + ": ";
  };
  for (auto&& [section, node] : root) {
    auto* table = node.as_table();
    if (!table)
      return make_error(errc::bad_config, where(section.source()) + "unknown key '"
                                            + std::string(section.str())
                                            + "' (settings live in sections such as [evaluator])");
    for (auto&& [key, value] : *table) {
      auto full = std::string(section.str()) + "." + std::string(key.str());
      auto* k = find_key(keys, full);
      if (!k)
        return make_error(errc::bad_config, where(key.source()) + "unknown key '" + full + "'");
      if (!k->set(value))
        return make_error(errc::bad_config, where(key.source()) + "key '" + full + "' must be "
                                              + k->expected + ", not " + type_name_of(value));
      if (k->check)
        if (auto why = k->check(); !why.empty())
          return make_error(errc::bad_config, where(key.source()) + full + " " + why);
    }
  }
  out = s;
  return {};
}

std::string build_python() {
  return BB_PYTHON;
}

std::string beside_program(const std::string& name) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

std::string default_runner_path() {
  return beside_program("bbrunner");
}

std::string project_home() {
  if (const char* home = std::getenv("BBCLUSTER_HOME"); home && *home)
    return home;
  const char* user = std::getenv("HOME");
  return std::string(user && *user ? user : "/tmp") + "/.cache/bbcluster";
}

uint64_t runner_memory_limit(double gb, size_t slots) {
  if (gb > 0)
    return static_cast<uint64_t>(gb * double(1ull << 30));
  auto pages = ::sysconf(_SC_PHYS_PAGES);
  auto page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0)
    return 0;
  return static_cast<uint64_t>(0.75 * double(pages) * double(page) / double(std::max<size_t>(1, slots)));
}

size_t count_gpus() {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    auto name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0
        && name.find_first_not_of("0123456789", 6) == std::string::npos)
      ++n;
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && n > 0) {
    std::string v = visible;
    size_t listed = v.empty() ? 0 : 1 + static_cast<size_t>(std::count(v.begin(), v.end(), ','));
    n = std::min(n, listed);
  }
  return n;
}

runner_options runner_options_of(const settings& s) {
  auto opts = s.timing;
  if (!opts.reference_cache)
    opts.reference_cache_dir.clear();
  else if (opts.reference_cache_dir.empty())
    opts.reference_cache_dir = reference_cache::default_dir();
  return opts;
}

bool extra_inputs_for(const settings& s, const std::string& backend) {
  if (s.extra_inputs != "auto")
    return s.extra_inputs == "on";
  return backend == "llm" || backend == "llm-relay" || backend == "kernel_agent";
}

double shards_per_slot(const settings& s) {
  return s.shards == "off" ? 0.0 : s.shards_per_slot;
}

double evaluate_timeout_s(const settings& s) {
  return 2 * s.start_timeout_s + 3 * s.job_timeout_s + 30;
}

caf::error validate(const settings& s) {
  auto bad = [](const std::string& what) { return make_error(errc::bad_config, what); };
  // The ranges and choices of a file's keys, for values that came from elsewhere (flags).
  settings copy = s;
  for (auto& k : setting_list(copy))
    if (k.check)
      if (auto why = k.check(); !why.empty())
        return bad(std::string(k.key) + " " + why);
  if (s.node_silence_s <= s.heartbeat_s)
    return bad("nodes.silence_s must be above nodes.heartbeat_s");
  return {};
}

} // namespace bb
