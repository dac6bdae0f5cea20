"""The schema of a task file: sections ``dataset_reader``, ``model`` and ``trainer``.

Model classes add their own keys through ``BaseModel.config_schema``; hooks declare theirs
through ``HookBase.config_schema``. Both are checked once the task package is imported.
"""
from __future__ import annotations

from wenxin.common.constants import DEFAULT_MAX_LINE_BYTES
from wenxin.config.schema import Key, Schema, path_key

TOKENIZER: Schema = {
    "type": Key(str, "CharTokenizer", doc="registered tokenizer: CharTokenizer, WhitespaceTokenizer, "
                                          "FullTokenizer (WordPiece over a pretrained model's vocab.txt)"),
    "split_char": Key(str, " ", doc="separator used by WhitespaceTokenizer (and skipped by CharTokenizer with "
                                    "split_latin_digits)"),
    "unk_token": Key(str, "[UNK]", doc="token for out-of-vocabulary pieces"),
    "lowercase": Key((bool, type(None)), None, doc="lower-case text before tokenizing (null: the tokenizer's "
                                                   "default, true but for ErnieMTokenizer)"),
    "spm_model_file": path_key("", doc="ErnieMTokenizer: ERNIE-M's SentencePiece model (sentencepiece.bpe.model)"),
    "piece_rules": Key(str, "paddlenlp", choices=["paddlenlp", "erniekit"],
                       doc="ErnieMTokenizer: how SentencePiece's pieces become tokens: paddlenlp (PaddleNLP's "
                           "ErnieMTokenizer: CJK characters, punctuation and digit runs apart) or erniekit "
                           "(ERNIE-kit's FullTokenizerErnieM: the pieces as they are; what an ERNIE-kit file gets)"),
    "split_latin_digits": Key(bool, False, doc="CharTokenizer: every character is a token, latin letters "
                                               "and digits too (character taggers); false: runs of them "
                                               "stay whole"),
    "ngram": Key(int, 1, minimum=1, maximum=5,
                 doc="also emit joined n-grams of up to N consecutive tokens (for bag-of-words models)"),
    "strip_accents": Key((bool, type(None)), None, doc="FullTokenizer: drop accents (null: when lower-casing)"),
    "split_symbols": Key(bool, True, doc="FullTokenizer: symbols such as emoji are tokens of their own "
                                         "(PaddleNLP 2.8; false: inside words, as ERNIE-kit and BERT)"),
    "max_input_chars_per_word": Key(int, 100, minimum=1, doc="FullTokenizer: longer words become unk_token"),
    "params": Key((dict, type(None)), None, open_keys=True, doc="extra tokenizer arguments"),
}

FIELD: Schema = {
    "name": Key(str, non_empty=True, doc="field name; tensors are named after it"),
    "column": Key(str, "", doc="format jsonl: the key this field reads; csv with has_header: the header of its "
                               "column; hf_dataset: its column (empty: the field's name)"),
    "data_type": Key(str, "string", choices=["string", "int", "float"]),
    "reader": Key(dict, children={"type": Key(str, doc="TextFieldReader, LabelFieldReader, "
                                                            "SequenceLabelFieldReader, ScalarFieldReader, "
                                                            "FloatVectorFieldReader")}),
    "tokenizer": Key((dict, type(None)), None, children=TOKENIZER),
    "need_convert": Key(bool, True, doc="convert tokens to ids through the vocab"),
    "vocab_path": path_key("", doc="vocab / label-map file, one token a line (or ERNIE-kit's token<TAB>id); "
                                   "empty: built from the training data"),
    "vocab_from": Key(str, "", doc="use the vocab of this train_reader field (built from both "
                                   "columns), e.g. text_b from text_a for a shared encoder"),
    "max_seq_len": Key(int, 128, minimum=1),
    "dim": Key(int, 0, minimum=0, doc="FloatVectorFieldReader: the vector length"),
    "num_labels": Key(int, 0, minimum=0, doc="MultiLabelFieldReader: labels are the ids 0..num_labels-1 "
                                             "(0: the label map's or the training data's labels)"),
    "pad_to_max_seq_len": Key(bool, False, doc="pad every batch to max_seq_len (a fixed length in static graphs)"),
    "special_tokens": Key(list, [], items=Key(str), doc="extra tokens put in a built vocab after "
                                                         "[PAD] and [UNK], e.g. [\"[MASK]\"]"),
    "is_label": Key((bool, type(None)), None, doc="a gold answer, not an input of the exported model "
                                                  "(null: true for Label/SequenceLabelFieldReader)"),
    "align_with": Key(str, "", doc="SequenceLabelFieldReader: the text field whose tokens the tags "
                                   "label; every line must have one tag per token"),
    "inference_text": Key(str, "raw", choices=["raw", "tokenized"],
                          doc="TextFieldReader of a tagger: what inference input looks like: raw "
                              "sentences (the export checks that the tokenizer forms the training "
                              "tokens from them) or text written like the training column"),
    "pair_with": Key(str, "", doc="ErnieTextFieldReader: the field whose column is the second text of a "
                                  "pair, encoded with this one as [CLS] a [SEP] b [SEP]"),
    "source_budget": Key(int, 0, minimum=0, doc="ErnieGenSourceFieldReader (the first source): the most tokens "
                                                "of the whole source, [CLS] and [SEP]s included (0: no cut "
                                                "beyond each source's own)"),
    "model_dir": path_key("", doc="ChatFieldReader: the decoder's folder, whose tokenizer (tokenizer.model, "
                                  "tokenizer_config.json) writes the conversations"),
    "packing": Key(bool, False, doc="ChatFieldReader: put a batch's conversations one after another into rows of "
                                    "at most max_seq_len tokens (each attends only to itself)"),
    "reads_prompts": Key(bool, False, doc="ChatFieldReader: lines are prompts to answer (the last question has no "
                                          "answer); an export's field reads them, training data must not"),
    "chat_encoding": Key(str, "template", choices=["template", "erniekit"],
                         doc="ChatFieldReader: how a turn becomes ids: template (the prompt part of each turn "
                             "whole, then the answer: the ids of the chat template's text, as PaddleFormers "
                             "encodes) or erniekit (ERNIEKit's SFT reader: 'User: ', the question, "
                             "'\\nAssistant: ' and the answer each apart, stripped); an export serves prompts "
                             "encoded the same way"),
    "truncation_type": Key(int, 0, choices=[0, 1, 2], doc="0 keep head, 1 keep tail, 2 keep both ends"),
    "padding_id": Key(int, 0, minimum=0),
    "min_freq": Key(int, 1, minimum=1, doc="vocab building: drop rarer tokens"),
    "max_vocab_size": Key(int, 0, minimum=0, doc="vocab building: keep the most frequent N (0: all)"),
    "embedding": Key((dict, type(None)), None, open_keys=True, doc="accepted for Wenxin compatibility"),
}

READER_CONFIG: Schema = {
    "data_path": path_key(non_empty=True, doc="a data file or a folder of them (see format; hf_dataset: also a "
                                              "dataset name in the datasets cache)"),
    "format": Key(str, "tsv", doc="a registered data format: tsv (one column per field, in order), jsonl (a JSON "
                                  "object a line, fields by key), csv (quoted records; with has_header fields "
                                  "by header name), hf_dataset (a Hugging Face datasets split, fields by column)"),
    "split": Key(str, "", doc="format hf_dataset: the split to read (empty: the dataset's only split)"),
    "download": Key(bool, False, doc="format hf_dataset: let datasets download a dataset its cache lacks "
                                     "(off: offline, the cache only)"),
    "shuffle": Key(bool, False),
    "batch_size": Key(int, 32, minimum=1),
    "sampling_rate": Key(float, 1.0, minimum=0.0, maximum=1.0),
    "need_data_distribute": Key(bool, True, doc="shard across ranks in distributed training"),
    "need_generate_examples": Key(bool, False, doc="keep raw examples beside the tensors"),
    "drop_last": Key(bool, False),
    "bucket_batches": Key(int, 0, minimum=0, doc="training: sort examples by length within pools of this "
                                                 "many batches, then shuffle the batches, so batches hold "
                                                 "similar lengths and less padding (0: off)"),
    "has_header": Key(bool, False, doc="skip the first line of each file (csv: the header naming the columns)"),
    "separator": Key(str, "", doc="the column delimiter (empty: the format's own, a tab for tsv, a comma for csv)"),
    "skip_bad_lines": Key(bool, False, doc="skip and count malformed lines instead of failing"),
    "num_workers": Key(int, 0, minimum=0, doc="paddle.io.DataLoader worker processes"),
    "cache": Key((bool, str), "auto", choices=[True, False, "auto"],
                 doc="keep the converted examples in the token cache (memory-mapped arrays) for later "
                     "runs, resumes and readers of the same data; auto: for data files of 8 MB or more"),
    "cache_dir": path_key("", doc="the token cache's folder (empty: $WENXIN_CACHE_DIR, else ~/.cache/wenxin)"),
    "streaming": Key(bool, False, doc="train_reader: read batches from the files while training, never holding "
                                      "the corpus in memory (files in a seeded order, rows through shuffle_buffer)"),
    "shuffle_buffer": Key(int, 10000, minimum=1, doc="streaming with shuffle: rows mixed in a seeded buffer of "
                                                     "this many"),
    "cache_processes": Key(int, 0, minimum=0, doc="processes converting data into the token cache "
                                                   "(0: the CPU cores this process may use)"),
    "max_line_bytes": Key(int, DEFAULT_MAX_LINE_BYTES, minimum=16, doc="a longer line is malformed (an error naming "
                                                          "file:line, or skipped with skip_bad_lines)"),
}

READER: Schema = {
    "name": Key(str, ""),
    "type": Key(str, "BasicDataSetReader"),
    "fields": Key(list, items=Key(dict, children=FIELD)),
    "config": Key(dict, children=READER_CONFIG),
}

DATASET_READER: Schema = {
    name: Key((dict, type(None)), None, children=READER)
    for name in ("train_reader", "dev_reader", "test_reader", "predict_reader")
}

OPTIMIZATION: Schema = {
    "learning_rate": Key(float, 1e-3, minimum=0.0),
    "optimizer": Key(str, "adamw", doc="a registered optimizer: adamw, adam, sgd, momentum"),
    "lr_scheduler": Key(str, "linear_warmup_decay",
                        doc="a registered schedule after warmup: constant, linear_warmup_decay, "
                            "cosine_warmup_decay, exponential (learning_rate to end_learning_rate by a constant "
                            "factor a step)"),
    "warmup_steps": Key(int, 0, minimum=0),
    "warmup_proportion": Key(float, 0.0, minimum=0.0, maximum=1.0),
    "end_learning_rate": Key(float, 0.0, minimum=0.0, doc="learning rate reached at the last step"),
    "weight_decay": Key(float, 0.0, minimum=0.0, doc="not applied to biases and norm scales"),
    "max_grad_norm": Key(float, 0.0, minimum=0.0, doc="clip gradients by global norm (0: off)"),
    "beta1": Key(float, 0.9, minimum=0.0, maximum=1.0),
    "beta2": Key(float, 0.999, minimum=0.0, maximum=1.0),
    "epsilon": Key(float, 1e-8, minimum=0.0),
    "momentum": Key(float, 0.9, minimum=0.0),
}

MODEL_BASE: Schema = {
    "type": Key(str, non_empty=True, doc="registered model class"),
    "is_dygraph": Key(int, 1, choices=[0, 1], doc="1 eager (dynamic), 0 static graph"),
    "optimization": Key(dict, {}, children=OPTIMIZATION),
}

HOOK: Schema = {
    "type": Key(str),
    "priority": Key((int, type(None)), None, doc="lower runs first; default: the hook's own"),
    "params": Key(dict, {}, open_keys=True),
}

EARLY_STOPPING: Schema = {  # EarlyStoppingHook's params, and trainer.early_stopping
    "metric": Key((str, type(None)), None, doc="the dev metric watched (null: trainer.metric)"),
    "mode": Key((str, type(None)), None, choices=["max", "min", None], doc="null: trainer.metric_mode"),
    "patience": Key(int, 3, minimum=1, doc="dev evaluations without an improvement before the run stops"),
    "min_delta": Key(float, 0.0, minimum=0.0, doc="the least change that counts as an improvement"),
}

PRETRAINED: Schema = {
    "name": Key(str, ""),
    "params_path": path_key(),
    "prefix_map": Key(dict, {}, open_keys=True, items=Key(str), doc="rename: {'old.prefix': 'new.prefix'}"),
}

FAST_PATHS: Schema = {
    "program_runner": Key(bool, True, doc="static steps skip Executor.run's per-call program lookup"),
    "visualdl_records": Key(bool, True, doc="VisualDL records written on the training thread "
                                            "(false: visualdl.LogWriter)"),
}

PROFILE: Schema = {
    "start_step": Key(int, 5, minimum=1, doc="the first recorded step (later than 1 skips the warm-up)"),
    "steps": Key(int, 5, minimum=1, doc="how many steps are recorded"),
}

TRAINER: Schema = {
    "type": Key(str, "CustomTrainer", doc="a registered trainer; CustomTrainer (and a task's trainer on "
                                            "BaseTrainer) runs the mode model.is_dygraph picks"),
    "PADDLE_PLACE_TYPE": Key(str, "cpu", choices=["cpu", "gpu"]),
    "PADDLE_IS_FLEET": Key(bool, False),
    "cpu_threads": Key(int, 0, minimum=0, doc="threads of Paddle's CPU kernels in each process (0: its share of the "
                                              "cores it may use, fewer for a small model, a static program or a "
                                              "busy machine; the user's OMP_NUM_THREADS above 1)"),
    "seed": Key(int, 42, minimum=0, maximum=2**32 - 1),
    "epoch": Key(int, 1, minimum=1),
    "max_steps": Key(int, -1, doc="> 0: stop after this many optimizer steps (overrides epoch)"),
    "gradient_accumulation_steps": Key(int, 1, minimum=1),
    "recompute": Key(bool, False, doc="gradient checkpointing: keep only each decoder layer's input and compute "
                                      "its activations again for the backward pass (less memory, about a third "
                                      "more compute; eager mode; models that offer it: Ernie45SFT)"),
    "train_log_step": Key(int, 10, minimum=1),
    "eval_step": Key(int, 0, minimum=0, doc="evaluate every N steps (0: at the end of each epoch)"),
    "save_model_step": Key(int, 0, minimum=0, doc="checkpoint every N steps (0: at each epoch end)"),
    "is_eval_dev": Key(bool, False),
    "is_eval_test": Key(bool, False),
    "eval_batch_size": Key(int, 0, minimum=0, doc="0: the reader's batch_size"),
    "metric": Key(str, "acc", doc="dev metric that picks the best checkpoint / early stopping"),
    "metric_mode": Key(str, "max", choices=["max", "min"]),
    "keep_checkpoint_max": Key(int, 3, minimum=1, doc="periodic checkpoints kept (best kept apart)"),
    "save_best": Key(bool, True),
    "save_top_k": Key(int, 0, minimum=0, doc="also keep the k best checkpoints by the dev trainer.metric as "
                                             "checkpoints/top_step_<N> (checkpoints/index.json ranks them)"),
    "keep_optimizer_state": Key(str, "latest", choices=["latest", "latest_and_best", "all"],
                                doc="latest: the newest periodic checkpoint (the one a run resumes from) and the "
                                    "one before it (the fallback when the newest is damaged) keep the optimizer "
                                    "state, about 2/3 of a checkpoint with Adam; older ones, top-k "
                                    "and best keep the weights for evaluate, export and load_parameters. "
                                    "latest_and_best: best keeps it too (for trainer.resume: best). all: every one "
                                    "keeps it, so trainer.load_checkpoint can continue from any"),
    "save_inference": Key(bool, False, doc="export an inference model into every checkpoint (<ckpt>/inference)"),
    "save_onnx": Key(bool, True, doc="with save_inference: when training ends, the result's inference model "
                                     "also gets model.onnx, where paddle2onnx and onnxruntime are installed "
                                     "(pip install \"wenxin[onnx]\") and ONNX Runtime gives Paddle's outputs on "
                                     "a dev batch; Predictor then runs it with ONNX Runtime"),
    "save_onnx_max_mb": Key((int, float), 1024, minimum=0,
                            doc="save_onnx converts only a model of at most this many MB of parameters: "
                                "paddle2onnx's process needs about 9 times the model's size beside the "
                                "training process (0: no limit); a larger one is skipped with a log line, "
                                "and wenxin export --format onnx converts it later"),
    "load_best_at_end": Key(bool, False, doc="after training, load checkpoints/best and evaluate it "
                                             "(logged as best_dev / best_test)"),
    "use_amp": Key(bool, False),
    "amp_dtype": Key(str, "auto", choices=["auto", "float16", "bfloat16"],
                     doc="auto: float16 on GPU, bfloat16 on CPU"),
    "amp_level": Key(str, "O1", choices=["O1", "O2"]),
    "amp_custom_white_list": Key(list, [], items=Key(str), doc="extra ops to compute in low precision"),
    "amp_custom_black_list": Key(list, [], items=Key(str), doc="ops to keep in float32"),
    "use_loss_scaling": Key((bool, type(None)), None, doc="GradScaler on; null: only for float16"),
    "use_dynamic_loss_scaling": Key(bool, True),
    "init_loss_scaling": Key(float, 32768.0, minimum=1.0),
    "incr_every_n_steps": Key(int, 1000, minimum=1),
    "decr_every_n_nan_or_inf": Key(int, 2, minimum=1),
    "incr_ratio": Key(float, 2.0, minimum=1.0),
    "decr_ratio": Key(float, 0.5, minimum=0.0, maximum=1.0),
    "nan_check_step": Key(int, 1, minimum=0, doc="check the loss for NaN/Inf every N steps (0: off); a checked "
                                                 "step with a NaN/Inf loss skips its update, in either mode; each "
                                                 "check reads the loss on the host (on a GPU, a larger N lets the "
                                                 "host run ahead)"),
    "max_nan_steps": Key(int, 1, minimum=1, doc="stop after this many non-finite losses in a row"),
    "output_path": path_key("./output", non_empty=True),
    "pre_train_model": Key((list, str), [], doc="params files to warm-start from (docs/tasks.md, fine-tuning ERNIE)"),
    "load_parameters": path_key("", doc="model parameters to start from (no optimizer state)"),
    "load_checkpoint": path_key("", doc="checkpoint folder to resume from"),
    "resume": Key(str, "none", choices=["none", "auto", "best"],
                  doc="auto: resume from the latest complete checkpoint; best: continue from checkpoints/best "
                      "(the checkpoints after it move aside)"),
    "visualdl": Key(bool, True, doc="also log scalars to VisualDL (output_path/vdl)"),
    "progress_bar": Key(str, "auto", choices=["auto", "on", "off"],
                        doc="progress bars with ETA for training and evaluation; auto: when stderr is a terminal"),
    "hooks": Key(list, [], items=Key(dict, children=HOOK), doc="extra hooks (docs/training.md, hooks)"),
    "output_layout": Key(str, "wenxin", choices=["wenxin", "erniekit"],
                         doc="erniekit: checkpoints in save_checkpoints/checkpoints_step_<N> and an inference model "
                             "in save_inference_model/inference_step_<N> at every save (set for ERNIE-kit task files)"),
    "early_stopping": Key((dict, type(None)), None, children=EARLY_STOPPING,
                          doc="stop once the dev metric has not improved for patience evaluations (saving a "
                              "checkpoint; the best one stays the result), e.g. {\"patience\": 3}; null: off"),
    "profile": Key((dict, type(None)), None, children=PROFILE,
                   doc="record training steps with paddle.profiler: a Chrome trace and summary tables in "
                       "output_path/profile, the operator table in the log (see docs/performance.md)"),
    "fast_paths": Key(dict, {}, children=FAST_PATHS, doc="switches for the fast paths through Paddle's and "
                                                         "VisualDL's internals (wenxin/compat)"),
    "extra_param": Key(dict, {}, open_keys=True),
}

STUDIO: Schema = {
    "description": Key(str, "", doc="one line wenxin studio lists the task file with"),
    "form": Key(list, [], items=Key(str, non_empty=True),
                doc="the key paths wenxin studio's launch form shows for this task file (default: learning rate, "
                    "optimizer, schedule, epochs, batch size, graph mode, evaluation, save and logging steps, hooks)"),
}

ROOT: Schema = {
    "task": Key(str, non_empty=True, doc="task package: a name under tasks/ or a path to a task folder"),
    "dataset_reader": Key(dict, children=DATASET_READER),
    "model": Key(dict, open_keys=True),  # checked against MODEL_BASE + the model's own keys
    "trainer": Key(dict, {}, children=TRAINER),
    "studio": Key(dict, {}, children=STUDIO, doc="settings of wenxin studio's launch form (training ignores them)"),
}
