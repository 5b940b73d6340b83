#!/usr/bin/env python3
"""Makes the golden vectors that hold hotswap's LoRA adapters against `transformers` + `peft`:
the logits and greedy continuation of each golden model (tests/golden/model_loader/<fixture>,
made by make_golden.py) with a PEFT LoRA adapter of random weights (B non-zero) applied.

Run it from a virtual environment OUTSIDE the repository, never in CI:

    python3 -m venv /opt/hotswap-golden-venv
    /opt/hotswap-golden-venv/bin/pip install torch transformers peft safetensors
    /opt/hotswap-golden-venv/bin/python tests/golden/make_lora_golden.py

For every fixture it writes tests/golden/lora/<fixture>/: two adapters in PEFT's own format
(`wide/`: rank 8 on q, k, v, o, gate, up and down projections, lora_alpha 16; `narrow/`: rank 4
with rsLoRA on q, v and down only, so a fused qkv or gate_up is only partly adapted), and
golden.json with each adapter's logits and greedy tokens. Versions are recorded in golden.json.
"""

import json
import os
import shutil
import sys

import peft
import torch
import transformers

from make_golden import HERE, PROMPT, greedy_steps  # the base fixtures' prompt and greedy run

FIXTURES = ["llama_f32", "llama3_rope_tied_f32", "mistral_window_f32", "qwen2_f32", "qwen3_f32",
            "qwen3_moe_f32", "mixtral_window_f32"]
ADAPTERS = {
    "wide": dict(r=8, lora_alpha=16, use_rslora=False,
                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                 "down_proj"]),
    "narrow": dict(r=4, lora_alpha=8, use_rslora=True,
                   target_modules=["q_proj", "v_proj", "down_proj"]),
}


# A mixture of experts' MLP is not adapted: hotswap refuses expert LoRA by name, and PEFT, asked
# for gate/up/down projections, adapts the experts' fused parameters (and not the dense layers
# beside them). There the adapters cover attention only.
MOE_FIXTURES = {"qwen3_moe_f32", "mixtral_window_f32"}


def targets(fixture, names):
    if fixture not in MOE_FIXTURES:
        return names
    return [n for n in names if n in ("q_proj", "k_proj", "v_proj", "o_proj")]


def base_model(fixture):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(HERE, "model_loader", fixture), dtype=torch.float32,
        attn_implementation="eager")
    return model.eval()


def randomize(model, seed):
    """A and B drawn at random, so that the adapter moves the logits by a clear margin (PEFT
    starts B at zero, which adapts nothing)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_" in name:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 / p.shape[-1] ** 0.5))


def run(model):
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    return {"logits": [[round(v, 6) for v in row] for row in logits.tolist()],
            "greedy": greedy_steps(model, ids)}


def make_fixture(fixture, seed):
    out = os.path.join(HERE, "lora", fixture)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    golden = {"made_by": {"transformers": transformers.__version__, "peft": peft.__version__,
                          "torch": torch.__version__},
              "fixture": fixture, "prompt": PROMPT, "adapters": {}}
    base_logits = None
    for i, (name, settings) in enumerate(ADAPTERS.items()):
        model = base_model(fixture)
        if base_logits is None:
            with torch.no_grad():
                base_logits = model(input_ids=torch.tensor([PROMPT])).logits[0].float()
        settings = dict(settings, target_modules=targets(fixture, settings["target_modules"]))
        config = peft.LoraConfig(lora_dropout=0.0, bias="none", **settings)
        adapted = peft.get_peft_model(model, config)
        randomize(adapted, seed + i)
        adapted.eval()
        adapted.save_pretrained(os.path.join(out, name), safe_serialization=True)
        # Nothing of this machine in the repository, and the same file from run to run: the base
        # model named by its place in the repository, the target modules (a set) in order.
        config_path = os.path.join(out, name, "adapter_config.json")
        with open(config_path) as f:
            saved = json.load(f)
        saved["base_model_name_or_path"] = f"tests/golden/model_loader/{fixture}"
        if isinstance(saved["target_modules"], list):
            saved["target_modules"] = sorted(saved["target_modules"])
        with open(config_path, "w") as f:
            json.dump(saved, f, indent=2, sort_keys=True)
        result = run(adapted)
        # How far the adapter moved the logits: a test that ignored it would fail by this much.
        result["moved_by"] = (torch.tensor(result["logits"]) - base_logits).abs().max().item()
        golden["adapters"][name] = result
        readme = os.path.join(out, name, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
        print(f"{fixture}/{name}: greedy {[s['token'] for s in result['greedy']]}, "
              f"moved the logits by up to {result['moved_by']:.3f}")
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)


if __name__ == "__main__":
    only = set(sys.argv[1:])
    for i, fixture in enumerate(FIXTURES):
        if not only or fixture in only:
            make_fixture(fixture, 4321 + 10 * i)
