#include "cluster/hostfile.hpp"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "suite/printable.hpp"

namespace bb {

namespace {

std::vector<std::string> split_tokens(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string tok; in >> tok;)
    out.push_back(tok);
  return out;
}

int is_digit(int c) {
  return std::isdigit(c);
}

bool every_char(const std::string& s, int (*pred)(int)) {
  for (unsigned char c : s)
    if (!pred(c))
      return false;
  return true;
}

/// A decimal number of at most `max` without sign or spaces; false otherwise.
bool parse_decimal(const std::string& s, uint64_t max, uint64_t& value) {
  if (s.empty() || s.size() > 10 || !every_char(s, is_digit))
    return false;
  value = std::stoull(s);
  return value <= max;
}

int is_ipv6_char(int c) {
  return std::isxdigit(c) || c == ':' || c == '.';
}

int is_name_char(int c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_';
}

int is_ipv4_char(int c) {
  return std::isdigit(c) || c == '.';
}

bool valid_ipv4(const std::string& s) {
  std::istringstream in(s + ".");
  size_t parts = 0;
  uint64_t octet = 0;
  for (std::string part; std::getline(in, part, '.'); ++parts)
    if (!parse_decimal(part, 255, octet) || part.size() > 3)
      return false;
  return parts == 4 && in.eof();
}

bool parse_port(const std::string& text, host_entry& e, std::string& why) {
  uint64_t port = 0;
  if (!parse_decimal(text, 65535, port) || port == 0) {
    why = "port must be 1..65535, not '" + text + "'";
    return false;
  }
  e.port = static_cast<uint16_t>(port);
  return true;
}

// `tok` is `name`, `name:port`, `a.b.c.d`, `a.b.c.d:port`, `[v6]` or `[v6]:port`.
bool parse_host(const std::string& tok, host_entry& e, std::string& why) {
  if (tok[0] == '[') {
    auto close = tok.find(']');
    if (close == std::string::npos) {
      why = "missing ']' in host '" + tok + "'";
      return false;
    }
    e.host = tok.substr(1, close - 1);
    if (e.host.find(':') == std::string::npos || !every_char(e.host, is_ipv6_char)) {
      why = "bad IPv6 address '" + e.host + "'";
      return false;
    }
    auto rest = tok.substr(close + 1);
    if (rest.empty())
      return true;
    if (rest[0] != ':') {
      why = "expected ':port' after ']', found '" + rest + "'";
      return false;
    }
    return parse_port(rest.substr(1), e, why);
  }
  auto colon = tok.find(':');
  if (colon != std::string::npos && tok.find(':', colon + 1) != std::string::npos) {
    why = "an IPv6 address must be in brackets, as [addr] or [addr]:port, not '" + tok + "'";
    return false;
  }
  e.host = tok.substr(0, colon);
  if (e.host.empty()) {
    why = "missing host name before ':' in '" + tok + "'";
    return false;
  }
  if (!every_char(e.host, is_name_char)) {
    why = "bad host name '" + e.host + "'";
    return false;
  }
  if (e.host.find('.') != std::string::npos && every_char(e.host, is_ipv4_char)
      && !valid_ipv4(e.host)) {
    why = "bad IPv4 address '" + e.host + "'";
    return false;
  }
  return colon == std::string::npos || parse_port(tok.substr(colon + 1), e, why);
}

// Leaves `why` empty when the line is good.
host_entry parse_line(const std::vector<std::string>& toks, std::string& why) {
  host_entry e;
  const std::string key = "slots=";
  if (toks[0].compare(0, key.size(), key) == 0) {
    why = "expected a host before '" + toks[0] + "'";
    return e;
  }
  if (!parse_host(toks[0], e, why))
    return e;
  if (toks.size() < 2 || toks[1].compare(0, key.size(), key) != 0) {
    why = "expected 'slots=N' after the host, found "
          + (toks.size() < 2 ? std::string("end of line") : "'" + toks[1] + "'");
    return e;
  }
  auto value = toks[1].substr(key.size());
  uint64_t slots = 0;
  if (!parse_decimal(value, UINT32_MAX, slots) || slots == 0) {
    why = "slots must be a positive integer, not '" + value + "'";
    return e;
  }
  e.slots = static_cast<uint32_t>(slots);
  if (toks.size() > 2)
    why = "unexpected '" + toks[2] + "' after '" + toks[1] + "'";
  return e;
}

std::string lowercase(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

hostfile parse_hostfile(const std::string& text, const std::string& origin, uint16_t default_port) {
  hostfile out;
  // Host names are case-insensitive: Worker-1 and worker-1 are one machine; a host without a
  // port is on the default one: n1 and n1:5555 are one node when 5555 is the default.
  std::map<std::pair<std::string, uint16_t>, std::pair<size_t, std::string>> first; // line, host
  std::istringstream in(text);
  size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    auto toks = split_tokens(line.substr(0, line.find('#')));
    if (toks.empty())
      continue;
    std::string why;
    auto e = parse_line(toks, why);
    auto where = origin + ":" + std::to_string(line_no) + ": ";
    if (!why.empty()) {
      out.errors.push_back(printable(where + why));
      continue;
    }
    e.line = line_no;
    uint16_t port = e.port ? e.port : default_port;
    auto [it, fresh] =
      first.emplace(std::make_pair(lowercase(e.host), port), std::make_pair(line_no, e.host));
    if (!fresh) {
      auto& [first_line, first_host] = it->second;
      out.errors.push_back(printable(where + toks[0] + " is the same node as line " + std::to_string(first_line)
                                     + " (" + first_host + ", port " + std::to_string(port) + ")"));
      continue;
    }
    out.hosts.push_back(std::move(e));
  }
  return out;
}

hostfile load_hostfile(const std::string& path, uint16_t default_port) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return {{}, {path + ": no such hostfile"}};
  if (std::filesystem::is_directory(path, ec))
    return {{}, {path + ": is a folder, not a hostfile"}};
  std::ifstream in(path, std::ios::binary);
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (!in.is_open() || in.bad())
    return {{}, {path + ": cannot read the hostfile"}};
  return parse_hostfile(text, path, default_port);
}

std::vector<std::string> node_names(const std::vector<host_entry>& hosts, uint16_t default_port) {
  std::map<std::string, size_t> entries_of_host;
  for (auto& h : hosts)
    ++entries_of_host[lowercase(h.host)];
  std::vector<std::string> out;
  std::set<std::string> taken;
  for (auto& h : hosts) {
    auto name = entries_of_host[lowercase(h.host)] == 1
                  ? h.host
                  : h.host + "-" + std::to_string(h.port ? h.port : default_port);
    // A host may itself be called like another's host-port: count on until the name is free.
    auto candidate = name;
    for (int n = 2; !taken.insert(lowercase(candidate)).second; ++n)
      candidate = name + "-" + std::to_string(n);
    out.push_back(candidate);
  }
  return out;
}

} // namespace bb
