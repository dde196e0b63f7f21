#include "generate/http.hpp"

// This build has no libcurl: every request fails with a message that says how to get one.

namespace bb {

bool http_available() {
  return false;
}

http_response http_post_json(const std::string&, const std::vector<std::string>&,
                             const std::string&, double, double) {
  http_response r;
  r.error = "this bbcluster was built without libcurl (apt install libcurl4-openssl-dev, then "
            "scripts/setup.sh)";
  return r;
}

} // namespace bb
