#include "generate/http.hpp"

#include <algorithm>
#include <cctype>
#include <mutex>

#include <curl/curl.h>

namespace bb {

namespace {

size_t append_body(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t take_header(char* data, size_t size, size_t count, void* user) {
  std::string line(data, size * count);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    auto name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    auto value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r\n") + 1);
    (*static_cast<std::map<std::string, std::string>*>(user))[name] = value;
  }
  return size * count;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

} // namespace

bool http_available() {
  return true;
}

http_response http_post_json(const std::string& url, const std::vector<std::string>& headers,
                             const std::string& body, double timeout_s, double connect_timeout_s) {
  global_init();
  http_response r;
  CURL* curl = curl_easy_init();
  if (!curl) {
    r.error = "cannot start libcurl";
    return r;
  }
  curl_slist* list = nullptr;
  list = curl_slist_append(list, "Content-Type: application/json");
  for (auto& h : headers)
    list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, take_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout_s * 1000));
  // Detached actors run on their own threads: no signals from libcurl.
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  auto rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    r.error = curl_easy_strerror(rc);
    r.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  }
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return r;
}

} // namespace bb
