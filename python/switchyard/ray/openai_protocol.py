"""The OpenAI request fields the Ray ingress understands, turned into token
ids and switchyard generation arguments, with the same defaults and checks
as `switchyard serve` (tools/server/request_parsing.cpp): a 400 naming the
field for anything it cannot honour."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import switchyard


class BadRequest(Exception):
    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class Parsed:
    ids: List[int]
    params: Dict[str, Any]
    stream: bool
    include_usage: bool


def _number(body: Dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise BadRequest(f"'{key}' must be a number in [{lo}, {hi}]", key)
    return float(v)


def _int(body: Dict, key: str, default: Optional[int]) -> Optional[int]:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"'{key}' must be an integer", key)
    return v


# Every field this ingress reads; "model" and "user" change nothing. Any
# other field (logprobs, tools, response_format, guided_*, logit_bias, ...)
# would change the answer if honoured, so it is refused, never dropped.
KNOWN = {"model", "user", "prompt", "messages", "add_generation_prompt", "max_tokens", "max_completion_tokens",
         "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
         "stop", "stop_token_ids", "ignore_eos", "n", "stream", "stream_options"}


def _text_content(message: Any) -> Any:
    """A message with its content parts joined, as switchyard serve does:
    text parts only (an image or audio part is refused)."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    texts = []
    for part in message["content"]:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise BadRequest(f"content parts of type '{kind}' are not supported (text only)", "messages")
        texts.append(part["text"])
    return {**message, "content": "".join(texts)}


def parse(body: Any, chat: bool, tokenizer: switchyard.Tokenizer) -> Parsed:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key, value in body.items():
        if key not in KNOWN and value is not None:
            raise BadRequest(f"'{key}' is not supported by the Ray deployment (switchyard serve has more)", key)
    if _int(body, "n", 1) != 1:
        raise BadRequest("n must be 1", "n")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list", "messages")
        messages = [_text_content(m) for m in messages]
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=bool(body.get("add_generation_prompt", True)))
            ids = tokenizer.encode(text, add_bos=False)
        except switchyard.Unsupported:
            # No chat template: the conversation as text, continued.
            text = "\n".join(m.get("content") for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str))
            if not text:
                raise BadRequest("the messages are empty", "messages")
            ids = tokenizer.encode(text, add_bos=True)
        except switchyard.InvalidArgument as e:
            raise BadRequest(f"the chat template refused the messages: {e}", "messages")
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            ids = tokenizer.encode(prompt[0], add_bos=True)
        elif isinstance(prompt, str) and prompt:
            ids = tokenizer.encode(prompt, add_bos=True)
        else:
            raise BadRequest("'prompt' must be a non-empty string or a list of token ids (one prompt)", "prompt")
    max_tokens = _int(body, "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens", 16 if not chat else 256)
    if max_tokens is None or max_tokens < 1:
        raise BadRequest("max_tokens must be >= 1", "max_tokens")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise BadRequest("'stop' must be a string or a list of strings", "stop")
    params = {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0, 2),
        "top_p": _number(body, "top_p", 1.0, 0, 1) or 1.0,
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2, 2),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2, 2),
        "seed": _int(body, "seed", 0) or 0,
        "stop": stop or [],
        "ignore_eos": bool(body.get("ignore_eos", False)),
    }
    if body.get("top_k") is not None:
        params["top_k"] = _int(body, "top_k", 0)
    params["min_p"] = _number(body, "min_p", 0.0, 0, 1)
    params["repetition_penalty"] = _number(body, "repetition_penalty", 1.0, 0, 100) or 1.0
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None:
        if not (isinstance(stop_ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids)):
            raise BadRequest("'stop_token_ids' must be a list of token ids", "stop_token_ids")
        params["stop_token_ids"] = stop_ids
    options = body.get("stream_options") or {}
    return Parsed(ids, params, bool(body.get("stream", False)), bool(options.get("include_usage", False)))


def usage(done: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "prompt_tokens": done["prompt_tokens"],
        "completion_tokens": done["completion_tokens"],
        "total_tokens": done["prompt_tokens"] + done["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": done["cached_tokens"]},
    }


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"
