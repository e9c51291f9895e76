"""The LLM proposer: a chat model (OpenAI or any compatible server) writes candidates under the kernel contract.

Layering: prompts and parse read the contract and the card; client knows only the config and `openai`; proposer
ties them together and is the only module the search imports. Nothing here imports torch._dynamo or evaluates a
kernel; NVRTC is imported lazily, only to compile a candidate.
"""
from .client import ChatResult, EndpointStatus, LLMClient, LLMUnavailable, check_endpoint
from .parse import Answer, parse_answer
from .prompts import GpuFacts
from .proposer import LLMBudget, LLMProposer, PromptKey, ResponseCache

__all__ = [
    "Answer", "ChatResult", "EndpointStatus", "GpuFacts", "LLMBudget", "LLMClient", "LLMProposer",
    "LLMUnavailable", "PromptKey", "ResponseCache", "check_endpoint", "parse_answer",
]
