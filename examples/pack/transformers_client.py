"""A real client of a kernel pack: a Hugging Face ``transformers`` model built from its config with random
weights (a few layers), its linear layers routed through the pack's op by one documented call, logits
compared with plain torch's, and prefill / decode step times against plain torch, eager and under
``torch.compile``.

    python examples/pack/transformers_client.py PACK_DIR EXTENSION.so OUT_JSON [--model qwen2.5-7b] [--layers 2]

The routing call is the pack's own (torch/<name>_torch.py)::

    import cutegen_pack_torch; cutegen_pack_torch.route_linears(model)

Needs torch with CUDA, a Hopper GPU and transformers (no download: the config is written out here). The
model's own linear shapes are what run: for Qwen2 the q/k/v and gate/up projections are separate layers,
so some of their (N, K) are not in a shapes file of fused projections and go to the pack's class default
(the JSON lists the kernel each layer shape got).
"""
# example-test: gpu (needs torch with CUDA, a Hopper GPU, transformers and a built pack; bench/gpu_pack.sh runs it)
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

# config.json values of the public checkpoints (hidden, intermediate, heads, KV heads, vocabulary)
MODELS = {
    "qwen2.5-7b": dict(arch="qwen2", hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064),
    "qwen2.5-14b": dict(arch="qwen2", hidden_size=5120, intermediate_size=13824, num_attention_heads=40,
                        num_key_value_heads=8, vocab_size=152064),
    "llama3.1-8b": dict(arch="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256),
}


def build(name: str, layers: int):
    import transformers
    spec = dict(MODELS[name])
    arch = spec.pop("arch")
    cfg_cls, model_cls = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
                          "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[arch]
    cfg = cfg_cls(num_hidden_layers=layers, max_position_embeddings=8192, attn_implementation="sdpa", **spec)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_cls(cfg).to(torch.bfloat16).eval()
    return model


def load_pack_module(pack_dir: str):
    name = json.load(open(os.path.join(pack_dir, "pack.json")))["name"]
    spec = importlib.util.spec_from_file_location(f"{name}_torch", os.path.join(pack_dir, "torch", f"{name}_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    # registered under its name, as `import NAME_torch` would: torch.compile re-imports the module of every
    # global the routed forward touches, by name
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def step_samples(fn, iters, warm=3):
    """Wall times (ms) of `iters` synchronized calls after `warm` unmeasured ones."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def steps(model, ids):
    """(prefill, decode): the prompt's forward, then one token with the prompt's KV cache."""
    @torch.no_grad()
    def prefill():
        return model(ids, use_cache=True)

    out = prefill()
    cache = out.past_key_values
    nxt = out.logits[:, -1:].argmax(-1)

    @torch.no_grad()
    def decode():
        # the cache grows by one token per call; crop it back so every step sees the same length
        r = model(nxt, past_key_values=cache, use_cache=True)
        if hasattr(cache, "crop"):
            cache.crop(ids.shape[1])
        return r

    return prefill, decode


def measure_pair(plain, routed, ids, iters, rounds):
    """Median step times (ms) of the plain and the routed model, measured in alternating rounds so that clock
    and thermal drift fall on both alike (one model after the other drifted by up to 1.5x between runs)."""
    fns = {"plain": steps(plain, ids), "pack": steps(routed, ids)}
    samples = {(who, phase): [] for who in fns for phase in ("prefill", "decode")}
    for _ in range(rounds):
        for who, (prefill, decode) in fns.items():
            samples[(who, "prefill")] += step_samples(prefill, iters)
            samples[(who, "decode")] += step_samples(decode, iters)
    return {who: {phase: statistics.median(samples[(who, phase)]) for phase in ("prefill", "decode")}
            for who in fns}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pack_dir")
    ap.add_argument("so")
    ap.add_argument("out_json")
    ap.add_argument("--model", default="qwen2.5-7b", choices=sorted(MODELS))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prefill tokens (batch 1)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20, help="measured steps per model and round")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (plain, pack) per phase")
    ap.add_argument("--tolerance", type=float, default=5e-2, help="max |logit diff| / max |logit|")
    args = ap.parse_args()

    model = build(args.model, args.layers)
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.prompt), device="cuda", generator=gen)
    res = {"model": args.model, "layers": args.layers, "prompt": args.prompt, "batch": args.batch,
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import transformers
    res["transformers"] = transformers.__version__

    def save():                 # after every step: a run cut short by its time limit keeps what it measured
        with open(args.out_json, "w") as f:
            json.dump(res, f, indent=1)

    routed_model = build(args.model, args.layers)     # the same seed: the same weights
    with torch.no_grad():
        ref = model(ids).logits.float()

    pack = load_pack_module(args.pack_dir)
    ops = pack.load(args.so)
    routed = pack.route_linears(routed_model, args.so)   # the one-line call
    res["routed_linears"] = routed
    fb0 = ops.pack_fallbacks()
    with torch.no_grad():
        got = routed_model(ids).logits.float()
    err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6))
    res["logits_rel_err"] = err
    res["logits_ok"] = err <= args.tolerance
    res["fallback_calls"] = ops.pack_fallbacks() - fb0
    save()
    # which kernel each distinct linear shape got, at the prompt's M and at decode's M
    shapes = sorted({(m.out_features, m.in_features) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    res["kernels"] = []
    for n, k in shapes:
        for m in (args.batch * args.prompt, args.batch):
            a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).t()
            res["kernels"].append({"m": m, "n": n, "k": k, "explain": ops.explain(a, b)})
    res["timing"] = f"median of {args.rounds} alternating rounds x {args.iters} synchronized steps per model"
    eager = measure_pair(model, routed_model, ids, args.iters, args.rounds)
    res["plain_eager_ms"], res["pack_eager_ms"] = eager["plain"], eager["pack"]
    for phase in ("prefill", "decode"):
        res[f"speedup_eager_{phase}"] = res["plain_eager_ms"][phase] / res["pack_eager_ms"][phase]
    save()
    # torch.compile last (it takes the longest): the pack's op traces through its fake implementation
    compiled = measure_pair(torch.compile(model), torch.compile(routed_model), ids, args.iters, args.rounds)
    res["plain_compile_ms"], res["pack_compile_ms"] = compiled["plain"], compiled["pack"]
    for phase in ("prefill", "decode"):
        res[f"speedup_compile_{phase}"] = res["plain_compile_ms"][phase] / res["pack_compile_ms"][phase]
    save()
    print(json.dumps({k: v for k, v in res.items() if k != "kernels"}, indent=1))
    return 0 if res["logits_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
