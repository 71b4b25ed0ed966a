#!/usr/bin/env python3
"""Writes tests/data/template/golden.jsonl: chat templates rendered by Python Jinja2 configured the way
transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, tojson / raise_exception / strftime_now). Templates: the feature templates in
tests/data/template/features/, and the real Llama 3 and Qwen3 templates when scripts/fetch-tokenizers.sh has
fetched them (pass the cache folder). Usage: make_golden.py [TOKENIZER_CACHE]"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "template")


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name"},
                                          "unit": {"type": "string", "enum": ["c", "f"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}}}},
]

REQUESTS = [
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there, who are you?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "  Bonjour! Ça va? 日本語 😀  "}, {"role": "assistant", "content": "Oui."},
                  {"role": "user", "content": "Et toi?"}], "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "content": "{\"temp\": 21}"},
                  {"role": "tool", "content": "second result"},
                  {"role": "assistant", "content": "It is 21 degrees."},
                  {"role": "user", "content": "And 2+3?"}],
     "tools": TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Think first."},
                  {"role": "assistant", "content": "<think>\nsome reasoning\n</think>\n\nThe answer."},
                  {"role": "user", "content": "Again"},
                  {"role": "assistant", "content": "Final.", "reasoning_content": "more reasoning"}],
     "add_generation_prompt": True, "extra": {"enable_thinking": False}},
    {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": True,
     "extra": {"enable_thinking": True}},
    {"messages": [{"role": "assistant", "content": "calling", "tool_calls": [
        {"function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]}, {"role": "user", "content": "thanks"}],
     "add_generation_prompt": False},
]


def render(env, source, request, variables):
    try:
        out = env.from_string(source).render(messages=request["messages"], tools=request.get("tools"),
                                             add_generation_prompt=request.get("add_generation_prompt", False),
                                             **{**variables, **request.get("extra", {})})
        return {"output": out}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - any failure is an expected error for the C++ renderer too
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    env = environment()
    for req in REQUESTS:  # a fixed date, so templates that print today's date render reproducibly
        req.setdefault("extra", {})["date_string"] = "26 Jul 2024"
    lines = []
    features = os.path.join(DATA, "features")
    for name in sorted(os.listdir(features)):
        source = open(os.path.join(features, name), encoding="utf-8").read()
        for i, req in enumerate(REQUESTS):
            lines.append({"template": f"features/{name}", "case": i, "request": req,
                          **render(env, source, req, {"bos_token": "<s>", "eos_token": "</s>"})})
    if len(sys.argv) > 1:
        for name in ("llama3", "llama3_2", "qwen3"):
            cfg = json.load(open(os.path.join(sys.argv[1], name, "tokenizer_config.json"), encoding="utf-8"))
            variables = {k: (v if isinstance(v, str) else v.get("content")) for k, v in cfg.items()
                         if k.endswith("_token") and (isinstance(v, str) or isinstance(v, dict))}
            for i, req in enumerate(REQUESTS):
                lines.append({"template": name, "case": i, "request": req,
                              **render(env, cfg["chat_template"], req, variables)})
    with open(os.path.join(DATA, "golden.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(lines)} renders, jinja2 {jinja2.__version__}")


if __name__ == "__main__":
    main()
