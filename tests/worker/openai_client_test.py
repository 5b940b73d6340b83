#!/usr/bin/env python3
"""The `openai` package as a rollout client of a real hotswap-worker: models.list(),
completions.create() and chat.completions.create() whole and streamed, with vLLM's extra fields,
and errors as the package raises them.

    openai_client_test.py HOTSWAP_WORKER HOTSWAP_MAKE_MODEL TOKENIZER_JSON
"""

import socket
import subprocess
import sys
import tempfile
import time

import openai


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def check_chat(client):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Grüße aus Zürich"}]
    whole = client.chat.completions.create(
        model="tiny", messages=messages, max_completion_tokens=8, temperature=0, logprobs=True,
        top_logprobs=2, extra_body={"ignore_eos": True, "return_token_ids": True,
                                    "return_weight_versions": True})
    choice = whole.choices[0]
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-"), whole
    assert choice.message.role == "assistant" and choice.finish_reason == "length", choice
    assert whole.usage.completion_tokens == 8, whole.usage
    assert len(choice.logprobs.content) == 8
    assert all(len(p.top_logprobs) == 2 for p in choice.logprobs.content), choice.logprobs
    assert choice.model_extra["weight_versions"] == [{"version": "default", "start": 0, "end": 8}]

    text, roles = "", []
    for chunk in client.chat.completions.create(model="tiny", messages=messages,
                                                max_completion_tokens=8, temperature=0,
                                                stream=True, extra_body={"ignore_eos": True}):
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
    assert roles == ["assistant"] and text == choice.message.content, (roles, text, choice)

    try:
        client.chat.completions.create(model="tiny", messages=messages, top_logprobs=2)
        raise AssertionError("top_logprobs without logprobs must be refused")
    except openai.BadRequestError as e:
        assert "when using `top_logprobs`, `logprobs` must be set to true." in str(e), e


def main(worker, make_model, tokenizer):
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/chatml.jinja", "w", encoding="utf-8") as f:
            f.write(CHATML)
        subprocess.run([make_model, "--arch", "qwen2", "--layers", "2", "--hidden-size", "64",
                        "--intermediate-size", "128", "--heads", "4", "--kv-heads", "2",
                        "--vocab", "512", "--tokenizer", tokenizer, "--chat-template",
                        f"{tmp}/chatml.jinja", "--out", f"{tmp}/m"],
                       check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        proc = subprocess.Popen([worker, "--model", f"{tmp}/m", "--control", "tcp://127.0.0.1:*",
                                 "--http-port", str(port), "--served-model-name", "tiny"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = proc.stdout.readline()
            assert "ready" in line, line
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
            assert [m.id for m in client.models.list()] == ["tiny"]

            whole = client.completions.create(
                model="tiny", prompt=["Hello world", "Rollouts"], max_tokens=8, n=2, seed=3,
                logprobs=2, extra_body={"ignore_eos": True, "return_token_ids": True,
                                                    "return_weight_versions": True})
            assert len(whole.choices) == 4, whole
            assert whole.usage.completion_tokens == 32, whole.usage
            first = whole.choices[0]
            assert first.finish_reason == "length"
            assert len(first.logprobs.tokens) == 8
            extra = first.model_extra
            assert len(extra["token_ids"]) == 8 and extra["weight_versions"] == [
                {"version": "default", "start": 0, "end": 8}], extra

            text, chunks = "", 0
            for chunk in client.completions.create(model="tiny", prompt="Hello world",
                                                   max_tokens=12, temperature=0, stream=True,
                                                   extra_body={"ignore_eos": True}):
                for c in chunk.choices:
                    text += c.text
                chunks += 1
            same = client.completions.create(model="tiny", prompt="Hello world", max_tokens=12,
                                             temperature=0, extra_body={"ignore_eos": True})
            assert chunks > 1 and text == same.choices[0].text, (chunks, text, same)

            try:
                client.completions.create(model="other", prompt="a")
                raise AssertionError("an unknown model must be refused")
            except openai.NotFoundError as e:
                assert "The model `other` does not exist." in str(e), e
            try:
                client.completions.create(model="tiny", prompt="a", n=2, temperature=0)
                raise AssertionError("greedy n=2 must be refused")
            except openai.BadRequestError as e:
                assert "n must be 1 when using greedy sampling" in str(e), e
            check_chat(client)
            print("openai client: ok")
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    main(*sys.argv[1:4])
