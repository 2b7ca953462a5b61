"""Drives a running waste node's OpenAI-compatible API with the official
`openai` client, as users' tools do, and checks what they rely on.

Usage: python3 openai_api.py BASE_URL   (e.g. http://127.0.0.1:50052/v1)
Exits non-zero, naming the check, on the first failure. The model is a tiny
random-weight fixture, so the checks are properties (agreement between
calls, shapes, counts, JSON validity), never the wording of an answer.
"""

import json
import sys
import urllib.error
import urllib.request

import openai
from prometheus_client.openmetrics.parser import text_string_to_metric_families

base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
messages = [{"role": "user", "content": "Name three colours."}]
generated = 0  # completion tokens of every call, to check /metrics


def http(url, body=None):
    """(status, text) of a GET, or of a POST of raw JSON bytes."""
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


models = client.models.list().data
check(len(models) == 1 and models[0].id, "GET /v1/models lists the model")
model = models[0].id
check(client.models.retrieve(model).id == model, "GET /v1/models/{id} retrieves the model")
try:
    client.models.retrieve("no-such-model")
    check(False, "an unknown model id is a 404")
except openai.NotFoundError as e:
    err = e.body if isinstance(e.body, dict) else {}
    check(e.status_code == 404 and err.get("code") == "model_not_found", "an unknown model id is a 404 model_not_found")

# Non-streamed, greedy.
r = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
c = r.choices[0]
generated += r.usage.completion_tokens
check(isinstance(c.message.content, str) and c.message.role == "assistant", "a chat answer")
check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, "usage counts tokens")
check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage adds up")
check(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
check(c.finish_reason != "length" or r.usage.completion_tokens == 24, "length means max_tokens")
greedy = c.message.content

# Streamed, greedy: the same text, piece by piece, then usage.
pieces, usage, finish = [], None, None
stream = client.chat.completions.create(
    model=model, messages=messages, max_tokens=24, temperature=0, stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for ch in chunk.choices:
        if ch.delta.content:
            pieces.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
generated += usage.completion_tokens
check("".join(pieces) == greedy, "streamed text equals the non-streamed text")
check(len(pieces) > 1, "the text arrives in several chunks")
check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "the stream ends with usage")
check(finish == c.finish_reason, "the stream carries the finish reason")

# A stop string cut from the greedy answer: the answer ends before it.
check(len(greedy) >= 2, f"the greedy answer {greedy!r} has a second character to stop at")
stop = greedy[1]
r = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0, stop=[stop])
generated += r.usage.completion_tokens
check(r.choices[0].message.content == greedy[: greedy.index(stop)], f"stop {stop!r} ends the answer before it")
check(r.choices[0].finish_reason == "stop", "a stop string finishes with stop")

# Seeded sampling is reproducible.
def sampled(seed):
    global generated
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=16, temperature=1.0, top_p=0.95, seed=seed)
    generated += r.usage.completion_tokens
    return r.choices[0].message.content

check(sampled(7) == sampled(7), "the same seed gives the same sample")

# Logprobs.
r = client.chat.completions.create(
    model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
generated += r.usage.completion_tokens
lp = r.choices[0].logprobs.content
check(len(lp) == r.usage.completion_tokens, "one logprob entry per token")
check(all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in lp), "logprobs with 3 alternatives each")
check(all(e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in lp), "greedy tokens are the most likely")
check(all(e.bytes is not None for e in lp), "logprob entries carry the token bytes")

# JSON mode: what comes back parses.
r = client.chat.completions.create(
    model=model, messages=messages, max_tokens=200, temperature=0.7, seed=1,
    response_format={"type": "json_object"})
generated += r.usage.completion_tokens
if r.choices[0].finish_reason == "stop":
    check(isinstance(json.loads(r.choices[0].message.content), dict), "JSON mode returns a JSON object")
else:
    check(r.choices[0].message.content.lstrip().startswith("{"), "a cut JSON answer is still an object's start")

# The legacy completions endpoint.
r = client.completions.create(model=model, prompt="The sky is", max_tokens=5, temperature=0, logprobs=2)
generated += r.usage.completion_tokens
check(isinstance(r.choices[0].text, str) and len(r.choices[0].logprobs.tokens) == 5, "/v1/completions with logprobs")

# Invalid requests: 400 in OpenAI's error shape, and the node stays up.
try:
    client.chat.completions.create(model=model, messages=messages, n=2)
    check(False, "n=2 is refused")
except openai.BadRequestError as e:
    err = e.body if isinstance(e.body, dict) else {}
    check(e.status_code == 400 and "message" in err and err.get("type") == "invalid_request_error",
          "an invalid request is a 400 with message and type")
try:
    client.chat.completions.create(model=model, messages=[])
    check(False, "an empty chat is refused")
except openai.BadRequestError as e:
    err = e.body if isinstance(e.body, dict) else {}
    check(err.get("param") == "messages", "an empty chat is a 400 naming messages")
status, body = http(f"{base}/chat/completions", b'{"messages": [}')
check(status == 400 and "message" in json.loads(body)["error"], "a malformed body is a 400 error object")

# /health and /metrics.
root = base.rsplit("/v1", 1)[0]
check(json.loads(http(f"{root}/health")[1])["status"] == "ok", "GET /health")
text = http(f"{root}/metrics")[1]
families = {f.name: f for f in text_string_to_metric_families(text)}
for name in ["waste_node_requests", "waste_node_generated_tokens", "waste_node_time_to_first_token_seconds",
             "waste_node_token_latency_seconds", "waste_node_expert_bytes_read", "waste_node_retention_ratio",
             "waste_node_prefetch_accuracy_ratio", "waste_node_queue_depth"]:
    check(name in families, f"/metrics has {name}")
total = sum(s.value for s in families["waste_node_generated_tokens"].samples if s.name.endswith("_total"))
check(total == generated, f"/metrics counted {total} generated tokens, the calls {generated}")
check(families["waste_node_time_to_first_token_seconds"].type == "histogram", "TTFT is a histogram")
print("all OpenAI API checks passed")
