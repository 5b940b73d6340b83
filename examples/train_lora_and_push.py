"""A LoRA training loop that pushes only its adapter into two running hotswap workers after every
optimizer step, while they serve, and watches what they generate through the adapter change.

The base model is a Llama loaded from a checkpoint (by default one made here with
hotswap-make-model), frozen; LoRA (rank 16 on every projection) is what trains. With `peft`
installed the adapter is PEFT's own (`peft.get_peft_model`); without it, the same layers are
built here under PEFT's names, which is all hotswap reads. Two workers serve the base model with
--enable-lora: one is fed over `shm`, the adapter's parameters living in a SharedWeightArena (the
worker reads them in place), the other over `gloo`. Each push is hotswap's adapter round
(`push(lora_name=...)`): the workers serve the new adapter as "policy" from their next step on,
the base model untouched, and every push is verified against the workers' digests of the
adapter. The adapter is taught one sequence; the workers' greedy continuation of its first two
tokens through "policy" turns into the rest of it, while the base model's stays what it was.

    PYTHONPATH=build/python python3 examples/train_lora_and_push.py \\
        --worker build/worker/hotswap-worker --make-model build/model_loader/hotswap-make-model

Exits non-zero if a push fails, a verification fails, or the workers do not end up generating
what the trainer's own model generates.
"""

import argparse
import os
import sys
import tempfile
import time

import torch
from torch import nn

import hotswap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The other example's Llama (as transformers computes it) and its flags.
from train_and_push import (  # noqa: E402
    add_model_arguments,
    greedy_tokens,
    load_model,
    starting_checkpoint,
    train_step,
)

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraLinear(nn.Module):
    """PEFT's LoRA linear layer under PEFT's names (`base_layer`, `lora_A.default`,
    `lora_B.default`): y = base(x) + B(A(x)) * alpha / r, B starting at zero."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.ModuleDict({"default": nn.Linear(base.in_features, r, bias=False)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, base.out_features, bias=False)})
        nn.init.kaiming_uniform_(self.lora_A["default"].weight, a=5 ** 0.5)
        nn.init.zeros_(self.lora_B["default"].weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + self.lora_B["default"](self.lora_A["default"](x)) * self.scaling


class PeftLayout(nn.Module):
    """What peft.get_peft_model wraps a model in, as far as names go: `base_model.model.<the
    model>` and `peft_config["default"]`."""

    def __init__(self, model, config):
        super().__init__()
        self.base_model = nn.Module()
        self.base_model.model = model
        self.peft_config = {"default": config}


def with_lora(model, r, alpha, require_peft):
    """(the model wrapped with LoRA on TARGET_MODULES, which library made it)."""
    try:
        import peft
    except ImportError:
        if require_peft:
            raise
        peft = None
    if peft is not None:
        config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGET_MODULES,
                                 lora_dropout=0.0, bias="none")
        return peft.get_peft_model(model, config), f"peft {peft.__version__}"
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in TARGET_MODULES and isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, r, alpha))
    for name, p in model.named_parameters():
        p.requires_grad = ".lora_" in name
    config = {"peft_type": "LORA", "r": r, "lora_alpha": alpha,
              "target_modules": TARGET_MODULES, "bias": "none"}
    return PeftLayout(model, config), "PEFT's layout, built here"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--require-peft", action="store_true",
                        help="fail where peft is not installed instead of building its layout")
    args = parser.parse_args()
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory(prefix="hotswap-train-lora-") as tmp:
        directory = starting_checkpoint(args, tmp)
        model, made_by = with_lora(load_model(directory), args.rank, 2 * args.rank,
                                   args.require_peft)
        inner = model.base_model.model  # the Llama, its projections now LoRA layers
        print(f"LoRA rank {args.rank} on {', '.join(TARGET_MODULES)} ({made_by})")
        # The adapter's parameters move into shared memory (the base model's stay where they
        # are): the optimizer updates them there, and the shm worker reads them in place.
        arena = hotswap.arena_from_parameters(hotswap.lora_parameters(model))
        source = hotswap.LoraSource(model)
        lora_config = hotswap.lora_config_of(model)
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trained, lr=args.lr)
        sequence = [1, 17, 42, 99, 5, 63, 28, 77, 110, 3]
        prompt, target = sequence[:2], sequence[2:]
        inputs, labels = torch.tensor([sequence[:-1]]), torch.tensor(sequence[1:])

        lora_flags = ("--enable-lora", "--max-lora-rank", str(args.rank))
        with hotswap.WorkerProcess(args.worker, directory, "shm", *lora_flags) as shm_worker, \
                hotswap.WorkerProcess(args.worker, directory, "gloo", *lora_flags) as gloo_worker:
            shm_client = hotswap.ZmqWeightSyncClient(shm_worker.endpoint, timeout=60)
            gloo_client = hotswap.ZmqWeightSyncClient(gloo_worker.endpoint, timeout=60)
            shm_info = hotswap.ShmTrainerInitInfo(num_workers=1, rank=0, arena=arena, timeout=60)
            gloo_info = hotswap.GlooTrainerInitInfo("127.0.0.1", hotswap.free_port(), world_size=2,
                                                    rank=0, timeout=60)
            factory = hotswap.WeightTransferTrainerFactory
            base_before, _ = greedy_tokens(shm_client, prompt, len(target))
            with factory.trainer_init(shm_info, client=shm_client, source=source) as shm, \
                    factory.trainer_init(gloo_info, client=gloo_client, source=source) as gloo:
                seen = []
                for step in range(1, args.steps + 1):
                    loss = train_step(inner, optimizer, inputs, labels)
                    version = f"step-{step}"
                    start = time.perf_counter()
                    shm.push(lora_name="policy", lora_config=lora_config, weight_version=version,
                             verify=True)
                    middle = time.perf_counter()
                    gloo.push(lora_name="policy", lora_config=lora_config, weight_version=version,
                              verify=True)
                    end = time.perf_counter()
                    shm_tokens, spans = greedy_tokens(shm_client, prompt, len(target), "policy")
                    gloo_tokens, _ = greedy_tokens(gloo_client, prompt, len(target), "policy")
                    # [model version, start, end, adapter version]: the base stays "default".
                    if spans != [["default", 0, len(target), version]]:
                        raise SystemExit(f"step {step}: the shm worker served {spans}")
                    if shm_tokens != gloo_tokens:
                        raise SystemExit(f"step {step}: the workers disagree: shm {shm_tokens}, "
                                         f"gloo {gloo_tokens}")
                    if not seen or shm_tokens != seen[-1]:
                        seen.append(shm_tokens)
                    if step == 1 or step % 10 == 0 or step == args.steps:
                        print(f"step {step:3d}: loss {loss:.4f}; adapter pushed and "
                              f"verified: shm {1e3 * (middle - start):.1f} ms, gloo "
                              f"{1e3 * (end - middle):.1f} ms; through 'policy' the workers "
                              f"continue {prompt} with {shm_tokens}")
                final, _ = greedy_tokens(shm_client, prompt, len(target), "policy")
                base_after, _ = greedy_tokens(gloo_client, prompt, len(target))
                with torch.no_grad():
                    own = inner.greedy(prompt, len(target))
                info = shm_client.call("weight_info")
        print(f"through 'policy' the workers' continuation changed {len(seen) - 1} times as the "
              f"loss fell; target {target}; weight_info {info}")
        if final != own:
            raise SystemExit(f"the workers generate {final}, the trainer's model {own}")
        if final != target:
            raise SystemExit(f"the workers generate {final}, not the sequence taught ({target})")
        if base_after != base_before:
            raise SystemExit(f"the base model changed: {base_before} before, {base_after} after")
        print("train_lora_and_push: ok")


if __name__ == "__main__":
    main()
