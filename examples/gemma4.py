"""Gemma 4 E2B text model (transformers Gemma4ForCausalLM, random weights): prefill + sampling softmax.

The config is Gemma 4 E2B's text model, written out here (nothing is downloaded): width 1536, 8 query heads and
1 KV head of 256 (512 in full-attention layers), MLP 6144 (12288, "double wide", in KV-sharing layers), per-layer
input embeddings of 256, vocabulary 262144, sliding window 512, final logit soft-capping 30. The real model has
35 layers (4 sliding : 1 full, the last 20 reusing earlier layers' K/V); this one keeps ``LAYER_TYPES``: one
sliding and one full layer that compute K/V and one full layer that reuses them, so every kind of layer of E2B is
there once. The forward is a prefill of a 2048-token prompt (128 on the CPU) without KV cache, followed by the
fp32 sampling softmax over the vocabulary for the last 64 positions.

Settings: sdpa (default; attention through scaled_dot_product_attention), eager_attn (attention as matmul +
softmax, so the attention softmax is an ATen op kforge can replace).

    python examples/gemma4.py --setting eager_attn
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when loaded as a MODEL_SPEC file
from _common import PrefillSampler, build_prefill_sampler, main_of, prompt_tokens, random_tokens  # noqa: E402

SETTINGS = ["sdpa", "eager_attn"]
LAYER_TYPES = ("sliding_attention", "full_attention", "full_attention")
KV_SHARED_LAYERS = 1  # the last layer reuses K/V, as layers 15-34 of E2B do
SAMPLED_POSITIONS = 64

# Gemma 4 E2B text_config, field by field, except the depth (35 layers there, 20 of them KV-shared).
E2B_TEXT_CONFIG: dict[str, Any] = dict(
    vocab_size=262_144,
    vocab_size_per_layer_input=262_144,
    hidden_size=1536,
    hidden_size_per_layer_input=256,
    intermediate_size=6144,
    use_double_wide_mlp=True,
    num_attention_heads=8,
    num_key_value_heads=1,
    head_dim=256,
    global_head_dim=512,
    attention_k_eq_v=False,
    sliding_window=512,
    max_position_embeddings=131_072,
    hidden_activation="gelu_pytorch_tanh",
    rms_norm_eps=1e-6,
    final_logit_softcapping=30.0,
    tie_word_embeddings=True,
)


def _classes():
    try:
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    except ImportError as e:
        import transformers

        raise ImportError(f"examples/gemma4.py needs a transformers with Gemma 4 (Gemma4ForCausalLM); the installed "
                          f"{transformers.__version__} lacks it: pip install -U transformers") from e
    return Gemma4TextConfig, Gemma4ForCausalLM


def text_config(attn: str = "sdpa", layer_types: tuple[str, ...] = LAYER_TYPES,
                kv_shared_layers: int = KV_SHARED_LAYERS, **overrides: Any):
    config_cls, _ = _classes()
    cfg = {**E2B_TEXT_CONFIG, **overrides}
    return config_cls(**cfg, num_hidden_layers=len(layer_types), layer_types=list(layer_types),
                      num_kv_shared_layers=kv_shared_layers, use_cache=False, attn_implementation=attn)


def build_model(config, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                positions: int = SAMPLED_POSITIONS) -> PrefillSampler:
    return build_prefill_sampler(_classes()[1], config, device, dtype, positions)


def get_model_sdpa():
    return build_model(text_config("sdpa"))


def get_inputs_sdpa():
    return random_tokens(prompt_tokens(), E2B_TEXT_CONFIG["vocab_size"])


def get_model_eager_attn():
    return build_model(text_config("eager"))


def get_inputs_eager_attn():
    return random_tokens(prompt_tokens(), E2B_TEXT_CONFIG["vocab_size"])


get_model, get_inputs = get_model_sdpa, get_inputs_sdpa

if __name__ == "__main__":
    main_of(__name__)
