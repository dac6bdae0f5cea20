"""Prepare the extraction example: a character vocabulary of ERNIE-kit's DuIE demo data (shipped
in ``tasks/information_extraction_many_to_many/data/``, from PaddlePaddle/ERNIE, Apache-2.0) and
the config of a small ERNIE encoder that ``examples/information_extraction_ernie.json`` trains
from random initialization (no pretrained model can be downloaded here; with one, point
``model.pretrained`` at it instead).

    python examples/prepare_extraction_data.py [--output examples/data/extraction]
"""
from __future__ import annotations

import argparse
import json
import os
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "tasks", "information_extraction_many_to_many", "data",
                    "entity_relation_data")
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
ENCODER = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
           "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
           "pad_token_id": 0, "model_type": "ernie"}


def vocabulary(path: str) -> List[str]:
    """The special tokens, then every character of the training texts (lower-cased, as the
    tokenizer reads them) and the word-piece continuation of every ASCII letter and digit."""
    chars = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            chars.update(json.loads(line)["text"].lower())
    pieces = sorted(c for c in chars if not c.isspace())
    pieces += [f"##{c}" for c in pieces if c.isascii() and c.isalnum()]
    return SPECIALS + pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(HERE, "data", "extraction"))
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    vocab = vocabulary(os.path.join(DATA, "train_data", "train.json"))
    with open(os.path.join(args.output, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocab)
    with open(os.path.join(args.output, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**ENCODER, "vocab_size": len(vocab)}, f, indent=2)
    print(f"wrote {args.output}/vocab.txt ({len(vocab)} tokens) and config.json (a small ERNIE)")


if __name__ == "__main__":
    main()
