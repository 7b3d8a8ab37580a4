"""A checked body's prompt: the text the model sees, its token ids, the model facts both need, and the
interactive lane's check of a chat or completions call.

Pure: no database, no engine. The rules themselves are the request models'
(blendserve/protocol/requests.py): the scheduler parses every batch line into one
(blendserve/scheduler/validation.py), a worker an interactive call's body, so a
body one path accepts the other accepts too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blendserve.protocol import embeddings
from blendserve.protocol.fields import BodyError, ModelInfo, check_messages
from blendserve.protocol.requests import ChatCompletionRequest, CompletionRequest, parse
from blendserve.protocol.responses_api import chat_messages
from blendserve.protocol.structured import TOOL_CALL_OPEN, auto_tools


def render(messages: list[dict], tools: Any, tool_choice: Any, info: ModelInfo) -> str:
    """A checked chat as the model sees it: the chat template applied, under tool_choice "auto" with the
    tools, which the template lists for the model."""
    if auto_tools({"tools": tools, "tool_choice": tool_choice}):
        return info.render_chat(messages, tools=tools)
    return info.render_chat(messages)


def prompt_text(endpoint: str, body: dict, info: ModelInfo) -> str:
    """The exact text the model sees for a validated body (read back from the input file)."""
    if endpoint == "/v1/chat/completions":
        return render(check_messages(body["messages"]), body.get("tools"), body.get("tool_choice"), info)
    if endpoint == "/v1/responses":
        return info.render_chat(chat_messages(body))
    prompt = body["prompt"]
    return prompt[0] if isinstance(prompt, list) else prompt


def tokenize(endpoint: str, bodies: list[dict], info: ModelInfo) -> list[list[int]]:
    """Token ids of validated bodies with string prompts: the ids every role uses (an embeddings body's
    inputs joined into one array: blendserve/protocol/embeddings.py)."""
    if endpoint == "/v1/embeddings":
        return embeddings.tokenize(bodies, info)
    texts = [prompt_text(endpoint, b, info) for b in bodies]
    return info.encode_prompt(texts) if endpoint == "/v1/completions" else info.encode(texts)


def model_info(name: str, path: Path, tokenizer: Any = None) -> ModelInfo:
    """The tokenizer-side facts of a checkpoint, as every role renders and tokenizes prompts.

    `tokenizer`: one already loaded from `path` (a worker's interactive server
    shares its own, instead of loading it a second time per rank). Encoding
    goes straight to a private copy of its Rust backend (no truncation, no
    padding: what transformers' call sets up), without transformers' per-call
    BatchEncoding, and chat prompts through the segment cache (blendserve.core.segments).
    """
    from tokenizers import Tokenizer

    from blendserve.core.embedstore import is_embedding_checkpoint
    from blendserve.core.modelstore import context_length, load_tokenizer, vocab_size
    from blendserve.core.segments import SegmentEncoder

    if is_embedding_checkpoint(path):
        return embeddings.embed_model_info(name, path, tokenizer)
    tok = tokenizer if tokenizer is not None else load_tokenizer(path)
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    chat = SegmentEncoder(backend)
    template = getattr(tok, "chat_template", None)
    return ModelInfo(
        name=name, context_length=context_length(path),
        render_chat=lambda messages, tools=None: tok.apply_chat_template(messages, tools=tools,
                                                                         add_generation_prompt=True, tokenize=False),
        tool_calls=isinstance(template, str) and TOOL_CALL_OPEN in template and "tools" in template,
        vocab_size=vocab_size(path),
        encode=chat.encode,
        encode_prompt=lambda texts: [e.ids for e in backend.encode_batch(texts, add_special_tokens=True)],
    )


@dataclass
class Interactive:
    """A checked synchronous request: its typed body, its prompt ids, its max_tokens, whether it streams."""
    request: ChatCompletionRequest | CompletionRequest
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool


def check_interactive(endpoint: str, body: Any, info: ModelInfo) -> Interactive:
    """Check a `/v1/chat/completions` or `/v1/completions` body as the batch path checks a line's body,
    except that `stream` (and `stream_options`) are allowed; tokenize it; fill in max_tokens as OpenAI does
    (the rest of the context for chat, 16 for completions). Raises BodyError."""
    req = parse(endpoint, body, info, interactive=True)
    if isinstance(req, CompletionRequest):
        ids = req.prompt_ids if req.prompt_ids is not None else info.encode_prompt([req.text])[0]
    else:
        ids = info.encode([render(req.chat, req.tools, req.tool_choice, info)])[0]
    mt = req.max_output
    if len(ids) + (mt or 1) > info.context_length:
        raise BodyError("context_length_exceeded", f"The prompt ({len(ids)} tokens) plus max_tokens ({mt}) exceeds "
                        f"the model's context length of {info.context_length} tokens.", "messages")
    options = req.stream_options if isinstance(req.stream_options, dict) else {}
    return Interactive(req, ids, mt if mt is not None else info.context_length - len(ids), bool(req.stream),
                       bool(options.get("include_usage")))
