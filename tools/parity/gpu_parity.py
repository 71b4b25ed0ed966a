#!/usr/bin/env python3
"""Accuracy of PhotonInfer's CUDA backend at real model shapes, judged the way bf16 inference should be judged.

bf16 arithmetic differs from float32 by itself, so the question is not "does PhotonInfer match float32" but "is it
as close to float32 as transformers' own bf16 run is". For random-weight checkpoints with the exact shapes of
Llama-3.2-1B and Qwen3-0.6B (weights of standard deviation 0.05), this script computes the prompt logprobs of one
random prompt at --positions positions three ways:
  - transformers in float32 (the reference; the bf16 checkpoint's weights widen exactly),
  - transformers in bf16,
  - `photon generate --prompt-logprobs 0` on the GPU (and again with --tensor-parallel-size N for each N given),
and reports mean |delta logprob| against float32 for each, and PhotonInfer's ratio to transformers' bf16 error
(the bar: <= 1.25). Writes one JSON object per model to --out (JSON lines) and prints a table.

With --int8, also for group sizes 32, 64 and 128: the ideal round-to-nearest group quantization of the projections
(scale = max |w| / 127 per group, dequantized and run in float32 by transformers) against float32, PhotonInfer's
`--quantization int8 --group-size G` against float32 and against that ideal, and the top-1 agreement of the next
token at every position (PhotonInfer int8 vs float32, ideal vs float32). Where the compressed-tensors package is
installed, `photon quantize`'s checkpoint (group 128) is also loaded by transformers (float32) and compared with
PhotonInfer serving the same file.

Needs torch, transformers and a GPU. Usage:
  python3 tools/parity/gpu_parity.py --photon build/bin/photon --workdir /tmp/parity --out parity.jsonl [--tp 2]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from make_parity_data import rope_kwargs  # the RoPE spelling the installed transformers expects

def llama_3_2_1b():
    return "llama-3.2-1b-shape", LlamaForCausalLM, LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        tie_word_embeddings=True, initializer_range=0.05, bos_token_id=128000, eos_token_id=128001,
        **rope_kwargs(500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}))


def qwen3_0_6b():
    return "qwen3-0.6b-shape", Qwen3ForCausalLM, Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=True, initializer_range=0.05, bos_token_id=151643, eos_token_id=151645,
        **rope_kwargs(1000000.0))


def load(folder, dtype):
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype, attn_implementation="sdpa")
    return model.cuda().eval()


def hf_logprobs(model, prompt):
    """logprob of prompt[i] under the distribution at position i - 1, for i >= 1."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt], device="cuda")).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    ids = torch.tensor(prompt[1:], device="cuda")
    return lp[:-1].gather(1, ids[:, None])[:, 0].cpu()


def hf_top1(model, prompt):
    """The most likely next token at every position but the last."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt], device="cuda")).logits[0]
    return logits[:-1].argmax(dim=-1).cpu()


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_ideal(model, group):
    """Replaces every projection's weight by its ideal group-wise int8 quantization, dequantized (in place)."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear) or name.split(".")[-1] not in PROJECTIONS:
                continue
            w = module.weight.data.float()
            n, k = w.shape
            g = w.reshape(n, k // group, group)
            scale = g.abs().amax(dim=-1, keepdim=True) / 127.0
            q = torch.where(scale > 0, torch.round(g / scale), torch.zeros_like(g)).clamp(-127, 127)
            module.weight.data.copy_((q * scale).reshape(n, k).to(module.weight.dtype))


def photon_logprobs(photon, folder, prompt, tp, extra=(), top1=False):
    cmd = [photon, "generate", "--model", folder, "--device", "cuda", "--prompt-ids", ",".join(map(str, prompt)),
           "--prompt-logprobs", "1" if top1 else "0", "--max-tokens", "1", "--max-model-len", str(len(prompt) + 16),
           "--max-num-batched-tokens", "2048", "--tensor-parallel-size", str(tp), "--json", *extra]
    t0 = time.time()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    log(f"photon (tensor-parallel size {tp}) took {time.time() - t0:.1f} s")
    if run.returncode != 0:
        raise SystemExit(f"photon failed ({run.returncode}): {run.stderr[-2000:]}")
    out = json.loads(run.stdout.strip().splitlines()[-1])
    entries = out["prompt_logprobs"][1:]
    if len(entries) != len(prompt) - 1 or any(e["token"] != t for e, t in zip(entries, prompt[1:])):
        raise SystemExit("photon's prompt logprobs do not line up with the prompt")
    lp = torch.tensor([e["logprob"] for e in entries], dtype=torch.float64)
    if top1:
        return lp, torch.tensor([e["top"][0][0] for e in entries])
    return lp


START = time.time()


def log(message):
    print(f"[{time.time() - START:6.1f} s] {message}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photon", required=True, help="the photon executable")
    ap.add_argument("--workdir", required=True, help="folder for the generated checkpoints")
    ap.add_argument("--out", required=True, help="JSON-lines results file")
    ap.add_argument("--positions", type=int, default=512)
    ap.add_argument("--tp", type=int, action="append", default=[], help="also run with this tensor-parallel size")
    ap.add_argument("--int8", action="store_true", help="also measure int8 weights (group sizes 32, 64, 128)")
    args = ap.parse_args()
    results = []
    for seed, make in enumerate([llama_3_2_1b, qwen3_0_6b]):
        name, cls, config = make()
        folder = os.path.join(args.workdir, name)
        torch.manual_seed(seed)
        with torch.device("cuda"):
            model = cls(config)
        model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        del model
        log(f"{name}: checkpoint written")
        g = torch.Generator().manual_seed(100 + seed)
        prompt = torch.randint(0, config.vocab_size, (args.positions + 1,), generator=g).tolist()
        ref_model = load(folder, torch.float32)
        ref = hf_logprobs(ref_model, prompt)
        ref_top1 = hf_top1(ref_model, prompt) if args.int8 else None
        del ref_model
        bf16_model = load(folder, torch.bfloat16)
        hf_bf16 = hf_logprobs(bf16_model, prompt)
        del bf16_model
        torch.cuda.empty_cache()
        log(f"{name}: transformers float32 and bf16 runs done")
        row = {"model": name, "positions": args.positions, "transformers": transformers.__version__,
               "hf_bf16_mean_abs_delta": float((hf_bf16 - ref).abs().mean())}
        for tp in [1] + args.tp:
            ours = photon_logprobs(args.photon, folder, prompt, tp)
            key = "photon" if tp == 1 else f"photon_tp{tp}"
            row[f"{key}_mean_abs_delta"] = float((ours - ref).abs().mean())
            row[f"{key}_ratio"] = row[f"{key}_mean_abs_delta"] / row["hf_bf16_mean_abs_delta"]
        row["pass"] = all(v <= 1.25 for k, v in row.items() if k.endswith("_ratio"))
        if args.int8:
            for group in (32, 64, 128):
                ideal_model = load(folder, torch.float32)
                quantize_ideal(ideal_model, group)
                ideal = hf_logprobs(ideal_model, prompt)
                ideal_top1 = hf_top1(ideal_model, prompt)
                del ideal_model
                torch.cuda.empty_cache()
                ours, ours_top1 = photon_logprobs(args.photon, folder, prompt, 1,
                                                  ("--quantization", "int8", "--group-size", str(group)), top1=True)
                row[f"int8_g{group}"] = {
                    "ideal_vs_f32": float((ideal - ref).abs().mean()),
                    "photon_vs_f32": float((ours - ref).abs().mean()),
                    "photon_vs_ideal": float((ours - ideal).abs().mean()),
                    "top1_photon_vs_f32": float((ours_top1 == ref_top1).double().mean()),
                    "top1_ideal_vs_f32": float((ideal_top1 == ref_top1).double().mean()),
                }
                log(f"{name}: int8 group {group}: {row[f'int8_g{group}']}")
            try:
                import compressed_tensors  # noqa: F401  (transformers' loader for these checkpoints)
            except ImportError:
                log("compressed-tensors is not installed: the written checkpoint is not cross-checked")
            else:
                qfolder = folder + "-int8"
                subprocess.run([args.photon, "quantize", "--model", folder, "--out", qfolder], check=True,
                               capture_output=True, timeout=300)
                hf_q = load(qfolder, torch.float32)
                hf_int8 = hf_logprobs(hf_q, prompt)
                del hf_q
                torch.cuda.empty_cache()
                ours = photon_logprobs(args.photon, qfolder, prompt, 1)
                row["checkpoint_g128"] = {"transformers_vs_f32": float((hf_int8 - ref).abs().mean()),
                                          "photon_vs_transformers": float((ours - hf_int8).abs().mean()),
                                          "compressed_tensors": compressed_tensors.__version__}
                log(f"{name}: photon quantize checkpoint read by transformers: {row['checkpoint_g128']}")
        results.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        for row in results:
            f.write(json.dumps(row) + "\n")
    print("| model | transformers bf16 | " + " | ".join(k[:-len("_mean_abs_delta")] for k in results[0]
                                                      if k.startswith("photon") and k.endswith("_mean_abs_delta")) + " |")
    for row in results:
        ours = [f"{row[k]:.4f} ({row[k[:-len('_mean_abs_delta')] + '_ratio']:.2f}x)" for k in row
                if k.startswith("photon") and k.endswith("_mean_abs_delta")]
        print(f"| {row['model']} | {row['hf_bf16_mean_abs_delta']:.4f} | " + " | ".join(ours) + " |")
    if args.int8:
        print("| model | group | ideal int8 vs f32 | photon int8 vs f32 | photon vs ideal | top-1 photon / ideal vs f32 |")
        for row in results:
            for group in (32, 64, 128):
                r = row[f"int8_g{group}"]
                print(f"| {row['model']} | {group} | {r['ideal_vs_f32']:.4f} | {r['photon_vs_f32']:.4f} | "
                      f"{r['photon_vs_ideal']:.4f} | {r['top1_photon_vs_f32']:.3f} / {r['top1_ideal_vs_f32']:.3f} |")
    sys.exit(0 if all(r["pass"] for r in results) else 1)


if __name__ == "__main__":
    main()
