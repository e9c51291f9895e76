"""Qwen3.5-35B-A3B text model (transformers Qwen3_5MoeForCausalLM, random weights): prefill + sampling softmax.

The config is Qwen3.5-35B-A3B's text model, written out here (nothing is downloaded): width 2048; full-attention
layers with 16 query and 2 KV heads of 256 (partial RoPE, 25%); Gated-DeltaNet linear-attention layers with 16
key heads and 32 value heads of 128 and a causal conv of 4; a sparse MoE in every layer with 256 experts of 512,
8 routed per token (router softmax in the model) plus a shared expert of 512; vocabulary 248320. The real model
has 40 layers (3 linear-attention : 1 full-attention); this one keeps ``LAYER_TYPES``, one of each. The forward is
a prefill of a 2048-token prompt (128 on the CPU) without KV cache, followed by the fp32 sampling softmax over the
vocabulary for the last 64 positions.

Settings: sdpa (default), eager_attn (the full-attention layer as matmul + softmax).

    python examples/qwen35_moe.py --setting eager_attn
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when loaded as a MODEL_SPEC file
from _common import PrefillSampler, build_prefill_sampler, main_of, prompt_tokens, random_tokens  # noqa: E402

SETTINGS = ["sdpa", "eager_attn"]
LAYER_TYPES = ("linear_attention", "full_attention")
SAMPLED_POSITIONS = 64

# Qwen3.5-35B-A3B text_config, field by field, except the depth (40 layers there).
A3B_TEXT_CONFIG: dict[str, Any] = dict(
    vocab_size=248_320,
    hidden_size=2048,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    max_position_embeddings=262_144,
    rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
    tie_word_embeddings=False,
)


def _classes():
    try:
        from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    except ImportError as e:
        import transformers

        raise ImportError(f"examples/qwen35_moe.py needs a transformers with Qwen3.5-MoE (Qwen3_5MoeForCausalLM); "
                          f"the installed {transformers.__version__} lacks it: pip install -U transformers") from e
    return Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM


def text_config(attn: str = "sdpa", layer_types: tuple[str, ...] = LAYER_TYPES, **overrides: Any):
    config_cls, _ = _classes()
    cfg = {**A3B_TEXT_CONFIG, **overrides}
    return config_cls(**cfg, num_hidden_layers=len(layer_types), layer_types=list(layer_types), use_cache=False,
                      attn_implementation=attn)


def build_model(config, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                positions: int = SAMPLED_POSITIONS) -> PrefillSampler:
    return build_prefill_sampler(_classes()[1], config, device, dtype, positions)


def get_model_sdpa():
    return build_model(text_config("sdpa"))


def get_inputs_sdpa():
    return random_tokens(prompt_tokens(), A3B_TEXT_CONFIG["vocab_size"])


def get_model_eager_attn():
    return build_model(text_config("eager"))


def get_inputs_eager_attn():
    return random_tokens(prompt_tokens(), A3B_TEXT_CONFIG["vocab_size"])


get_model, get_inputs = get_model_sdpa, get_inputs_sdpa

if __name__ == "__main__":
    main_of(__name__)
