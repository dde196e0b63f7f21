#!/usr/bin/env python3
"""A model server on loopback with scripted replies, for bbcluster's llm and kernel_agent tests:
OpenAI's chat completions (POST .../chat/completions), Anthropic's messages (POST .../messages)
and KernelAgent's relay (POST / with {"messages", "model", "n"}, answered with a JSON list of
n {"output"}; a GET answers 200, as KernelAgent probes its relay).

    fake_llm_server.py SCRIPT.json PORT_FILE REQUEST_LOG [API_KEY]

SCRIPT.json maps an operator (as it appears in the prompt's first "Operator: aten.X.Y" line,
which may start with "#") to a list of replies, used in turn (the last one repeats):
    {"status": 200, "content": "...text..."}            a reply (default status 200)
    {"status": 429, "retry_after": "1"}                 an error status, optional Retry-After
    {"hang": 30}                                        answers nothing for 30 s
The server listens on 127.0.0.1 on a free port, writes the port to PORT_FILE, and appends one
JSON line per request to REQUEST_LOG: the operator, the request's number for it, the API, whether
the request carried API_KEY (Authorization: Bearer, or x-api-key), the model, and the prompt.
"""

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script_path, port_file, log_path = sys.argv[1:4]
api_key = sys.argv[4] if len(sys.argv) > 4 else ""
with open(script_path) as f:
    script = json.load(f)
counts = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(200, {"status": "ok"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        if self.path.rstrip("/") == "":
            api = "relay"
            key_ok = True
        elif self.path.endswith("/chat/completions"):
            api = "openai"
            key_ok = self.headers.get("Authorization") == f"Bearer {api_key}"
        elif self.path.endswith("/messages"):
            api = "anthropic"
            key_ok = (self.headers.get("x-api-key") == api_key
                      and self.headers.get("anthropic-version") is not None)
        else:
            self.reply(404, {"error": {"message": f"no endpoint {self.path}"}})
            return
        prompt = "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")
        found = re.search(r"^[#\s]*Operator: (\S+)", prompt, re.M)
        op = found.group(1) if found else ""
        with lock:
            number = counts.get(op, 0)
            counts[op] = number + 1
            with open(log_path, "a") as log:
                log.write(json.dumps({
                    "op": op, "number": number + 1, "api": api, "model": request.get("model"),
                    "authorization_ok": key_ok, "prompt": prompt}) + "\n")
        replies = script.get(op) or [{"status": 404, "error": f"no script for {op}"}]
        step = replies[min(number, len(replies) - 1)]
        if "hang" in step:
            time.sleep(step["hang"])
            return
        status = step.get("status", 200)
        if status != 200:
            headers = [("Retry-After", step["retry_after"])] if "retry_after" in step else []
            self.reply(status, {"error": {"message": step.get("error", "scripted error")}}, headers)
            return
        if api == "relay":
            self.reply(200, [{"output": step["content"]}] * int(request.get("n", 1)))
            return
        if api == "anthropic":
            self.reply(200, {"id": "fake", "type": "message", "role": "assistant",
                             "model": request.get("model"), "stop_reason": "end_turn",
                             "content": [{"type": "text", "text": step["content"]}]})
            return
        self.reply(200, {"id": "fake", "object": "chat.completion", "model": request.get("model"),
                         "choices": [{"index": i, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": step["content"]}}
                                     for i in range(int(request.get("n", 1)))]})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.replace(port_file + ".tmp", port_file)
server.serve_forever()
