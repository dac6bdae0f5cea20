"""Prepare the generation example: ERNIE-kit's DuReader question-generation data (its dev set of
1,628 answer / paragraph / question rows, shipped with the built-in task ``text_generation`` in
``data/ernie_gen_dureader/``, from PaddlePaddle/ERNIE, Apache-2.0; its training set is not in the
repository) split into train (1,200 rows), dev (100) and test (328) by a fixed shuffle, a
character vocabulary of the training split, and the config of a small ERNIE encoder that
``examples/text_generation_ernie.json`` trains from random initialization (no pretrained model
can be downloaded here; with one, point ``model.encoder_config`` and ``trainer.pre_train_model``
at it instead).

    python examples/prepare_generation_data.py [--output examples/data/generation]
"""
from __future__ import annotations

import argparse
import json
import os
import random
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
SPLITS = (("train", 0, 1200), ("dev", 1200, 1300), ("test", 1300, None))  # (name, first row, end)
ENCODER = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
           "max_position_embeddings": 512, "type_vocab_size": 3, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
           "pad_token_id": 0, "model_type": "ernie"}


def vocabulary(rows: List[List[str]]) -> List[str]:
    """The special tokens, then every character of the training rows (lower-cased, as the
    tokenizer reads them) and the word-piece continuation of every ASCII letter and digit."""
    chars = {c for row in rows for text in row for c in text.lower() if not c.isspace()}
    pieces = sorted(chars)
    pieces += [f"##{c}" for c in pieces if c.isascii() and c.isalnum()]
    return SPECIALS + pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(HERE, "data", "generation"))
    args = parser.parse_args()
    from wenxin.common.task_loader import builtin_tasks_dir
    source = os.path.join(builtin_tasks_dir(), "text_generation", "data", "ernie_gen_dureader", "dev.tsv")
    with open(source, encoding="utf-8") as f:
        header, *lines = f.read().splitlines()
    rows = [line.split("\t") for line in lines]
    random.Random(0).shuffle(rows)
    os.makedirs(args.output, exist_ok=True)
    for split, first, end in SPLITS:
        with open(os.path.join(args.output, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.writelines("\t".join(row) + "\n" for row in [header.split("\t")] + rows[first:end])
    vocab = vocabulary(rows[:SPLITS[0][2]])
    with open(os.path.join(args.output, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocab)
    with open(os.path.join(args.output, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**ENCODER, "vocab_size": len(vocab)}, f, indent=2)
    sizes = ", ".join(f"{split}.tsv ({len(rows[first:end])} rows)" for split, first, end in SPLITS)
    print(f"wrote {args.output}: {sizes}, vocab.txt ({len(vocab)} tokens) and config.json (a small ERNIE)")


if __name__ == "__main__":
    main()
