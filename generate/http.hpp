#pragma once

// One HTTP(S) POST with libcurl, for the llm backend. Blocking: call it from a detached actor.

#include <map>
#include <string>
#include <vector>

namespace bb {

struct http_response {
  /// HTTP status; 0 when no response came (see `error`).
  long status = 0;
  std::string body;
  /// Response headers, names in lower case.
  std::map<std::string, std::string> headers;
  /// Transport failure (refused, DNS, TLS, timeout), empty otherwise.
  std::string error;
  bool timed_out = false;
};

/// POSTs `body` (JSON) to `url` with `headers` ("Name: value"); gives up after `timeout_s`
/// seconds in all, or `connect_timeout_s` to connect.
http_response http_post_json(const std::string& url, const std::vector<std::string>& headers,
                             const std::string& body, double timeout_s,
                             double connect_timeout_s = 30.0);

/// Whether this build can make HTTP requests (it was built with libcurl).
bool http_available();

} // namespace bb
