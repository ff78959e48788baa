"""Regenerates the Jinja2-rendered fixtures next to this tools/ directory:
  <name>/special.json and <name>/cases.jsonl for every <name>/template.jinja
  listed in TEMPLATES (conversations below), snippets.jsonl from snippets.py,
  and manifest.json. Usage: python3 tools/make_fixtures.py (from jinja2/)."""
import json, os, sys, copy
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import render
from snippets import CASES as SNIPPETS

OUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
                                                            "days": {"type": ["integer", "number"], "description": "Forecast days"},
                                                            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"},
                                                            "extra": {"type": "object", "additionalProperties": {"type": "number"}, "description": "Extra"}},
                          "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time in a timezone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "description": "IANA zone"}}, "required": ["tz"]},
        "return": {"type": "string", "description": "ISO time"}}}
NOARGS = {"type": "function", "function": {"name": "ping", "description": "Ping.", "parameters": {"type": "object", "properties": {}}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks."}
U2 = {"role": "user", "content": "Tell me about 日本 and emoji 👩‍👩‍👧 — \"quoted\" {{ x }} {% if %}\n\tindented  "}
A_THINK = {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer."}
CALL = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "call00001", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_STR = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "call00001", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
CALL2 = {"role": "assistant", "content": "Checking both.", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
    {"type": "function", "function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}}]}
TOOL1 = {"role": "tool", "name": "get_weather", "tool_call_id": "call00001", "content": "{\"temp\": 21}"}
TOOL2 = {"role": "tool", "name": "get_time", "content": "09:30"}
TOOL_OBJ = {"role": "tool", "name": "get_weather", "content": {"temp": 21, "unit": "°C"}}
A_END = {"role": "assistant", "content": "It is 21C."}
EMPTY_U = {"role": "user", "content": ""}
WS_U = {"role": "user", "content": "   \n\t  "}
MM_U = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is in this image?  "}]}
MM_SYS = {"role": "system", "content": [{"type": "text", "text": "Describe images."}]}

def conv(*msgs): return [copy.deepcopy(m) for m in msgs]

BASIC = [
    ("single_user", {"messages": conv(U1), "add_generation_prompt": True}),
    ("single_user_no_gen", {"messages": conv(U1), "add_generation_prompt": False}),
    ("system_user", {"messages": conv(SYS, U1), "add_generation_prompt": True}),
    ("multi_turn", {"messages": conv(SYS, U1, A1, U2), "add_generation_prompt": True}),
    ("assistant_last", {"messages": conv(U1, A1), "add_generation_prompt": False}),
    ("empty_and_ws", {"messages": conv(EMPTY_U, A1, WS_U), "add_generation_prompt": True}),
    ("bad_order", {"messages": conv(U1, U2), "add_generation_prompt": True}),
    ("system_only_then_assistant", {"messages": conv(SYS, A1), "add_generation_prompt": True}),
]
TOOLS = [
    ("tools_chat", {"messages": conv(SYS, U1), "tools": [WEATHER, TIME], "add_generation_prompt": True}),
    ("tools_no_system", {"messages": conv(U1), "tools": [WEATHER], "add_generation_prompt": True}),
    ("tool_roundtrip", {"messages": conv(U1, CALL, TOOL1, A_END), "tools": [WEATHER], "add_generation_prompt": False}),
    ("tool_roundtrip_str_args", {"messages": conv(U1, CALL_STR, TOOL1, A_END, U2), "tools": [WEATHER, NOARGS], "add_generation_prompt": True}),
    ("two_calls_two_results", {"messages": conv(SYS, U1, CALL2, TOOL1, TOOL2, A_END), "tools": [WEATHER, TIME], "add_generation_prompt": True}),
    ("tool_result_object", {"messages": conv(U1, CALL, TOOL_OBJ), "tools": [WEATHER], "add_generation_prompt": True}),
]

TEMPLATES = {
    "llama3": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, BASIC),
    "llama3_1": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, BASIC + TOOLS[:3] + [
        ("builtin_tools", {"messages": conv(SYS, U1), "builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"], "date_string": "01 Jan 2025", "add_generation_prompt": True}),
        ("builtin_tool_call", {"messages": conv(U1, {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "penguins"}}}]}, {"role": "ipython", "content": "results"}), "builtin_tools": ["brave_search"], "add_generation_prompt": True}),
        ("tools_in_system", {"messages": conv(SYS, U1), "tools": [TIME], "tools_in_user_message": False, "add_generation_prompt": True}),
        ("two_tool_calls_rejected", {"messages": conv(U1, CALL2), "tools": [WEATHER], "add_generation_prompt": True}),
        ("tools_without_user", {"messages": conv(SYS), "tools": [WEATHER], "add_generation_prompt": True}),
        ("tool_result_object", {"messages": conv(U1, CALL, TOOL_OBJ), "tools": [WEATHER], "tools_in_user_message": False, "add_generation_prompt": True}),
    ]),
    "gemma3": ({"bos_token": "<bos>", "eos_token": "<eos>"}, BASIC + [
        ("multimodal", {"messages": conv(MM_SYS, MM_U, A1, U2), "add_generation_prompt": True}),
        ("bad_content_type", {"messages": conv({"role": "user", "content": 42}), "add_generation_prompt": True}),
    ]),
    "gemma2": ({"bos_token": "<bos>", "eos_token": "<eos>"}, BASIC),
    "phi3_5": ({"bos_token": "<s>", "eos_token": "<|endoftext|>"}, BASIC + [("empty_system", {"messages": conv({"role": "system", "content": ""}, U1), "add_generation_prompt": True})]),
    "phi4_mini": ({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}, BASIC + [
        ("tools_in_system_message", {"messages": conv({"role": "system", "content": "You can call tools.", "tools": json.dumps([WEATHER["function"]])}, U1), "add_generation_prompt": True}),
        ("tools_none", {"messages": conv({"role": "system", "content": "No tools.", "tools": None}, U1), "add_generation_prompt": False}),
    ]),
    "deepseek_r1": ({"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}, BASIC + [
        ("think_in_history", {"messages": conv(U1, A_THINK, U2), "add_generation_prompt": True}),
        ("tool_calls", {"messages": conv(SYS, U1, {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}}]}, TOOL1, TOOL2, A_END), "add_generation_prompt": True}),
        ("tool_last", {"messages": conv(U1, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}, TOOL2), "add_generation_prompt": True}),
        ("no_add_generation_prompt_key", {"messages": conv(U1)}),
    ]),
    "qwen2_5": ({"bos_token": None, "eos_token": "<|im_end|>"}, BASIC + TOOLS),
    "hermes_tool_use": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, TOOLS + [
        ("union_with_null_recurses_forever", {"messages": conv(U1), "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": ["string", "null"], "description": "x"}}}}}], "add_generation_prompt": True}),
        ("no_tools_chat", {"messages": conv(SYS, U1, A1, U2), "tools": [], "add_generation_prompt": True}),
    ]),
    "command_r_tools": ({"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}, TOOLS + [
        ("tool_call_empty_args", {"messages": conv(U1, {"role": "assistant", "content": "Pinging.", "tool_calls": [{"function": {"name": "ping", "arguments": {}}}]}, {"role": "tool", "content": "  pong  "}), "tools": [NOARGS], "add_generation_prompt": True}),
    ]),
    "zephyr": ({"bos_token": "<s>", "eos_token": "</s>"}, BASIC),
    "firefunction_v1": ({"bos_token": "<s>", "eos_token": "</s>"}, [
        ("functions_first", {"messages": conv({"role": "functions", "content": json.dumps([WEATHER["function"]], indent=4)}, {"role": "system", "content": "Use functions."}, U1), "add_generation_prompt": False}),
        ("with_call", {"messages": conv({"role": "system", "content": "S"}, {"role": "functions", "content": "[]"}, U1, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}, {"role": "tool", "content": "cold"}), "add_generation_prompt": False}),
        ("bad_role", {"messages": conv({"role": "functions", "content": "[]"}, {"role": "narrator", "content": "x"}), "add_generation_prompt": False}),
        ("missing_functions", {"messages": conv(U1), "add_generation_prompt": False}),
        ("no_messages", {"messages": [], "add_generation_prompt": False}),
    ]),
    "deepseek_coder_scoping": ({"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<|EOT|>"}, BASIC[:4]),
    "misc_models": ({"bos_token": "<s>", "eos_token": "</s>"}, BASIC[:4] + [
        ("tools_and_documents", {"messages": conv(SYS, U1), "tools": [WEATHER, TIME["function"]], "documents": [{"id": "d1", "title": "Doc", "text": "Body"}, {"title": "T2", "text": "B2", "url": "u"}], "add_generation_prompt": True}),
    ]),
}

manifest = {"generator": "tools/make_fixtures.py", "reference": {"name": "jinja2 (Python)", "version": __import__("jinja2").__version__}, "templates": {}}
for name, (special, cases) in TEMPLATES.items():
    d = os.path.join(OUT, name)
    src = open(os.path.join(d, "template.jinja"), encoding="utf-8").read()
    open(os.path.join(d, "special.json"), "w", encoding="utf-8").write(json.dumps(special, ensure_ascii=False, indent=2) + "\n")
    n = 0
    with open(os.path.join(d, "cases.jsonl"), "w", encoding="utf-8") as f:
        for cid, ctx in cases:
            full = dict(special); full.update(ctx)
            kind, value = render(src, full)
            rec = {"id": cid}; rec.update(ctx)
            if kind == "ok": rec["rendered"] = value
            elif kind == "raised": rec["error"] = value
            else:
                rec["python_error"] = value
            f.write(json.dumps(rec, ensure_ascii=False) + "\n"); n += 1
    manifest["templates"][name] = {"cases": n}
with open(os.path.join(OUT, "snippets.jsonl"), "w", encoding="utf-8") as f:
    for c in SNIPPETS:
        kind, value = render(c["template"], c["context"])
        rec = {"name": c["name"], "template": c["template"], "context": c["context"]}
        if kind == "ok": rec["rendered"] = value
        elif kind == "raised": rec["error"] = value
        else: rec["python_error"] = value
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
manifest["snippets"] = len(SNIPPETS)
open(os.path.join(OUT, "manifest.json"), "w").write(json.dumps(manifest, indent=2) + "\n")
