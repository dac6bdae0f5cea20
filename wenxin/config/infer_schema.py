"""The schema of an infer file (``wenxin infer`` / ``run_infer.py``): below the inference code,
so ``wenxin migrate`` checks the infer files it writes without loading Paddle."""
from __future__ import annotations

from wenxin.common.constants import DEFAULT_MAX_LINE_BYTES, ONEDNN_SETTINGS
from wenxin.config.schema import Key, Schema, path_key

INFER_SCHEMA: Schema = {
    "model_dir": path_key(non_empty=True, doc="an exported folder (wenxin export / trainer.export.save_inference)"),
    "predict_reader": Key(dict, children={"config": Key(dict, children={
        "data_path": path_key(non_empty=True, doc="a data file or folder in format (tsv: one example per line, "
                                                  "the model's fields tab-separated; hf_dataset: also a name)"),
        "format": Key(str, "tsv", doc="a registered data format, as in a task file: tsv, jsonl, csv, hf_dataset"),
        "separator": Key(str, "", doc="the column delimiter (empty: the format's own)"),
        "max_line_bytes": Key(int, DEFAULT_MAX_LINE_BYTES, minimum=16, doc="a longer line is an error"),
        "has_header": Key(bool, False),
        "split": Key(str, "", doc="format hf_dataset: the split to predict (empty: the dataset's only split)"),
        "download": Key(bool, False, doc="format hf_dataset: let datasets download a dataset its cache lacks"),
    })}),
    "output_file": path_key(non_empty=True, doc="one prediction per input line, in order; classifiers write "
                                "label<TAB>probability (see README for other result formats)"),
    "batch_size": Key(int, 64, minimum=1),
    "PADDLE_PLACE_TYPE": Key(str, "cpu", choices=["cpu", "gpu"]),
    "num_threads": Key(int, 1, minimum=1),
    "backend": Key(str, "auto", doc="a registered inference backend (paddle, onnxruntime) or auto: ONNX Runtime "
                                     "when model_dir has model.onnx (wenxin export --format onnx) and it is "
                                     "installed, else Paddle Inference"),
    "onednn": Key(str, "auto", choices=list(ONEDNN_SETTINGS),
                  doc="the Paddle backend's oneDNN; auto: the exported model's rule (CNN, transformer and ERNIE "
                      "models from 8 rows a batch, others never)"),
    "task": Key(str, "", doc="a task package to import first, for a model whose fields use its own tokenizers "
                             "or field readers (nothing is imported unless named)"),
    "output_format": Key(str, "wenxin", choices=["wenxin", "erniekit"],
                         doc="erniekit: ERNIE-kit's lines (the input columns, then the task's result; the "
                             "default for ERNIE-kit infer files)"),
    "num_labels": Key(int, 0, minimum=0, doc="checked against the model's labels (0: not checked)"),
    "field_names": Key(list, [], items=Key(str), doc="checked against the model's input fields (empty: not checked)"),
}
