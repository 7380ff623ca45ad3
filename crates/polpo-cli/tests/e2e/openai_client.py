"""Drive a running `polpo dev` with the official OpenAI Python client.

Usage: python3 openai_client.py <base_url> <api_key>
Each check prints `ok <name>`; any failure raises and exits non-zero. The fake model behind
the server is scripted by the Rust test in the same order as the checks below.
"""
import json
import sys

import openai
from pydantic import BaseModel

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=30)


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}", flush=True)


# 1. Plain chat; the agent is named as the model.
r = client.chat.completions.with_raw_response.create(model="assistant", messages=[{"role": "user", "content": "Who are you?"}])
completion = r.parse()
check("plain", completion.choices[0].message.content == "Hello, I am the assistant.", completion)
check("session header", bool(r.headers.get("x-session-id")))
check("run header", r.headers.get("x-polpo-run-id", "").startswith("chat-"))

# 2. Streaming; extension chunks (tool status, thinking) must not break the client.
stream = client.chat.completions.create(model="agent/assistant", stream=True, messages=[{"role": "user", "content": "Stream please"}])
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
check("stream", text == "Streaming works.", text)

# 3. Client-side tool round trip: the model asks, the client runs it, the same session continues.
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
r = client.chat.completions.with_raw_response.create(model="assistant", tools=tools, parallel_tool_calls=False,
                                                      messages=[{"role": "user", "content": "Weather in Paris?"}])
first = r.parse()
session = r.headers["x-session-id"]
choice = first.choices[0]
check("tool call", choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "get_weather", choice)
call = choice.message.tool_calls[0]
check("tool args", json.loads(call.function.arguments) == {"city": "Paris"}, call.function.arguments)
followup = client.chat.completions.create(
    model="assistant", tools=tools, parallel_tool_calls=False, extra_headers={"x-session-id": session},
    messages=[{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
              {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}])
check("tool result", followup.choices[0].message.content == "It is sunny in Paris.", followup)


# 4. Structured output parsed by the client into a pydantic model.
class Person(BaseModel):
    name: str
    age: int


parsed = client.chat.completions.parse(model="assistant", response_format=Person,
                                       messages=[{"role": "user", "content": "Describe Ada"}])
person = parsed.choices[0].message.parsed
check("structured", person == Person(name="Ada", age=36), person)

# 4b. The same, streamed: the client's stream helper parses the buffered, valid value.
with client.chat.completions.stream(model="assistant", response_format=Person,
                                    messages=[{"role": "user", "content": "Describe Grace"}]) as stream:
    final = stream.get_final_completion()
person = final.choices[0].message.parsed
check("structured stream", person == Person(name="Grace", age=85), person)

# 5. An unknown agent is a proper OpenAI error.
try:
    client.chat.completions.create(model="agent/nobody", messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("unknown agent accepted")
except openai.NotFoundError as e:
    check("unknown agent", e.code == "agent_not_found", e)

# 6. A wrong API key is a 401.
bad = openai.OpenAI(base_url=base_url + "/v1", api_key="wrong-key", max_retries=0)
try:
    bad.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("wrong key accepted")
except openai.AuthenticationError as e:
    check("wrong key", e.status_code == 401, e)

# 7. Models list shows the agent.
ids = [m.id for m in client.models.list()]
check("models", "agent/assistant" in ids, ids)
print("all ok")
