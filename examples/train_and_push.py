"""A PyTorch training loop that pushes its weights into two running hotswap workers after every
optimizer step, and watches what they generate change as the loss falls.

The model is a Llama loaded from a checkpoint (by default one made here with hotswap-make-model).
Two workers serve it: one is fed over `shm` with the trainer's parameters living in a
SharedWeightArena (the worker reads them in place: the trainer copies nothing), the other over
`gloo`. Every push is verified: each worker's weights are compared bit for bit with the
trainer's. The model is taught one sequence; the workers' greedy continuation of its first two
tokens turns into the rest of it.

    PYTHONPATH=build/python python3 examples/train_and_push.py \\
        --worker build/worker/hotswap-worker --make-model build/model_loader/hotswap-make-model

Exits non-zero if a push fails, a verification fails, or the workers do not end up generating
what the trainer's own model generates.
"""

import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import torch
from torch import nn

import hotswap


# --- The trainer's model: a Llama, as Hugging Face's LlamaForCausalLM computes it -------------

class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        h, d = c["hidden_size"], self.head_dim
        bias = c.get("attention_bias", False)
        self.q_proj = nn.Linear(h, self.heads * d, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """Parameter names are the checkpoint's (model.layers.0.self_attn.q_proj.weight, ...), so
    the trainer pushes its named_parameters() as they are."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.model.layers = nn.ModuleList(DecoderLayer(config)
                                          for _ in range(config["num_hidden_layers"]))
        self.model.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])
        if not config.get("tie_word_embeddings", False):
            self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    def forward(self, ids):
        c = self.config
        d = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        inv_freq = 1.0 / c.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2).float() / d)
        angles = torch.outer(torch.arange(ids.shape[1]).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        head = self.lm_head.weight if hasattr(self, "lm_head") else self.model.embed_tokens.weight
        return x @ head.t()

    @torch.no_grad()
    def greedy(self, prompt, max_tokens):
        ids = list(prompt)
        for _ in range(max_tokens):
            ids.append(int(self(torch.tensor([ids]))[0, -1].argmax()))
        return ids[len(prompt):]


def load_model(directory):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    model = Llama(config)
    state = hotswap.load_checkpoint(directory)
    missing = set(dict(model.named_parameters())) ^ set(state)
    if missing:
        raise ValueError(f"checkpoint and model disagree on {sorted(missing)}")
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model


def add_model_arguments(parser):
    """The flags both training examples take: the binaries, and a checkpoint to start from."""
    parser.add_argument("--worker", default="hotswap-worker", help="the hotswap-worker binary")
    parser.add_argument("--make-model", default="hotswap-make-model",
                        help="hotswap-make-model, to make the starting checkpoint")
    parser.add_argument("--model", help="a Llama checkpoint to start from instead")


def starting_checkpoint(args, tmp):
    """--model, or a small Llama made in `tmp` with hotswap-make-model."""
    if args.model is not None:
        return args.model
    directory = os.path.join(tmp, "model")
    subprocess.run([args.make_model, "--arch", "llama", "--layers", "2", "--hidden-size", "64",
                    "--intermediate-size", "128", "--heads", "4", "--kv-heads", "2", "--vocab",
                    "128", "--seed", "7", "--out", directory], check=True,
                   stdout=subprocess.DEVNULL)
    return directory


def train_step(model, optimizer, inputs, labels):
    """One optimizer step of next-token cross-entropy; the loss, as a float."""
    loss = nn.functional.cross_entropy(model(inputs)[0], labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def greedy_tokens(client, prompt, max_tokens, model=None):
    """(the worker's greedy tokens after `prompt`, their weight_versions spans); through LoRA
    adapter `model` when one is named."""
    params = {"prompt_token_ids": prompt, "max_tokens": max_tokens, "temperature": 0,
              "ignore_eos": True}
    if model is not None:
        params["model"] = model
    reply = client.call("generate", params)
    return reply["token_ids"], reply["weight_versions"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory(prefix="hotswap-train-") as tmp:
        directory = starting_checkpoint(args, tmp)
        model = load_model(directory)
        # The trainer's parameters move into shared memory: the optimizer updates them there,
        # and the shm worker reads them in place.
        arena = hotswap.SharedWeightArena.from_module(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        sequence = [1, 17, 42, 99, 5, 63, 28, 77, 110, 3]
        prompt, target = sequence[:2], sequence[2:]
        inputs, labels = torch.tensor([sequence[:-1]]), torch.tensor(sequence[1:])

        with hotswap.WorkerProcess(args.worker, directory, "shm") as shm_worker, \
                hotswap.WorkerProcess(args.worker, directory, "gloo") as gloo_worker:
            shm_client = hotswap.ZmqWeightSyncClient(shm_worker.endpoint, timeout=60)
            gloo_client = hotswap.ZmqWeightSyncClient(gloo_worker.endpoint, timeout=60)
            shm_info = hotswap.ShmTrainerInitInfo(num_workers=1, rank=0, arena=arena, timeout=60)
            gloo_info = hotswap.GlooTrainerInitInfo("127.0.0.1", hotswap.free_port(), world_size=2,
                                                    rank=0, timeout=60)
            factory = hotswap.WeightTransferTrainerFactory
            with factory.trainer_init(shm_info, client=shm_client, source=model) as shm, \
                    factory.trainer_init(gloo_info, client=gloo_client, source=model) as gloo:
                before, _ = greedy_tokens(shm_client, prompt, len(target))
                print(f"before training: workers continue {prompt} with {before}")
                seen = [before]
                for step in range(1, args.steps + 1):
                    loss = train_step(model, optimizer, inputs, labels)
                    version = f"step-{step}"
                    start = time.perf_counter()
                    shm.push(weight_version=version, verify=True)
                    middle = time.perf_counter()
                    gloo.push(weight_version=version, verify=True)
                    end = time.perf_counter()
                    shm_tokens, spans = greedy_tokens(shm_client, prompt, len(target))
                    gloo_tokens, _ = greedy_tokens(gloo_client, prompt, len(target))
                    if spans != [[version, 0, len(target)]]:
                        raise SystemExit(f"step {step}: the shm worker served {spans}")
                    if shm_tokens != gloo_tokens:
                        raise SystemExit(f"step {step}: the workers disagree: shm {shm_tokens}, "
                                         f"gloo {gloo_tokens}")
                    if shm_tokens != seen[-1]:
                        seen.append(shm_tokens)
                    if step == 1 or step % 5 == 0 or step == args.steps:
                        print(f"step {step:3d}: loss {loss:.4f}; pushed and verified: "
                              f"shm {1e3 * (middle - start):.1f} ms, gloo "
                              f"{1e3 * (end - middle):.1f} ms; workers continue {prompt} with "
                              f"{shm_tokens}")
                final, _ = greedy_tokens(shm_client, prompt, len(target))
                own = model.greedy(prompt, len(target))
        print(f"the workers' continuation changed {len(seen) - 1} times as the loss fell; "
              f"target {target}")
        if final != own:
            raise SystemExit(f"the workers generate {final}, the trainer's model {own}")
        if final == before:
            raise SystemExit("training did not change what the workers generate")
        if final != target:
            raise SystemExit(f"the workers generate {final}, not the sequence taught ({target})")
        print("train_and_push: ok")


if __name__ == "__main__":
    main()
