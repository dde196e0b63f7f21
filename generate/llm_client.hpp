#pragma once

// The llm backend's client: OpenAI-compatible chat completions (OpenAI, vLLM, Ollama,
// llama.cpp servers, relays) and Anthropic's messages API. Requests, replies, the retry
// policy (429 and 5xx with exponential backoff, honouring Retry-After), and one blocking
// "ask" that puts them together. API keys go into request headers only: never into logs,
// errors or files.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cluster/config.hpp"
#include "generate/generation.hpp"
#include "generate/http.hpp"
#include "messages/authoring.hpp"

namespace bb {

struct llm_config {
  /// "openai" (chat completions) or "anthropic" (messages).
  std::string provider = default_settings().llm_provider;
  /// Without the endpoint: https://api.openai.com/v1, http://127.0.0.1:8000/v1, ...
  std::string base_url;
  std::string model;
  /// From OPENAI_API_KEY or ANTHROPIC_API_KEY; may be empty for local servers.
  std::string api_key;
  kernel_dsl dsl = kernel_dsl::triton;
  double request_timeout_s = default_settings().llm_timeout_s;
  /// Retries after a 429, a 5xx or a transport failure (so max_retries + 1 tries).
  uint32_t max_retries = static_cast<uint32_t>(default_settings().llm_max_retries);
  double backoff_s = default_settings().llm_backoff_s;
  double max_backoff_s = default_settings().llm_max_backoff_s;
  uint32_t max_tokens = static_cast<uint32_t>(default_settings().llm_max_tokens);
  double temperature = default_settings().llm_temperature;
};

/// The default base URL of a provider.
std::string default_base_url(const std::string& provider);

/// The environment variable holding a provider's key.
const char* api_key_variable(const std::string& provider);

/// "" when the configuration can be used, else what is wrong.
std::string check(const llm_config& cfg);

/// The endpoint, headers and JSON body of one request.
struct llm_request {
  std::string url;
  std::vector<std::string> headers;
  std::string body;
};

llm_request make_llm_request(const llm_config& cfg, const std::string& prompt);

/// The text of a successful reply, or nothing with `error` set.
std::optional<std::string> reply_text(const std::string& provider, const std::string& body,
                                      std::string& error);

/// Whether a response is worth another try: a transport failure, 408, 409, 429 or 5xx.
bool is_retryable(const http_response& r);

/// Seconds to wait before try `retry` (1, 2, ...): the response's Retry-After (seconds or an
/// HTTP date) when present, else backoff_s * 2^(retry-1); at most max_backoff_s.
double retry_delay(const llm_config& cfg, uint32_t retry, const http_response& r);

/// What a failed response says, one line, with the key (if it appears) masked.
std::string describe_failure(const llm_config& cfg, const http_response& r);

/// How the llm backend does a request: a plain function in production, scripted in tests.
using http_poster = std::function<http_response(const llm_request&, double timeout_s)>;
using sleeper = std::function<void(double seconds)>;

/// Asks the model for one version of a kernel: builds the prompt, sends it with retries,
/// and takes the code from the reply's fenced block.
author_reply ask_llm(const llm_config& cfg, const author_request& req, const http_poster& post,
                     const sleeper& sleep);

} // namespace bb
