#!/usr/bin/env python3
"""A model profile (as `gradsync simulate --model-profile FILE.json` reads it, docs/simulator.md)
of a decoder-only language model, layer by layer: its parameter tensors, and each layer's
share of a step's compute by its matmul FLOPs (backward = 2 x forward). Two sources of time:

  scripts/lm_profile.py gpt --compute-ms 84.2 [--layers 2 --width 128 --heads 4 --context 64]
      --batch 16 --out FILE
    gradsync's own `--model gpt` (byte vocabulary; its tensors in registration order), with a
    step's compute as measured on this machine (a run's "compute" per step, e.g. bench_lm's).

  scripts/lm_profile.py llama --layers 42 --width 4096 --heads 32 --kv-heads 8 --mlp 14336
      --vocab 128256 --context 8192 --tokens-per-step 131072 --peak-tflops 989 --mfu 0.4
      --out FILE
    a Llama-3-style model on one accelerator: a step of `--tokens-per-step` tokens per device
    at `--mfu` of `--peak-tflops` (6 x parameters FLOPs per token, attention's score and value
    products added), and AdamW's update as 7 fp32 passes over the parameters at
    `--memory-gbps`.
"""
import argparse
import json


def linear(name, fan_in, fan_out, bias=True):
    tensors = [{"name": f"{name}.weight", "dims": [fan_out, fan_in]}]
    if bias:
        tensors.append({"name": f"{name}.bias", "dims": [fan_out]})
    return tensors


def norm(name, width, bias=True):
    return [{"name": f"{name}.weight", "dims": [width]}] + (
        [{"name": f"{name}.bias", "dims": [width]}] if bias else [])


def elements(tensors):
    total = 0
    for t in tensors:
        n = 1
        for d in t["dims"]:
            n *= d
        total += n
    return total


def gpt_layers(a):
    """gradsync's gpt (src/torch/models/gpt.cc): the tensors in registration order, and each
    layer's forward FLOPs per token (2 per weight of a matmul, attention's products added)."""
    w, ctx, v = a.width, a.context, 256
    embed = [{"name": "token_embedding.weight", "dims": [v, w]},
             {"name": "position_embedding.weight", "dims": [ctx, w]}]
    layers = [("embedding", embed, 0)]
    for i in range(a.layers):
        p = f"blocks.{i}"
        attention = (norm(f"{p}.norm1", w) + linear(f"{p}.attention.qkv", w, 3 * w) +
                     linear(f"{p}.attention.out", w, w))
        mlp = norm(f"{p}.norm2", w) + linear(f"{p}.expand", w, 4 * w) + linear(f"{p}.project", 4 * w, w)
        layers.append((f"{p}.attention", attention, 2 * 4 * w * w + 2 * 2 * ctx * w))
        layers.append((f"{p}.mlp", mlp, 2 * 8 * w * w))
    layers.append(("head", norm("norm", w) + linear("head", w, v, bias=False), 2 * w * v))
    return layers


def llama_layers(a):
    w, kv = a.width, a.width * a.kv_heads // a.heads
    layers = [("embedding", [{"name": "tok_embeddings.weight", "dims": [a.vocab, w]}], 0)]
    for i in range(a.layers):
        p = f"layers.{i}"
        attention = (norm(f"{p}.attention_norm", w, bias=False) +
                     linear(f"{p}.attention.wq", w, w, bias=False) +
                     linear(f"{p}.attention.wk", w, kv, bias=False) +
                     linear(f"{p}.attention.wv", w, kv, bias=False) +
                     linear(f"{p}.attention.wo", w, w, bias=False))
        mlp = (norm(f"{p}.ffn_norm", w, bias=False) + linear(f"{p}.feed_forward.w1", w, a.mlp, False) +
               linear(f"{p}.feed_forward.w3", w, a.mlp, False) +
               linear(f"{p}.feed_forward.w2", a.mlp, w, False))
        layers.append((f"{p}.attention", attention,
                       2 * elements(attention) + 2 * 2 * a.context * w // 2))  # causal: half
        layers.append((f"{p}.feed_forward", mlp, 2 * elements(mlp)))
    head = norm("norm", w, bias=False) + linear("output", w, a.vocab, bias=False)
    layers.append(("output", head, 2 * elements(head)))
    return layers


def profile(name, device, source, layers, step_seconds, batch, update_seconds, codecs_on_cpu):
    flops = sum(f for _, _, f in layers)
    out = []
    for layer, tensors, f in layers:
        forward = step_seconds * f / flops / 3  # backward = 2 x forward
        out.append({"name": layer, "forward_s": forward, "backward_s": 2 * forward,
                    "tensors": tensors})
    return {"name": name, "device": device, "source": source, "codecs_on_cpu": codecs_on_cpu,
            "batch_size": batch, "update_s": update_seconds, "layers": out}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["gpt", "llama"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="gpt: windows per worker and step")
    parser.add_argument("--compute-ms", type=float, help="gpt: a step's measured compute")
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--mlp", type=int, default=14336)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--tokens-per-step", type=int, default=131072, help="llama: per device")
    parser.add_argument("--peak-tflops", type=float, default=989, help="llama: H100 bf16 dense")
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--memory-gbps", type=float, default=3350, help="llama: H100 HBM3")
    parser.add_argument("--out", required=True)
    a = parser.parse_args()
    if a.model == "gpt":
        if not a.compute_ms:
            parser.error("gpt needs --compute-ms (a step's measured compute)")
        layers = gpt_layers(a)
        name = f"gpt:layers={a.layers},width={a.width},heads={a.heads},context={a.context}"
        result = profile(name, "this machine's CPU (measured step compute)",
                         f"scripts/lm_profile.py gpt --compute-ms {a.compute_ms}: a measured "
                         "step's compute spread over the layers by their matmul FLOPs",
                         layers, a.compute_ms / 1e3, a.batch, 0, codecs_on_cpu=True)
    else:
        layers = llama_layers(a)
        parameters = sum(elements(t) for _, t, _ in layers)
        per_token = 3 * sum(f for _, _, f in layers)  # forward + backward
        step = per_token * a.tokens_per_step / (a.peak_tflops * 1e12 * a.mfu)
        update = 7 * 4 * parameters / (a.memory_gbps * 1e9)
        result = profile(f"llama-{parameters / 1e9:.1f}b", f"accelerator at {a.mfu:.0%} of "
                         f"{a.peak_tflops:g} TFLOP/s",
                         f"scripts/lm_profile.py llama: {parameters:,} parameters, "
                         f"{a.tokens_per_step:,} tokens per device and step at MFU {a.mfu}",
                         layers, step, a.tokens_per_step // a.context, update,
                         codecs_on_cpu=False)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    total = sum(elements(t) for _, t, _ in layers)
    compute = sum(l["forward_s"] + l["backward_s"] for l in result["layers"])
    print(f"{a.out}: {result['name']}, {total:,} parameters, compute {compute * 1e3:.1f} ms "
          f"per step, update {result['update_s'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
