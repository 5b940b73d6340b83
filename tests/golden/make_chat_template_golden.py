#!/usr/bin/env python3
"""Makes the golden vectors that hold hotswap's chat-template rendering (worker/serving/
jinja_renderer.*) against transformers' own (`transformers.utils.chat_template_utils.
render_jinja_template`, which vLLM calls through apply_chat_template).

Run it from a virtual environment OUTSIDE the repository, never in CI:

    python3 -m venv /opt/hotswap-peer-venv
    /opt/hotswap-peer-venv/bin/pip install transformers jinja2
    /opt/hotswap-peer-venv/bin/python tests/golden/make_chat_template_golden.py

It writes tests/golden/chat_template/golden.json: for each case the template, the variables the
template sees (messages, tools, documents, add_generation_prompt and the keyword arguments, as
transformers passes them) and either the rendered text or the error's text; and conversations
rendered as the chat route renders them (continue_final_message, reasoning fields). The templates are
written here, in the styles of the Hub's (ChatML with tools, Llama-3 headers without `-`
trimming, namespaces, loop controls, `{% generation %}`, `tojson`), so that whitespace control,
the sandbox and transformers' globals and filters are all exercised.
"""

import json
import os

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

CHATML_TOOLS = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\\n\\n# Tools\\n\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}{% continue %}{% endif %}
{%- if message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- elif message.content is string %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' }}{% for part in message.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{{ '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# The same without the loop over a list content: vLLM hands such a template text content (its
# "string" format), as transformers is handed it here.
CHATML_TEXT = CHATML_TOOLS.replace(
    """{%- elif message.content is string %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' }}{% for part in message.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{{ '<|im_end|>\\n' }}
{%- endif %}""",
    """{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}""")
assert CHATML_TEXT != CHATML_TOOLS

LLAMA3_STYLE = """{{ bos_token }}{% for message in messages %}
{% if message['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('Conversation roles must be system, user or assistant') }}{% endif %}
  {% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}
{{ content }}
{% endfor %}
{% if add_generation_prompt %}
    {{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{% endif %}
"""

FEATURES = """{%- set ns = namespace(last_user=-1, count=0) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages %}
  {%- if loop.index0 > ns.last_user %}{% break %}{% endif %}
  {%- set ns.count = ns.count + 1 %}
[{{ m.role }}] {{ m.content }}
{% endfor %}
{%- for m in messages %}{% if m.role == 'assistant' %}<a>{% generation %}{% set inner = m.content | upper %}{{ inner }}{% endgeneration %}</a>{{ inner is defined }}{% endif %}{% endfor %}
{{ ns.count }} {{ dict(a=1, b='é') | tojson }} {{ {'k': ['ü', 2, none, true]} | tojson(indent=2) }} {{ [3, 1] | tojson(separators=(',', ':'), sort_keys=true) }}
{%- if enable_thinking is defined and not enable_thinking %}<think>

</think>{% endif %}
{%- if documents %}{% for d in documents %}<doc title="{{ d.title }}">{{ d.text }}</doc>{% endfor %}{% endif %}
{{- eos_token if messages | length > 3 else '' }}
"""

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "  4  "},
    {"role": "user", "content": "And in Gödel numbering? ✓"},
]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Finds a fact",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}

CASES = [
    ("chatml_plain", CHATML_TOOLS, dict(messages=CONVERSATION, add_generation_prompt=True)),
    ("chatml_tools", CHATML_TOOLS, dict(messages=CONVERSATION[1:] + [
        {"role": "tool", "content": "{\"fact\": 4}"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks, "}, {"type": "image"},
                                     {"type": "text", "text": "go on."}]}],
        tools=TOOLS, add_generation_prompt=False)),
    ("llama3_style", LLAMA3_STYLE, dict(messages=CONVERSATION, add_generation_prompt=True)),
    ("llama3_style_no_prompt", LLAMA3_STYLE, dict(messages=CONVERSATION[:2])),
    ("features", FEATURES, dict(messages=CONVERSATION, documents=[{"title": "T", "text": "x"}],
                                enable_thinking=False)),
    ("features_short", FEATURES, dict(messages=CONVERSATION[:2], add_generation_prompt=True)),
    # Errors: the template's own, the sandbox's, a namespace's private name, a syntax error.
    ("raise_exception", LLAMA3_STYLE, dict(messages=[{"role": "tool", "content": "x"}])),
    ("sandbox", "{{ ''.__class__.__mro__ }}", dict(messages=[])),
    ("private_namespace", "{% set ns = namespace(_hidden=1) %}{{ ns }}", dict(messages=[])),
    ("syntax", "{% for m in messages %}{{ m }}", dict(messages=[])),
    ("undefined_call", "{{ messages[0].content.nothing() }}", dict(messages=[{"role": "user", "content": "x"}])),
]


# Conversations the way the chat route renders them: continue_final_message (text content, a
# list of parts, a template that trims the text), reasoning under its three names.
TRIMMING = """{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"""
THINKING = """{% for m in messages %}[{{ m.role }}{% if m.thinking %} thinking={{ m.thinking }}{% endif %}{% if m.reasoning_content %} rc={{ m.reasoning_content }}{% endif %}] {{ m.content }} {{ m | tojson }}
{% endfor %}"""
PARTS = """{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}|{% endfor %}{% endif %};{% endfor %}"""

CONVERSATIONS = [
    ("continue_text", CHATML_TOOLS, dict(messages=CONVERSATION + [
        {"role": "assistant", "content": "Four, "}], continue_final_message=True)),
    ("continue_parts", PARTS, dict(messages=[{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b "}]}],
        continue_final_message=True)),
    ("continue_trimmed", TRIMMING, dict(messages=[{"role": "user", "content": "x"}, {
        "role": "assistant", "content": "open  "}], continue_final_message=True)),
    ("continue_empty", TRIMMING, dict(messages=[], continue_final_message=True)),
    ("continue_dropped", "{% for m in messages %}{{ m.role }}{% endfor %}content", dict(messages=[
        {"role": "assistant", "content": "gone"}], continue_final_message=True)),
    ("reasoning", THINKING, dict(messages=[{"role": "user", "content": "q"}, {
        "role": "assistant", "content": "a", "reasoning": "because"}, {
        "role": "assistant", "thinking": "t", "content": "b", "reasoning_content": "rc"}])),
]


def render_conversation(template, call):
    call = dict(call)
    messages = call.pop("messages")
    try:
        rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                            **call)
        return {"rendered": rendered[0]}
    except Exception as e:
        return {"error": str(e)}


# A conversation as the chat route tokenizes it: the template's text, encoded without special
# tokens added, by transformers with the qwen2 golden tokenizer (tests/golden/tokenizer/qwen2).
TOKENIZED = dict(template=CHATML_TEXT, messages=[
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 2? Ünïcode too."}], tools=TOOLS,
    add_generation_prompt=True)


# Templates in the styles real ones use, each rendered by transformers' apply_chat_template on
# one of the project's test tokenizers (tests/golden/tokenizer/*), text and ids stored.
HOISTING = """{%- macro render_call(call) -%}
[CALL {{ call.function.name }} {{ call.function.arguments | tojson }}]
{%- endmacro -%}
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system = none %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) and message['role'] != 'tool' %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {{- '[INST] ' }}{% if loop.first and system %}{{ system + '\n\n' }}{% endif %}{{ message['content'] | trim }}{{ ' [/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message.tool_calls %}{% for call in message.tool_calls %}{{ render_call(call) }}{% endfor %}{% endif %}
        {{- ' ' + (message['content'] or '') | trim }}{% if not loop.last %}{{ eos_token }}{% endif %}
    {%- elif message['role'] == 'tool' %}
        {{- '[RESULT ' + message.tool_call_id + '] ' + message.content + ' [/RESULT]' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ ' ' }}{% endif %}
"""

QWEN3_STYLE = """{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content or '' %}
        {%- if loop.index0 > ns.last_query_index and message.reasoning_content %}
            {{- '<|im_start|>assistant\n<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' + tool_call.function.arguments | tojson + '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""

AGENT = [
    {"role": "system", "content": "Tu es un assistant prudent. 你好."},
    {"role": "user", "content": "Quel temps fait-il à Zürich ?"},
    {"role": "assistant", "content": "", "reasoning_content": "\nNeed the tool.\n",
     "tool_calls": [{"type": "function", "function": {"name": "weather",
                                                      "arguments": {"city": "Zürich", "unit": "°C"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21}"},
    {"role": "tool", "tool_call_id": "c2", "content": "sunny ☀"},
]
WEATHER = [{"type": "function", "function": {"name": "weather", "description": "Météo",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  2 + 2?  "},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "Et 3 × 3 ?"},
]

APPLY = [
    ("qwen3_agent_thinking_off", "qwen2", QWEN3_STYLE, dict(messages=AGENT, tools=WEATHER,
     add_generation_prompt=True, enable_thinking=False), {"eos_token": "<|im_end|>"}),
    ("qwen3_agent", "qwen2", QWEN3_STYLE, dict(messages=AGENT[1:], add_generation_prompt=True),
     {"eos_token": "<|im_end|>"}),
    ("hoisting_turns", "sentencepiece", HOISTING, dict(messages=TURNS, add_generation_prompt=True),
     {"bos_token": "<s>", "eos_token": "</s>"}),
    ("hoisting_tool_call", "sentencepiece", HOISTING, dict(messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": AGENT[2]["tool_calls"]},
        {"role": "tool", "tool_call_id": "c1", "content": "21"}]), {"bos_token": "<s>", "eos_token": "</s>"}),
    ("hoisting_bad_order", "sentencepiece", HOISTING, dict(messages=[
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
     {"bos_token": "<s>", "eos_token": "</s>"}),
    ("llama3_style", "llama3", LLAMA3_STYLE, dict(messages=TURNS, add_generation_prompt=True),
     {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("chatml_gpt2", "gpt2", CHATML_TEXT, dict(messages=TURNS, tools=WEATHER, add_generation_prompt=True),
     {"eos_token": "<|endoftext|>"}),
]


def applied():
    from transformers import PreTrainedTokenizerFast
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for name, tokenizer, template, call, special in APPLY:
        tok = PreTrainedTokenizerFast(
            tokenizer_file=os.path.join(here, "tokenizer", tokenizer, "tokenizer.json"), **special)
        call = dict(call)
        case = {"name": name, "tokenizer": tokenizer, "template": template, "special": special,
                "messages": call.pop("messages"), "tools": call.pop("tools", None),
                "add_generation_prompt": call.pop("add_generation_prompt", False), "kwargs": call}
        try:
            text = tok.apply_chat_template(case["messages"], tools=case["tools"],
                                           chat_template=template, tokenize=False,
                                           add_generation_prompt=case["add_generation_prompt"],
                                           **call)
            case["text"] = text
            case["ids"] = tok.encode(text, add_special_tokens=False)
        except Exception as e:
            case["error"] = str(e)
        out.append(case)
    return out


def tokenized():
    from transformers import PreTrainedTokenizerFast
    here = os.path.dirname(os.path.abspath(__file__))
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(here, "tokenizer", "qwen2", "tokenizer.json"))
    text = tok.apply_chat_template(TOKENIZED["messages"], tools=TOKENIZED["tools"],
                                   chat_template=TOKENIZED["template"],
                                   add_generation_prompt=True, tokenize=False)
    return dict(TOKENIZED, text=text, ids=tok.encode(text, add_special_tokens=False))


def main():
    conversations = []
    for name, template, call in CONVERSATIONS:
        case = {"name": name, "template": template, "messages": call["messages"],
                "continue_final_message": call.get("continue_final_message", False),
                "add_generation_prompt": call.get("add_generation_prompt", False)}
        case.update(render_conversation(template, call))
        conversations.append(case)
    out = []
    for name, template, call in CASES:
        call = dict(call)
        variables = {"messages": call.pop("messages"), "tools": call.pop("tools", None),
                     "documents": call.pop("documents", None),
                     "add_generation_prompt": call.pop("add_generation_prompt", False)}
        variables.update(SPECIAL)
        variables.update(call)
        case = {"name": name, "template": template, "variables": variables}
        try:
            rendered, _ = render_jinja_template(
                conversations=[variables["messages"]], tools=variables["tools"],
                documents=variables["documents"], chat_template=template,
                add_generation_prompt=variables["add_generation_prompt"],
                **{k: v for k, v in variables.items()
                   if k not in ("messages", "tools", "documents", "add_generation_prompt")})
            case["rendered"] = rendered[0]
        except Exception as e:  # the reference's error text
            case["error"] = str(e)
        out.append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template", "golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                   "cases": out, "conversations": conversations, "tokenized": tokenized(),
                   "applied": applied()}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases and {len(conversations)} conversations to {path}")


if __name__ == "__main__":
    main()
