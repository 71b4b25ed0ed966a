#!/usr/bin/env python3
"""Makes PhotonInfer's parity test data with Hugging Face transformers, the reference for correctness.

For each case below it builds a tiny random-weight checkpoint (Llama 3 or Qwen3; tied or untied embeddings; GQA or
MHA; head_dim equal to or different from hidden/heads; llama3 RoPE scaling active at short positions), saves it in
bf16 safetensors, reloads it in float32 (the bf16 values widen exactly) and records, for several prompts:
  - prompt logprobs: log-probability of each prompt token i >= 1 under the distribution at position i - 1, with
    that distribution's top K;
  - a 24-token greedy continuation with the logprob and top K of each generated token.
Random weights give prompts where two tokens nearly tie; prompts are re-drawn until the greedy margin (top-1 minus
top-2 logprob) stays above 0.02 at every step, so the ids are decided by the model, not by rounding.

Needs torch and transformers (4.4x or 5.x). Usage:
  python3 tools/parity/make_parity_data.py --out tests/data/parity
"""
import argparse
import json
import os
import random

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, LlamaForCausalLM, Qwen3ForCausalLM

TOP_K = 5
GREEDY_TOKENS = 24
PROMPT_LENGTHS = (5, 17, 40)
MIN_MARGIN = 0.02
VOCAB = 1000


TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def rope_kwargs(theta, scaling=None):
    """RoPE settings in the spelling the installed transformers expects (5.x: rope_parameters)."""
    if TRANSFORMERS_MAJOR >= 5:
        params = {"rope_type": "default", "rope_theta": theta}
        params.update(scaling or {})
        return {"rope_parameters": params}
    return {"rope_theta": theta, "rope_scaling": scaling}


def llama_llama3_rope_tied_gqa():
    # head_dim 16, theta 10000: wavelengths 6.3, 19.9, 62.8, ... With original_max_position_embeddings 32 the
    # first pair is kept, the second smoothed and the rest divided by 8 — all of it matters within 64 positions.
    return "llama3-gqa-tied-ropescaled", LlamaForCausalLM, LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True,
        **rope_kwargs(10000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        bos_token_id=1, eos_token_id=2), False


def llama_mha_untied():
    return "llama3-mha-untied", LlamaForCausalLM, LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        **rope_kwargs(500000.0), bos_token_id=1, eos_token_id=2), True


def qwen3_gqa_tied_head_dim():
    return "qwen3-gqa-tied-headdim32", Qwen3ForCausalLM, Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=True, **rope_kwargs(1000000.0), bos_token_id=1, eos_token_id=2), False


def qwen3_mha_untied():
    return "qwen3-mha-untied-headdim24", Qwen3ForCausalLM, Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, head_dim=24, max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, **rope_kwargs(10000.0), bos_token_id=1, eos_token_id=2), True


CASES = [llama_llama3_rope_tied_gqa, llama_mha_untied, qwen3_gqa_tied_head_dim, qwen3_mha_untied]


def randomize(model, seed):
    """Weights that keep activations at unit scale and spread the logits (standard deviation about 2.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def to_v4_spelling(config_path):
    """Rewrites config.json with transformers 4.x RoPE keys (rope_theta + rope_scaling), so both spellings are tested."""
    with open(config_path) as f:
        cfg = json.load(f)
    params = cfg.pop("rope_parameters", None)
    if params is not None:
        cfg["rope_theta"] = params.get("rope_theta", 10000.0)
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        cfg["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def entry(logprobs_row, token):
    top = torch.topk(logprobs_row, TOP_K)
    return {"token": int(token), "logprob": float(logprobs_row[token]),
            "top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)]}


def run_case(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    prompt_logprobs = [None] + [entry(lp[i - 1], prompt[i]) for i in range(1, len(prompt))]
    seq = list(prompt)
    out, out_lp, margin = [], [], float("inf")
    for _ in range(GREEDY_TOKENS):
        with torch.no_grad():
            row = torch.log_softmax(model(torch.tensor([seq])).logits[0, -1].double(), dim=-1)
        top2 = torch.topk(row, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        token = int(torch.argmax(row))
        out.append(token)
        out_lp.append(entry(row, token))
        seq.append(token)
    return {"prompt_ids": prompt, "prompt_logprobs": prompt_logprobs, "output_ids": out, "logprobs": out_lp,
            "min_greedy_margin": margin}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder to write one sub-folder per checkpoint into")
    args = ap.parse_args()
    torch.manual_seed(0)
    for seed, make in enumerate(CASES):
        name, cls, config, v4_spelling = make()
        config._attn_implementation = "eager"
        model = cls(config)
        randomize(model, 1000 + seed)
        model = model.to(torch.bfloat16)
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        model.save_pretrained(folder, safe_serialization=True)
        if v4_spelling:
            to_v4_spelling(os.path.join(folder, "config.json"))
        try:
            ref_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        except TypeError:
            ref_model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                                             attn_implementation="eager")
        ref_model.eval()
        rng = random.Random(seed)
        cases = []
        for length in PROMPT_LENGTHS:
            for attempt in range(200):
                prompt = [rng.randrange(3, VOCAB) for _ in range(length)]
                case = run_case(ref_model, prompt)
                if case["min_greedy_margin"] > MIN_MARGIN:
                    break
            else:
                raise SystemExit(f"{name}: no prompt of length {length} with a clear greedy margin")
            cases.append(case)
        reference = {"generator": "tools/parity/make_parity_data.py", "transformers": transformers.__version__,
                     "torch": torch.__version__, "compute_dtype": "float32", "weights_dtype": "bfloat16",
                     "top_k": TOP_K, "cases": cases}
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(reference, f, indent=1)
        print(f"{name}: margins {[round(c['min_greedy_margin'], 3) for c in cases]}")


if __name__ == "__main__":
    main()
