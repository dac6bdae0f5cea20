"""Prepare the chat example: Chinese conversations from the ``chatterbot-corpus`` package (BSD
licensed; ``chatterbot_corpus/data/chinese/*.yml``, 17 topics), as ERNIEKit SFT lines, and a small
ERNIE 4.5-shaped decoder folder to fine-tune from scratch on them.

Each corpus conversation is a list of turns, the user's and the bot's in alternation; it becomes
one ERNIEKit line ``{"src": [questions], "tgt": [answers]}`` (a last unanswered turn is dropped),
with the topic's name as the system prompt (``"话题：AI"``). The conversations are shuffled with a
fixed seed into dev (10%) and train (the rest).

The model folder (``--model``) holds what a downloaded ERNIE 4.5 folder holds, at a size that
trains on 2 CPU cores in minutes:

- ``tokenizer.model``: a SentencePiece BPE model trained here on the training conversations
  (byte fallback, ERNIE 4.5's special tokens as pieces, no dummy prefix, as ERNIE 4.5's);
- ``tokenizer_config.json`` with ERNIE 4.5's special tokens and chat template,
  ``special_tokens_map.json`` and ``generation_config.json`` (greedy answers);
- ``config.json``: an ERNIE 4.5 dense decoder of 4 layers, 256 wide, grouped-query attention
  (8 query heads over 2 key/value heads), tied embeddings.

It has no weights: ``examples/chat_sft_ernie45.json`` trains it from random initialization
(``load_weights: false``). With a downloaded ERNIE-4.5-0.3B folder instead, see the README's recipe.

    pip install chatterbot-corpus sentencepiece
    python examples/prepare_chat_data.py [--output examples/data/chat] [--model examples/data/chat/model]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import tempfile
from typing import Dict, List

import yaml

from wenxin.data.chat_format import CHAT_TEMPLATE
from wenxin.data.ernie45_tokenizer import DEFAULT_SPECIALS as SPECIAL_TOKENS

HERE = os.path.dirname(os.path.abspath(__file__))
USER_DEFINED = ["<|begin_of_sentence|>", "<|end_of_sentence|>", "<mask:0>", "<mask:1>", "<mask:4>", "<mask:5>",
                "<mask:6>", "<mask:7>"]
DECODER = {"model_type": "ernie4_5", "architectures": ["Ernie4_5_ForCausalLM"], "hidden_size": 256,
           "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 32, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": True, "use_bias": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
VOCAB_SIZE = 2000


def corpus_folder() -> str:
    try:
        import chatterbot_corpus
    except ImportError:
        sys.exit("this example needs the chatterbot-corpus package: pip install chatterbot-corpus")
    return os.path.join(os.path.dirname(chatterbot_corpus.__file__), "data", "chinese")


def conversations(folder: str) -> List[Dict[str, object]]:
    """ERNIEKit SFT lines of every conversation of every topic, in file order."""
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.yml"))):
        with open(path, encoding="utf-8") as f:
            topic = yaml.safe_load(f)
        name = ", ".join(str(c) for c in topic.get("categories") or [os.path.basename(path)[:-4]])
        for turns in topic.get("conversations") or []:
            texts = [str(t).strip() for t in turns if str(t).strip()]
            pairs = len(texts) // 2
            if pairs:
                rows.append({"system": f"话题：{name}", "src": texts[0:2 * pairs:2], "tgt": texts[1:2 * pairs:2]})
    return rows


def write_jsonl(path: str, rows: List[Dict[str, object]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_model_folder(model: str, train: List[Dict[str, object]]) -> int:
    """The tokenizer trained on the training conversations and the decoder's config; returns the
    vocabulary size."""
    import sentencepiece
    os.makedirs(model, exist_ok=True)
    texts = [str(t) for row in train for key in ("system", "src", "tgt")
             for t in (row[key] if isinstance(row[key], list) else [row[key]])]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(texts + ["User: ", "Assistant: "]))
        sentencepiece.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(work, "sp"), vocab_size=VOCAB_SIZE, model_type="bpe",
            character_coverage=1.0, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            user_defined_symbols=USER_DEFINED, add_dummy_prefix=False, remove_extra_whitespaces=False,
            normalization_rule_name="identity", num_threads=1, minloglevel=2, hard_vocab_limit=False)
        with open(os.path.join(work, "sp.model"), "rb") as source, \
                open(os.path.join(model, "tokenizer.model"), "wb") as target:
            target.write(source.read())
    size = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model, "tokenizer.model")).GetPieceSize()
    files = {"tokenizer_config.json": {**SPECIAL_TOKENS, "additional_special_tokens": None,
                                       "tokenizer_class": "Ernie4_5_Tokenizer", "chat_template": CHAT_TEMPLATE},
             "special_tokens_map.json": SPECIAL_TOKENS,
             "generation_config.json": {"do_sample": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
             "config.json": {**DECODER, "vocab_size": size}}
    for name, content in files.items():
        with open(os.path.join(model, name), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False, indent=2)
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(HERE, "data", "chat"))
    parser.add_argument("--model", default="", help="the model folder (default: <output>/model)")
    args = parser.parse_args()
    rows = conversations(corpus_folder())
    random.Random(20261127).shuffle(rows)
    dev_count = max(1, len(rows) // 10)
    dev, train = rows[:dev_count], rows[dev_count:]
    os.makedirs(args.output, exist_ok=True)
    write_jsonl(os.path.join(args.output, "train.jsonl"), train)
    write_jsonl(os.path.join(args.output, "dev.jsonl"), dev)
    size = write_model_folder(args.model or os.path.join(args.output, "model"), train)
    print(f"{len(train)} training and {len(dev)} dev conversations in {args.output}; "
          f"a decoder with a vocabulary of {size} in {args.model or os.path.join(args.output, 'model')}")


if __name__ == "__main__":
    main()
