# Writes tests/vectors/models.json: the model codec vectors, built from the providers' published
# stream formats (OpenAI Chat Completions and Anthropic Messages streaming). The JSON is the
# data every host runs; edit this script and rerun it to change them: python3 tests/vectors/models.py
import json, os
def sse(obj, event=None):
    s = ''
    if event: s += f'event: {event}\n'
    return s + 'data: ' + json.dumps(obj, ensure_ascii=False, separators=(',', ':')) + '\n\n'
def oa(delta=None, finish=None, usage=None, choices=True):
    o = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-test"}
    o["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    if usage: o["usage"] = usage
    return sse(o)
DONE = 'data: [DONE]\n\n'
V = []
text_chunks = [oa({"role": "assistant", "content": ""}), oa({"content": "Héllo"}), oa({"content": " wörld 😀"}), oa(finish="stop"),
               oa(choices=False, usage={"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}), DONE]
body = ''.join(text_chunks).encode()
e = body.index('é'.encode()); g = body.index('😀'.encode())
V.append({"name": "openai: text reply, UTF-8 split inside characters", "provider": "openai", "chunks": text_chunks,
          "splitAt": [e + 1, g + 1, g + 2, g + 3], "everyByte": True,
          "events": [{"type": "text_delta", "text": "Héllo"}, {"type": "text_delta", "text": " wörld 😀"},
                     {"type": "finish", "reason": "stop"}, {"type": "usage", "inputTokens": 12, "outputTokens": 4}],
          "response": {"text": "Héllo wörld 😀", "calls": [], "usage": {"inputTokens": 12, "outputTokens": 4}}})
call = [oa({"role": "assistant", "content": None, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "set_control", "arguments": ""}}]}),
        oa({"tool_calls": [{"index": 0, "function": {"arguments": "{\"name\": \"po"}}]}),
        oa({"tool_calls": [{"index": 0, "function": {"arguments": "ints\", \"value\": 400}"}}]}),
        oa(finish="tool_calls"), DONE]
V.append({"name": "openai: one tool call, arguments assembled at every byte boundary", "provider": "openai", "chunks": call, "everyByte": True,
          "events": [{"type": "tool_call_start", "index": 0, "id": "call_1", "name": "set_control"},
                     {"type": "tool_call_delta", "index": 0, "arguments": "{\"name\": \"po"},
                     {"type": "tool_call_delta", "index": 0, "arguments": "ints\", \"value\": 400}"},
                     {"type": "finish", "reason": "tool_calls"}, {"type": "tool_call_end", "index": 0}],
          "response": {"text": None, "calls": [{"id": "call_1", "name": "set_control", "arguments": {"name": "points", "value": 400}}]}})
two = [oa({"role": "assistant", "content": "Checking both."}),
       oa({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "observe", "arguments": "{\"cell\":"}}]}),
       oa({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "observe", "arguments": "{\"cell\":\"b\"}"}}]}),
       oa({"tool_calls": [{"index": 0, "function": {"arguments": "\"a\"}"}}]}),
       oa(finish="tool_calls"), oa(choices=False, usage={"prompt_tokens": 30, "completion_tokens": 20}), DONE]
V.append({"name": "openai: two parallel tool calls, interleaved deltas", "provider": "openai", "chunks": two,
          "response": {"text": "Checking both.", "calls": [{"id": "call_a", "name": "observe", "arguments": {"cell": "a"}},
                                                            {"id": "call_b", "name": "observe", "arguments": {"cell": "b"}}],
                       "usage": {"inputTokens": 30, "outputTokens": 20}}})
V.append({"name": "openai: error event mid-stream", "provider": "openai",
          "chunks": [oa({"content": "Par"}), sse({"error": {"message": "The server is overloaded", "type": "server_overloaded"}}), oa({"content": "tial"})],
          "events": [{"type": "text_delta", "text": "Par"}], "expectError": "MODEL_OVERLOADED"})
V.append({"name": "openai: truncated stream (no finish, no [DONE]) returns no call", "provider": "openai", "chunks": call[:2],
          "expectError": {"code": "MODEL_BAD_RESPONSE"}})
V.append({"name": "openai: stream cut mid-event", "provider": "openai", "chunks": [oa({"content": "a"}), 'data: {"choices":[{"ind'],
          "expectError": "MODEL_BAD_RESPONSE"})
V.append({"name": "openai: a chunk that is not JSON", "provider": "openai", "chunks": ['data: {not json}\n\n'], "expectError": "MODEL_BAD_RESPONSE"})
V.append({"name": "openai: invalid JSON arguments reach the session as a malformed call", "provider": "openai",
          "chunks": [oa({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": tru"}}]}), oa(finish="tool_calls"), DONE],
          "response": {"calls": [{"id": "c", "name": "f", "arguments": "{\"a\": tru"}]}})
V.append({"name": "openai: output limit mid-call marks the call malformed", "provider": "openai",
          "chunks": [oa({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}), oa(finish="length"), DONE],
          "response": {"calls": [{"id": "c", "name": "f", "malformed": "the model reached its output limit before finishing this call"}]}})
V.append({"name": "openai: comments, CRLF and a server without [DONE]", "provider": "openai",
          "chunks": [': keep-alive\r\n\r\n', oa({"content": "ok"}).replace('\n', '\r\n'), oa(finish="stop").replace('\n', '\r\n')],
          "everyByte": True, "response": {"text": "ok"}})

def an(t, **kw):
    o = {"type": t}; o.update(kw); return sse(o, t)
atext = [an("message_start", message={"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-test",
                                      "usage": {"input_tokens": 25, "output_tokens": 1}}),
         an("content_block_start", index=0, content_block={"type": "text", "text": ""}), an("ping"),
         an("content_block_delta", index=0, delta={"type": "text_delta", "text": "Grüß"}),
         an("content_block_delta", index=0, delta={"type": "text_delta", "text": " dich 🌍"}),
         an("content_block_stop", index=0),
         an("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 9}),
         an("message_stop")]
body = ''.join(atext).encode(); g = body.index('🌍'.encode()); u = body.index('ü'.encode())
V.append({"name": "anthropic: text reply with ping, UTF-8 split", "provider": "anthropic", "chunks": atext, "splitAt": [u + 1, g + 1, g + 3], "everyByte": True,
          "events": [{"type": "usage", "inputTokens": 25, "outputTokens": 1}, {"type": "text_delta", "text": "Grüß"}, {"type": "text_delta", "text": " dich 🌍"},
                     {"type": "finish", "reason": "end_turn"}, {"type": "usage", "inputTokens": 25, "outputTokens": 9}],
          "response": {"text": "Grüß dich 🌍", "calls": [], "usage": {"inputTokens": 25, "outputTokens": 9}}})
atool = [an("message_start", message={"id": "msg_2", "usage": {"input_tokens": 40, "output_tokens": 2}}),
         an("content_block_start", index=0, content_block={"type": "tool_use", "id": "toolu_1", "name": "observe", "input": {}}),
         an("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}),
         an("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": "{\"cell\": \"te"}),
         an("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": "mperature\"}"}),
         an("content_block_stop", index=0),
         an("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 12}), an("message_stop")]
V.append({"name": "anthropic: tool_use with input_json_delta at every byte boundary", "provider": "anthropic", "chunks": atool, "everyByte": True,
          "events": [{"type": "usage"}, {"type": "tool_call_start", "index": 0, "id": "toolu_1", "name": "observe"},
                     {"type": "tool_call_delta", "arguments": "{\"cell\": \"te"}, {"type": "tool_call_delta", "arguments": "mperature\"}"},
                     {"type": "tool_call_end", "index": 0}, {"type": "finish", "reason": "tool_use"}, {"type": "usage", "outputTokens": 12}],
          "response": {"text": None, "calls": [{"id": "toolu_1", "name": "observe", "arguments": {"cell": "temperature"}}]}})
atwo = [an("message_start", message={"id": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}),
        an("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        an("content_block_delta", index=0, delta={"type": "text_delta", "text": "Two at once."}), an("content_block_stop", index=0),
        an("content_block_start", index=1, content_block={"type": "tool_use", "id": "t1", "name": "report", "input": {}}),
        an("content_block_stop", index=1),
        an("content_block_start", index=2, content_block={"type": "tool_use", "id": "t2", "name": "observe", "input": {}}),
        an("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": "{\"cell\":\"x\"}"}), an("content_block_stop", index=2),
        an("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 30}), an("message_stop")]
V.append({"name": "anthropic: two parallel tool_use blocks, one without arguments", "provider": "anthropic", "chunks": atwo,
          "response": {"text": "Two at once.", "calls": [{"id": "t1", "name": "report", "arguments": {}}, {"id": "t2", "name": "observe", "arguments": {"cell": "x"}}],
                       "usage": {"inputTokens": 5, "outputTokens": 30}}})
V.append({"name": "anthropic: error event mid-stream", "provider": "anthropic",
          "chunks": atext[:4] + [an("error", error={"type": "overloaded_error", "message": "Overloaded"})],
          "events": [{"type": "usage"}, {"type": "text_delta", "text": "Grüß"}], "expectError": {"code": "MODEL_OVERLOADED"}})
V.append({"name": "anthropic: truncated in a tool call returns no call", "provider": "anthropic", "chunks": atool[:4], "everyByte": True,
          "expectError": "MODEL_BAD_RESPONSE"})
V.append({"name": "anthropic: CRLF line endings", "provider": "anthropic", "chunks": [c.replace('\n', '\r\n') for c in atext], "everyByte": True,
          "response": {"text": "Grüß dich 🌍"}})
V.append({"name": "anthropic: max_tokens while a call is open marks it malformed", "provider": "anthropic",
          "chunks": atool[:5] + [an("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 99}), an("message_stop")],
          "response": {"calls": [{"id": "toolu_1", "malformed": "the model reached its output limit before finishing this call"}]}})

transcript = [
    {"role": "turn_start", "turn": 1, "cause": {"task": 1}},
    {"role": "mail", "seq": 1, "at": 5, "kind": "job", "note": {"job": 3, "outcome": "succeeded", "summary": "diffusion done"}},
    {"role": "task", "task": 1, "input": "Set points to 400"},
    {"role": "assistant", "step": 1, "text": None, "calls": [{"id": "call_1", "name": "set", "arguments": {"name": "points", "value": 400}},
                                                             {"id": "call_2", "name": "report", "arguments": {}}]},
    {"role": "tool_result", "invocation": 1, "callId": "call_1", "tool": "set", "status": "succeeded", "started": True, "value": {"status": "staged"}, "step": 1},
    {"role": "tool_result", "invocation": 2, "callId": "call_2", "tool": "report", "status": "uncertain", "started": True, "reason": "interrupted", "evidence": "no_settlement", "step": 1},
    {"role": "turn_end", "end": "interrupted", "reason": "user pressed stop", "turn": 1},
    {"role": "turn_start", "turn": 2, "cause": {"task": 2}},
    {"role": "task", "task": 2, "input": "Try again"},
]
tools = [{"name": "set", "description": "Sets a control", "parameters": {"type": "object", "properties": {"name": {"type": "string"}, "value": {}}, "required": ["name"]},
          "supportsParallel": False, "mayStartJob": False, "safeToCancel": False},
         {"name": "report", "description": "Reports the app", "parameters": {"type": "object"}, "supportsParallel": True}]
V.append({"name": "request: openai body from a session transcript", "kind": "request",
          "config": {"provider": "openai", "model": "gpt-test", "baseUrl": "http://127.0.0.1:9/v1/", "apiKey": "sk-test"},
          "system": "You drive the diffusion lab.", "messages": transcript, "tools": tools,
          "url": "http://127.0.0.1:9/v1/chat/completions",
          "headers": {"authorization": "Bearer sk-test", "content-type": "application/json", "accept": "text/event-stream"},
          "body": {"model": "gpt-test", "stream": True, "stream_options": {"include_usage": True}, "parallel_tool_calls": True,
                   "messages": [{"role": "system", "content": "You drive the diffusion lab."},
                                {"role": "user", "content": "[job note] job 3 succeeded: diffusion done\n\nSet points to 400"},
                                {"role": "assistant", "content": None, "tool_calls": [
                                    {"id": "call_1", "type": "function", "function": {"name": "set", "arguments": "{\"name\":\"points\",\"value\":400}"}},
                                    {"id": "call_2", "type": "function", "function": {"name": "report", "arguments": "{}"}}]},
                                {"role": "tool", "tool_call_id": "call_1", "content": "{\"status\":\"staged\"}"},
                                {"role": "tool", "tool_call_id": "call_2"},
                                {"role": "user", "content": "[the previous turn ended interrupted: user pressed stop]\n\nTry again"}],
                   "tools": [{"type": "function", "function": {"name": "set", "description": "Sets a control",
                                                               "parameters": {"type": "object", "required": ["name"]}}},
                             {"type": "function", "function": {"name": "report", "parameters": {"type": "object"}}}]}})
V.append({"name": "request: anthropic body from the same transcript", "kind": "request",
          "config": {"provider": "anthropic", "model": "claude-test", "apiKey": "ak-test", "maxTokens": 1000, "parallelToolCalls": False},
          "system": "You drive the diffusion lab.", "messages": transcript, "tools": tools,
          "url": "https://api.anthropic.com/v1/messages",
          "headers": {"x-api-key": "ak-test", "anthropic-version": "2023-06-01", "anthropic-dangerous-direct-browser-access": None},
          "body": {"model": "claude-test", "max_tokens": 1000, "stream": True, "system": "You drive the diffusion lab.",
                   "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
                   "tools": [{"name": "set", "description": "Sets a control", "input_schema": {"type": "object"}}, {"name": "report"}],
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "[job note] job 3 succeeded: diffusion done"}, {"type": "text", "text": "Set points to 400"}]},
                                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "set", "input": {"name": "points", "value": 400}},
                                                                  {"type": "tool_use", "id": "call_2", "name": "report", "input": {}}]},
                                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "{\"status\":\"staged\"}", "is_error": False},
                                                             {"type": "tool_result", "tool_use_id": "call_2", "is_error": True},
                                                             {"type": "text", "text": "[the previous turn ended interrupted: user pressed stop]"},
                                                             {"type": "text", "text": "Try again"}]}]}})
V.append({"name": "request: anthropic from a browser page sends the direct-access opt-in", "kind": "request",
          "config": {"provider": "anthropic", "model": "claude-test", "apiKey": "ak", "directBrowserAccess": True},
          "messages": [{"role": "task", "input": "hi"}],
          "headers": {"anthropic-dangerous-direct-browser-access": "true", "anthropic-version": "2023-06-01"}})
V.append({"name": "request: a call without a recorded result gets one", "kind": "request",
          "config": {"provider": "openai", "model": "m", "baseUrl": "http://127.0.0.1:9/v1"},
          "messages": [{"role": "task", "input": "x"}, {"role": "assistant", "text": "", "calls": [{"id": "k", "name": "f", "arguments": {}}]}],
          "headers": {"authorization": None},
          "body": {"messages": [{"role": "user", "content": "x"}, {"role": "assistant"},
                                {"role": "tool", "tool_call_id": "k", "content": "no result was recorded for this call"}]}})
for st, ra, b, err, retries, name in [
    (401, None, '{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}', "MODEL_AUTH", [[1, None]], "401 is MODEL_AUTH, never retried"),
    (403, None, '{"type":"error","error":{"type":"permission_error","message":"no access"}}', "MODEL_AUTH", None, "403 is MODEL_AUTH"),
    (429, "2", '{"error":{"message":"Rate limit reached"}}', {"code": "MODEL_RATE_LIMITED", "retryAfterMs": 2000}, [[1, 2000], [3, 2000], [4, None]], "429 honours Retry-After"),
    (429, "0.25", '', {"code": "MODEL_RATE_LIMITED", "retryAfterMs": 250}, [[1, 250]], "429 with a fractional Retry-After"),
    (429, "120", '', {"code": "MODEL_RATE_LIMITED", "retryAfterMs": 120000}, [[1, None]], "429 asking for longer than the bound is not retried"),
    (429, "Wed, 21 Oct 2026 07:28:00 GMT", '', "MODEL_RATE_LIMITED", [[1, 1000], [2, 2000]], "429 with an HTTP date backs off"),
    (529, None, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "MODEL_OVERLOADED", [[1, 1000], [2, 2000], [3, 4000], [4, None]], "529 backs off exponentially"),
    (503, None, 'Service Unavailable', "MODEL_OVERLOADED", [[1, 1000]], "503 is overload"),
    (400, None, '{"error":{"message":"This model\'s maximum context length is 128000 tokens.","code":"context_length_exceeded"}}', "MODEL_CONTEXT_TOO_LONG", [[1, None]], "openai context length"),
    (400, None, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}', "MODEL_CONTEXT_TOO_LONG", None, "anthropic prompt too long"),
    (500, None, '<html>oops</html>', {"code": "MODEL_PROVIDER_ERROR", "status": 500}, [[1, None]], "500 is a provider error, not retried"),
    (504, None, '', "MODEL_TIMEOUT", None, "504 is a timeout"),
]:
    v = {"name": "status: " + name, "kind": "status", "status": st, "body": b, "expectError": err}
    if ra is not None: v["retryAfter"] = ra
    if retries is not None: v["retries"] = retries
    V.append(v)
for choice, expect, err, name in [
    ({}, None, None, "nothing configured: no model (the built-in model answers)"),
    ({"openaiKey": "sk"}, {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": "https://api.openai.com/v1", "hasKey": True}, None, "an OpenAI key alone"),
    ({"anthropicKey": "ak"}, {"provider": "anthropic", "model": "claude-3-5-haiku-latest", "baseUrl": "https://api.anthropic.com", "maxTokens": 4096}, None, "an Anthropic key alone"),
    ({"model": "anthropic:claude-x", "openaiKey": "sk", "anthropicKey": "ak"}, {"provider": "anthropic", "model": "claude-x", "hasKey": True}, None, "a named provider takes its own key"),
    ({"model": "openai:llama3.2", "baseUrl": "http://127.0.0.1:11434/v1/"}, {"provider": "openai", "model": "llama3.2", "baseUrl": "http://127.0.0.1:11434/v1", "hasKey": False}, None, "a local server needs no key"),
    ({"baseUrl": "http://127.0.0.1:8000/v1"}, None, "MODEL_INVALID_CONFIG", "a base URL without a model name"),
    ({"model": "anthropic"}, None, "MODEL_INVALID_CONFIG", "a provider without its key"),
    ({"model": "gemini:pro", "openaiKey": "sk"}, None, "MODEL_INVALID_CONFIG", "an unknown provider"),
    ({"model": "openai:m", "baseUrl": "ftp://x"}, None, "MODEL_INVALID_CONFIG", "a base URL that is not HTTP"),
]:
    v = {"name": "resolve: " + name, "kind": "resolve", "choice": choice}
    if err: v["expectError"] = err
    else: v["expect"] = expect
    V.append(v)
out = {"suite": "models", "about": "Model provider codecs (core/src/model): OpenAI Chat Completions and Anthropic Messages streams, written from the providers' published stream formats; request bodies; status classification and retries; model resolution. Runner: core/src/model/vectors.rs.", "vectors": V}
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'models.json'), 'w').write(json.dumps(out, ensure_ascii=False, indent=1) + '\n')
print(len(V))
