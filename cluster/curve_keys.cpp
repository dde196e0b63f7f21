#include "cluster/curve_keys.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <zmq.h>

namespace bb {

namespace {

std::string write_keys(const std::filesystem::path& path, const curve_keypair& k, bool secret) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << "# bbcluster CURVE key (Z85)\npublic-key: " << k.public_key << "\n";
    if (secret)
      out << "secret-key: " << k.secret_key << "\n";
    if (!out.flush())
      return "cannot write " + path.string();
  }
  ::chmod(path.c_str(), secret ? 0600 : 0644);
  return "";
}

} // namespace

std::string generate_curve_keys(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return "cannot create " + dir + ": " + ec.message();
  for (auto role : {"coordinator", "node"}) {
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0)
      return "this ZeroMQ has no CURVE support (built without libsodium)";
    curve_keypair k{pub, sec};
    auto base = std::filesystem::path(dir) / role;
    for (auto err : {write_keys(base.string() + ".key", k, true), write_keys(base.string() + ".pub", k, false)})
      if (!err.empty())
        return err;
  }
  return "";
}

std::vector<std::string> existing_curve_key_files(const std::string& dir) {
  std::vector<std::string> out;
  for (auto file : {"coordinator.key", "coordinator.pub", "node.key", "node.pub"}) {
    auto path = (std::filesystem::path(dir) / file).string();
    std::error_code ec;
    if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found)
      out.push_back(path);
  }
  return out;
}

std::string read_curve_keys(const std::string& path, curve_keypair& out) {
  std::ifstream in(path);
  if (!in)
    return path + ": cannot read the key file";
  size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || line[0] == '#')
      continue;
    auto colon = line.find(':');
    auto key = line.substr(0, colon);
    auto value = colon == std::string::npos ? "" : line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (value.size() != 40 || (key != "public-key" && key != "secret-key"))
      return path + ":" + std::to_string(number)
             + ": expected 'public-key: KEY' or 'secret-key: KEY' with a 40-character Z85 key";
    (key == "public-key" ? out.public_key : out.secret_key) = value;
  }
  if (out.public_key.empty())
    return path + ": no public-key line";
  return "";
}

} // namespace bb
