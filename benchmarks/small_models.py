"""Small trained models for the inference and serving benchmarks, each with texts to send it.

    trained_model(name, folder) -> an exported folder (with model.onnx where paddle2onnx converts it)
    sample_texts(name) -> inputs in the model's raw text format

Models (trained for 1 epoch on generated data; their accuracy does not matter here):
- ``bow``: BowClassification on reviews (CharTokenizer);
- ``cnn``: CnnClassification, 64 filters of widths 2/3/4;
- ``transformer``: TransformerClassification, 2 layers, hidden 128, 4 heads;
- ``ernie``: ErnieClassification on a random-init ERNIE 3.0-shaped encoder (2 layers, hidden 128,
  4 heads) read from PaddleNLP's layout, with its WordPiece tokenizer;
- ``crf``: SequenceTagger, a BiGRU (hidden 64) with a CRF, on space-separated characters (Paddle
  Inference only: paddle2onnx cannot convert the CRF's decoding).
"""
from __future__ import annotations

import json
import os
import random
import sys
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")

CLASSIFIERS: Dict[str, Dict] = {
    "bow": {"type": "BowClassification"},
    "cnn": {"type": "CnnClassification", "num_filters": 64, "filter_sizes": [2, 3, 4]},
    "transformer": {"type": "TransformerClassification"},  # 2 layers, hidden 128, 4 heads (the defaults)
}
MODELS = [*CLASSIFIERS, "ernie", "crf"]
ERNIE_SHAPE = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
               "max_position_embeddings": 160}


def sample_texts(name: str, n: int = 512) -> List[str]:
    """Review-like texts of 5 to 60 characters (for the tagger: characters separated by spaces)."""
    rng = random.Random(0)
    if name == "ernie":
        from conftest import NEGATIVE, NEUTRAL, POSITIVE
        words = POSITIVE + NEGATIVE + NEUTRAL
        return ["".join(rng.choice(words) for _ in range(rng.randint(3, 20))) for _ in range(n)]
    texts = ["".join(rng.choice("好坏的了书质量很不错差东西") for _ in range(rng.randint(5, 60))) for _ in range(n)]
    return [" ".join(t) for t in texts] if name == "crf" else texts


def _config(name: str, folder: str) -> Dict:
    from conftest import make_sentences, task_config, write_tsv
    data = os.path.join(folder, "data")
    if name == "crf":
        from test_sequence_labeling import make_segmentation, tagging_config
        for split, seed, n in (("train", 1, 1000), ("dev", 2, 100)):
            write_tsv(os.path.join(data, f"{split}.tsv"), make_segmentation(n, seed))
        config = tagging_config(data, os.path.join(folder, "out"), max_len=64,
                                encoder={"type": "gru", "emb_dim": 64, "hidden_size": 64})
        config["trainer"]["epoch"] = 1
        return config
    for split, seed, n in (("train", 1, 1000), ("dev", 2, 100), ("test", 3, 100)):
        write_tsv(os.path.join(data, f"{split}.tsv"), make_sentences(n, seed))
    if name == "ernie":
        from ernie_helpers import ernie_config, ernie_text, make_ernie_model
        model_dir = os.path.join(folder, "ernie")
        make_ernie_model(model_dir, "paddlenlp", **ERNIE_SHAPE)
        label = {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}
        return ernie_config(data, model_dir, os.path.join(folder, "out"), {"type": "ErnieClassification"},
                            "text_classification", [ernie_text("text_a", model_dir, max_seq_len=128), label],
                            epoch=1)
    config = task_config(data, os.path.join(folder, "out"), model_type=CLASSIFIERS[name]["type"], epoch=1,
                         visualdl=False, is_eval_test=0)
    config["model"].update({k: v for k, v in CLASSIFIERS[name].items() if k != "type"})
    return config


def trained_model(name: str, folder: str) -> str:
    """Train ``name`` for one epoch in ``folder`` and export it (with model.onnx where possible)."""
    from wenxin.config.loader import load_config
    from wenxin.inference.onnx_export import export_onnx
    from wenxin.runner import build_trainer
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_config(name, folder), f)
    trainer = build_trainer(load_config(path))
    trainer.do_train()
    model_dir = trainer.export_inference(os.path.join(folder, "model"))
    if name != "crf":
        export_onnx(model_dir, trainer.readers["dev_reader"].collate_rows(list(range(16))))
    return model_dir
