"""Serve a known kernel as an LLM answer: the answer format the prompts ask for (ACTION line, cuda block, json plan)."""
import json

from forge_backend.contract import Candidate
from llm_server import Reply


def answer_for(candidate: Candidate, action: str) -> str:
    return (f"Here is a faster kernel.\n\nACTION: {action}\n```cuda\n{candidate.source}\n```\n"
            f"```json\n{json.dumps(candidate.plan_json(), indent=1)}\n```\n")


def reply_for(candidate: Candidate, action: str, **kw) -> Reply:
    return Reply(content=answer_for(candidate, action), **kw)
