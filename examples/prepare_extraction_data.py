"""Prepare the extraction example: ERNIE-kit's DuIE demo data (shipped with the built-in task
``information_extraction_many_to_many`` in its ``data/`` and ``dict/``, from PaddlePaddle/ERNIE,
Apache-2.0) copied into ``examples/data/extraction/``, a character vocabulary of it, and the
config of a small ERNIE encoder that ``examples/information_extraction_ernie.json`` trains from
random initialization (no pretrained model can be downloaded here; with one, point
``model.pretrained`` at it instead).

    python examples/prepare_extraction_data.py [--output examples/data/extraction]
"""
from __future__ import annotations

import argparse
import json
import os
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
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
    import shutil
    from wenxin.common.task_loader import builtin_tasks_dir
    task = os.path.join(builtin_tasks_dir(), "information_extraction_many_to_many")
    os.makedirs(args.output, exist_ok=True)
    for split in ("train", "dev", "test", "predict"):
        shutil.copyfile(os.path.join(task, "data", "entity_relation_data", f"{split}_data", f"{split}.json"),
                        os.path.join(args.output, f"{split}.json"))
    shutil.copyfile(os.path.join(task, "dict", "entity_relation_label_map.json"),
                    os.path.join(args.output, "label_map.json"))
    vocab = vocabulary(os.path.join(args.output, "train.json"))
    with open(os.path.join(args.output, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocab)
    with open(os.path.join(args.output, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**ENCODER, "vocab_size": len(vocab)}, f, indent=2)
    print(f"wrote {args.output}: the demo data, vocab.txt ({len(vocab)} tokens) and config.json (a small ERNIE)")


if __name__ == "__main__":
    main()
