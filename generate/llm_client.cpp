#include "generate/llm_client.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include <nlohmann/json.hpp>

namespace bb {

using json = nlohmann::json;

std::string default_base_url(const std::string& provider) {
  return provider == "anthropic" ? "https://api.anthropic.com/v1" : "https://api.openai.com/v1";
}

const char* api_key_variable(const std::string& provider) {
  return provider == "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
}

std::string check(const llm_config& cfg) {
  if (cfg.provider != "openai" && cfg.provider != "anthropic")
    return "llm provider must be openai or anthropic, not '" + cfg.provider + "'";
  if (cfg.model.empty())
    return "--backend llm needs a model: --llm-model NAME (the model your server serves)";
  if (cfg.base_url.rfind("http://", 0) != 0 && cfg.base_url.rfind("https://", 0) != 0)
    return "llm base URL must start with http:// or https://, not '" + cfg.base_url + "'";
  if (cfg.provider == "anthropic" && cfg.api_key.empty())
    return "the anthropic provider needs ANTHROPIC_API_KEY in the environment";
  if (cfg.request_timeout_s <= 0)
    return "llm request timeout must be positive";
  return "";
}

namespace {

const char* system_text =
  "You write correct, fast GPU kernels for PyTorch operators. You answer with one complete "
  "source file in a fenced code block.";

std::string trim_slash(std::string url) {
  while (!url.empty() && url.back() == '/')
    url.pop_back();
  return url;
}

} // namespace

llm_request make_llm_request(const llm_config& cfg, const std::string& prompt) {
  llm_request r;
  json body;
  if (cfg.provider == "anthropic") {
    r.url = trim_slash(cfg.base_url) + "/messages";
    r.headers = {"x-api-key: " + cfg.api_key, "anthropic-version: 2023-06-01"};
    body = {{"model", cfg.model},
            {"max_tokens", cfg.max_tokens},
            {"temperature", cfg.temperature},
            {"system", system_text},
            {"messages", json::array({{{"role", "user"}, {"content", prompt}}})}};
  } else {
    r.url = trim_slash(cfg.base_url) + "/chat/completions";
    if (!cfg.api_key.empty())
      r.headers = {"Authorization: Bearer " + cfg.api_key};
    body = {{"model", cfg.model},
            {"max_tokens", cfg.max_tokens},
            {"temperature", cfg.temperature},
            {"messages", json::array({{{"role", "system"}, {"content", system_text}},
                                      {{"role", "user"}, {"content", prompt}}})}};
  }
  r.body = body.dump();
  return r;
}

std::optional<std::string> reply_text(const std::string& provider, const std::string& body,
                                      std::string& error) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    error = "the reply is not JSON";
    return std::nullopt;
  }
  try {
    if (provider == "anthropic") {
      std::string text;
      for (auto& part : j.at("content"))
        if (part.value("type", "") == "text")
          text += part.at("text").get<std::string>();
      if (text.empty() && j.value("stop_reason", "") == "max_tokens")
        error = "the reply was cut at max_tokens before any text";
      return text;
    }
    auto& choice = j.at("choices").at(0);
    auto& content = choice.at("message").at("content");
    if (content.is_null()) {
      error = "the reply has no content (finish_reason " + choice.value("finish_reason", "?") + ")";
      return std::nullopt;
    }
    return content.get<std::string>();
  } catch (const json::exception& e) {
    error = std::string("the reply has an unexpected shape: ") + e.what();
    return std::nullopt;
  }
}

bool is_retryable(const http_response& r) {
  if (r.status == 0)
    return true;
  return r.status == 408 || r.status == 409 || r.status == 429 || r.status >= 500;
}

double retry_delay(const llm_config& cfg, uint32_t retry, const http_response& r) {
  double delay = cfg.backoff_s * std::pow(2.0, static_cast<double>(retry > 0 ? retry - 1 : 0));
  auto it = r.headers.find("retry-after");
  if (it != r.headers.end() && !it->second.empty()) {
    char* end = nullptr;
    double secs = std::strtod(it->second.c_str(), &end);
    if (end && *end == '\0' && secs >= 0) {
      delay = secs;
    } else {
      std::tm tm{};
      if (strptime(it->second.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) {
        auto when = timegm(&tm);
        delay = std::max(0.0, std::difftime(when, std::time(nullptr)));
      }
    }
  }
  return std::min(delay, cfg.max_backoff_s);
}

std::string describe_failure(const llm_config& cfg, const http_response& r) {
  std::string text;
  if (r.status == 0) {
    text = r.timed_out ? "no answer within " + std::to_string(static_cast<int>(cfg.request_timeout_s))
                           + " s (" + r.error + ")"
                       : "request failed: " + r.error;
  } else {
    text = "HTTP " + std::to_string(r.status);
    auto j = json::parse(r.body, nullptr, false);
    std::string message;
    if (!j.is_discarded() && j.is_object() && j.contains("error")) {
      auto& e = j["error"];
      message = e.is_object() ? e.value("message", e.dump()) : e.is_string() ? e.get<std::string>() : e.dump();
    } else {
      message = r.body;
    }
    message = message.substr(0, 300);
    std::replace(message.begin(), message.end(), '\n', ' ');
    if (!message.empty())
      text += ": " + message;
  }
  // A server may echo what it was sent; the key never leaves this function.
  if (cfg.api_key.size() >= 4)
    for (auto at = text.find(cfg.api_key); at != std::string::npos; at = text.find(cfg.api_key))
      text.replace(at, cfg.api_key.size(), "***");
  return text;
}

author_reply ask_llm(const llm_config& cfg, const author_request& req, const http_poster& post,
                     const sleeper& sleep) {
  author_reply out;
  out.kind = kind_of(cfg.dsl);
  auto started = std::chrono::steady_clock::now();
  auto request = make_llm_request(cfg, kernel_prompt(req.op, cfg.dsl, req.feedback));
  http_response response;
  for (uint32_t attempt = 0;; ++attempt) {
    response = post(request, cfg.request_timeout_s);
    ++out.tries;
    if (response.status == 200 || !is_retryable(response) || attempt >= cfg.max_retries)
      break;
    sleep(retry_delay(cfg, attempt + 1, response));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out.note = "model " + cfg.model + ", " + std::to_string(out.tries)
             + (out.tries == 1 ? " request" : " requests");
  if (response.status != 200) {
    out.why = "the model's server failed: " + describe_failure(cfg, response)
              + (out.tries > 1 ? " (after " + std::to_string(out.tries) + " tries)" : "");
    out.transient = is_retryable(response);
    return out;
  }
  std::string error;
  auto text = reply_text(cfg.provider, response.body, error);
  if (!text) {
    out.why = error;
    return out;
  }
  auto code = extract_code(*text, cfg.dsl);
  if (code.code.empty()) {
    out.why = code.why.empty() ? "the reply's code block is empty" : code.why;
    return out;
  }
  out.code = cfg.dsl == kernel_dsl::cuda ? code.code : expose_entry_point(code.code, req.op.folder);
  return out;
}

} // namespace bb
