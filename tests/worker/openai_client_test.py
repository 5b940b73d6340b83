#!/usr/bin/env python3
"""The `openai` package as a rollout client of a real hotswap-worker: models.list(),
completions.create() whole and streamed, with vLLM's extra fields, and an error as the package
raises it.

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


def main(worker, make_model, tokenizer):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([make_model, "--arch", "qwen2", "--layers", "2", "--hidden-size", "64",
                        "--intermediate-size", "128", "--heads", "4", "--kv-heads", "2",
                        "--vocab", "512", "--tokenizer", tokenizer, "--out", f"{tmp}/m"],
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
            print("openai client: ok")
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    main(*sys.argv[1:4])
