"""A stand-in for KernelAgent's model providers (utils.providers), for bbcluster's tests.

As in KernelAgent: a model's providers come from a registry (a few of KernelAgent's models
here), a model the registry does not know goes to the relay provider, and the first available
provider is taken; a preferred provider must be one the model is configured for. When none is
available, get_model_provider raises ValueError with KernelAgent's message, which the agent
keeps in its `_provider_error`.

  RelayProvider      POSTs {"messages", "model", "n", ...} to $LLM_RELAY_URL (default
                     http://127.0.0.1:11434) and reads a JSON list of {"output"}; available
                     when a GET of that URL answers at all (within 5 s)
  OpenAIProvider     chat completions at $OPENAI_BASE_URL (default https://api.openai.com/v1);
                     available when OPENAI_API_KEY is set
  AnthropicProvider  messages at $ANTHROPIC_BASE_URL/v1/messages (default
                     https://api.anthropic.com); available when ANTHROPIC_API_KEY is set
"""

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass


@dataclass
class LLMResponse:
    content: str
    model: str
    provider: str


def _post(url, body, headers, timeout):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"Server returned status {e.code}: {e.read().decode(errors='replace')}")


def _key(name):
    value = os.getenv(name)
    return value if value and value != "your-api-key-here" else None


class BaseProvider:
    def __init__(self):
        self.client = None
        self._initialize_client()

    def _initialize_client(self):
        pass

    def get_multiple_responses(self, model_name, messages, n=1, **kwargs):
        return [self.get_response(model_name, messages, **kwargs) for _ in range(n)]

    def supports_multiple_completions(self):
        return False


class RelayProvider(BaseProvider):
    def __init__(self):
        self.server_url = os.environ.get("LLM_RELAY_URL", "http://127.0.0.1:11434")
        self.is_available_flag = False
        super().__init__()

    def _initialize_client(self):
        try:
            urllib.request.urlopen(f"{self.server_url}/", timeout=5)
            self.is_available_flag = True
        except urllib.error.HTTPError:
            self.is_available_flag = True  # it answered
        except Exception:
            self.is_available_flag = False

    def _request(self, model_name, messages, n, **kwargs):
        body = {"messages": messages, "model": model_name,
                "temperature": kwargs.get("temperature", 0.7),
                "max_tokens": kwargs.get("max_tokens", 8192), "top_p": 1.0, "n": n}
        replies = _post(self.server_url, body, {},
                        int(os.environ.get("LLM_RELAY_TIMEOUT_S", 120)))
        return [LLMResponse(r.get("output", ""), model_name, self.name) for r in replies]

    def get_response(self, model_name, messages, **kwargs):
        return self._request(model_name, messages, 1, **kwargs)[0]

    def get_multiple_responses(self, model_name, messages, n=1, **kwargs):
        return self._request(model_name, messages, n, **kwargs)

    def is_available(self):
        return self.is_available_flag

    def supports_multiple_completions(self):
        return True

    @property
    def name(self):
        return "relay"


class OpenAIProvider(BaseProvider):
    def _initialize_client(self):
        key = _key("OPENAI_API_KEY")
        if key:
            self.client = {"key": key, "base_url": os.environ.get(
                "OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")}

    def _request(self, model_name, messages, n, **kwargs):
        body = {"model": model_name, "messages": messages, "n": n,
                "max_tokens": kwargs.get("max_tokens", 8192)}
        reply = _post(self.client["base_url"] + "/chat/completions", body,
                      {"Authorization": "Bearer " + self.client["key"]}, 600)
        return [LLMResponse(c["message"]["content"], model_name, self.name)
                for c in reply["choices"]]

    def get_response(self, model_name, messages, **kwargs):
        return self._request(model_name, messages, 1, **kwargs)[0]

    def get_multiple_responses(self, model_name, messages, n=1, **kwargs):
        return self._request(model_name, messages, n, **kwargs)

    def is_available(self):
        return self.client is not None

    def supports_multiple_completions(self):
        return True

    @property
    def name(self):
        return "openai"


class AnthropicProvider(BaseProvider):
    def _initialize_client(self):
        key = _key("ANTHROPIC_API_KEY")
        if key:
            self.client = {"key": key, "base_url": os.environ.get(
                "ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")}

    def get_response(self, model_name, messages, **kwargs):
        body = {"model": model_name, "max_tokens": kwargs.get("max_tokens", 8192),
                "messages": [{"role": "user", "content": messages[-1]["content"]}]}
        reply = _post(self.client["base_url"] + "/v1/messages", body,
                      {"x-api-key": self.client["key"], "anthropic-version": "2023-06-01"}, 600)
        return LLMResponse(reply["content"][0]["text"], model_name, self.name)

    def is_available(self):
        return self.client is not None

    @property
    def name(self):
        return "anthropic"


# A few of KernelAgent's models, with its providers for each.
MODELS = {
    "o4-mini": [OpenAIProvider],
    "gpt-5": [RelayProvider, OpenAIProvider],
    "claude-sonnet-4-20250514": [AnthropicProvider],
    "claude-sonnet-4-5-20250929": [AnthropicProvider],
    "gcp-claude-4-sonnet": [RelayProvider],
}

_instances = {}


def get_model_provider(model_name, preferred_provider=None):
    classes = MODELS.get(model_name, [RelayProvider])
    if preferred_provider is not None:
        if preferred_provider not in classes:
            allowed = [c.__name__ for c in classes]
            raise ValueError(f"Preferred provider '{preferred_provider.__name__}' is not "
                             f"configured for model '{model_name}'. Allowed providers: {allowed}")
        classes = [preferred_provider]
    for provider_class in classes:
        if provider_class not in _instances:
            _instances[provider_class] = provider_class()
        if _instances[provider_class].is_available():
            return _instances[provider_class]
    tried = [c.__name__ for c in classes]
    raise ValueError(f"No available provider for model '{model_name}'. Tried providers: "
                     f"{tried}. Check API keys and dependencies.")
