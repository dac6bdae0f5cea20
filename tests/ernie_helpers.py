"""Small random-init ERNIE models written in the layouts people download (PaddleNLP, ERNIE-kit),
and task configs that fine-tune them."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List

import numpy as np

from conftest import NEGATIVE, NEUTRAL, POSITIVE
from wenxin.translation import pretrained

if TYPE_CHECKING:
    from wenxin.models.ernie import ErnieConfig

SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
PIECES = sorted(set(POSITIVE + NEGATIVE + NEUTRAL)) + list("abcdefghijklmnopqrstuvwxyz0123456789") + \
    [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"] + list(",.!?，。！？") + ["good", "bad", "##ood"]
TINY = {"vocab_size": 160, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 4, "use_task_id": True,
        "task_type_vocab_size": 3, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "model_type": "ernie"}


def erniekit_names(num_layers: int) -> Dict[str, str]:
    """PaddleNLP name -> ERNIE-kit name, for every parameter of a ``num_layers`` encoder."""
    names = ["word_embedding", "pos_embedding", "sent_embedding", "task_embedding", "pre_encoder_layer_norm_scale",
             "pre_encoder_layer_norm_bias", "pooled_fc.w_0", "pooled_fc.b_0"]
    for i in range(num_layers):
        names += [f"encoder_layer_{i}_{part}_layer_norm_{kind}" for part in ("post_att", "post_ffn")
                  for kind in ("scale", "bias")]
        names += [f"encoder_layer_{i}_{module}.{kind}_0" for module in
                  ("multi_head_att_query_fc", "multi_head_att_key_fc", "multi_head_att_value_fc",
                   "multi_head_att_output_fc", "ffn_fc_0", "ffn_fc_1") for kind in ("w", "b")]
    return {pretrained.erniekit_to_paddlenlp(n): n for n in names}


def make_ernie_model(folder: str, layout: str = "paddlenlp", seed: int = 7, **shape: Any) -> Dict[str, np.ndarray]:
    """A random-init ERNIE 3.0-shaped model folder: PaddleNLP's (``config.json``,
    ``model_state.pdparams``) or ERNIE-kit's (``ernie_config.json``, ``params/``), with ``vocab.txt``.
    Returns the weights under PaddleNLP's names."""
    import paddle

    from wenxin.models.ernie import ErnieConfig, ErnieEncoder
    os.makedirs(folder, exist_ok=True)
    paddle.seed(seed)
    tiny = {**TINY, **shape}
    encoder = ErnieEncoder(ErnieConfig.from_dict(tiny, "test"))
    weights = {name: value.numpy() for name, value in encoder.state_dict().items()}
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in SPECIALS + PIECES)
    if layout == "paddlenlp":
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({**tiny, "architectures": ["ErnieModel"]}, f, indent=2)
        paddle.save({name: paddle.to_tensor(value) for name, value in weights.items()},
                    os.path.join(folder, "model_state.pdparams"))
    else:
        from paddle.base import core
        config = {k: v for k, v in tiny.items() if k not in ("layer_norm_eps", "model_type", "type_vocab_size")}
        with open(os.path.join(folder, "ernie_config.json"), "w") as f:
            json.dump({**config, "sent_type_vocab_size": tiny["type_vocab_size"]}, f, indent=2)
        os.makedirs(os.path.join(folder, "params"), exist_ok=True)
        names = erniekit_names(tiny["num_hidden_layers"])
        for name, value in weights.items():
            tensor = core.DenseTensor()
            tensor.set(value, paddle.CPUPlace())
            core.save_dense_tensor(tensor, os.path.join(folder, "params", names[name]))
    return weights


def ernie_text(name: str, model_dir: str, max_seq_len: int = 24, **extra: Any) -> Dict[str, Any]:
    return {"name": name, "data_type": "string", "reader": {"type": "ErnieTextFieldReader"},
            "vocab_path": os.path.join(model_dir, "vocab.txt"), "max_seq_len": max_seq_len, **extra}


def ernie_config(data_dir: str, model_dir: str, output: str, model: Dict[str, Any], task: str,
                 fields: List[Dict[str, Any]], mode: str = "dynamic", epoch: int = 2,
                 layout: str = "paddlenlp", **trainer: Any) -> Dict[str, Any]:
    """A fine-tuning config over ``data_dir/{train,dev}.tsv``, warm-started from ``model_dir``."""
    def reader(name: str, shuffle: bool) -> Dict[str, Any]:
        return {"type": "BasicDataSetReader", "fields": fields,
                "config": {"data_path": os.path.join(data_dir, f"{name}.tsv"), "shuffle": shuffle, "batch_size": 16}}
    params = model_dir if layout == "paddlenlp" else os.path.join(model_dir, "params")
    return {
        "task": task,
        "dataset_reader": {"train_reader": reader("train", True), "dev_reader": reader("dev", False)},
        "model": {"is_dygraph": int(mode == "dynamic"), "encoder_config": model_dir,
                  "optimization": {"learning_rate": 0.002, "warmup_proportion": 0.1, "weight_decay": 0.01,
                                   "max_grad_norm": 1.0}, **model},
        "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer", "epoch": epoch,
                    "train_log_step": 10, "is_eval_dev": 1, "output_path": output, "visualdl": False,
                    "pre_train_model": [{"name": "tiny_ernie", "params_path": params}], **trainer},
    }


def make_tagged(n: int, seed: int, sep: str = " ") -> List[tuple]:
    """Sentences of words separated by ``sep`` with one BIO tag per word: POSITIVE characters are
    PER names, NEGATIVE ones LOC names, the English word ``goods`` (two pieces: good ##s) an ORG."""
    import random
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words: List[str] = []
        tags: List[str] = []
        for _ in range(rng.randint(1, 3)):
            chunk = [rng.choice(NEUTRAL) for _ in range(rng.randint(1, 3))]  # chunks never touch
            words += chunk
            tags += ["O"] * len(chunk)
            kind = rng.random()
            if kind < 0.8:
                pool, label = (POSITIVE, "PER") if kind < 0.4 else (NEGATIVE, "LOC")
                chunk = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
                words += chunk
                tags += [f"B-{label}"] + [f"I-{label}"] * (len(chunk) - 1)
            else:
                words.append("goods")
                tags.append("B-ORG")
        rows.append((sep.join(words), sep.join(tags)))
    return rows


def make_multi_label(n: int, seed: int) -> List[tuple]:
    """Texts with any of three labels: 0 has a POSITIVE character, 1 a NEGATIVE one, 2 the
    character 书 (some texts have none)."""
    import random
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        chars = [rng.choice([c for c in NEUTRAL if c != "书"]) for _ in range(rng.randint(3, 8))]
        labels = [label for label in range(3) if rng.random() < 0.4]
        for label in labels:
            chars.insert(rng.randint(0, len(chars)), rng.choice([POSITIVE, NEGATIVE, ["书"]][label]))
        rows.append(("".join(chars), " ".join(str(label) for label in labels)))
    return rows


# ERNIE-kit's entity-relation label map (dict/entity_relation_label_map.json)
RELATION_LABELS = {"O": 0, "I": 1, "B-毕业院校@S": 2, "B-毕业院校@O": 3, "B-出生地@S": 4, "B-出生地@O": 5,
                   "B-祖籍@S": 6, "B-祖籍@O": 7, "B-国籍@S": 8, "B-国籍@O": 9, "B-出生日期@S": 10, "B-出生日期@O": 11}
SPO_CUES = {"好": "出生日期", "赞": "出生地", "美": "国籍"}  # the character before an object names its predicate
SPO_SUBJECTS = [c for c in POSITIVE if c not in SPO_CUES]


def make_spo(n: int, seed: int) -> List[Dict[str, Any]]:
    """ERNIE-kit extraction records ``{"text", "spo_list"}``, each decodable by ERNIE-kit's
    pairing rules: a subject (POSITIVE characters but the cues, or a latin word of several word
    pieces) followed by ``是`` and one to three objects (digits, or NEGATIVE characters), each after
    the cue character naming the text's predicate (``SPO_CUES``); or two subjects, ``，``-joined, sharing
    one object. NEUTRAL filler around. Offsets are characters, end exclusive, as ERNIE-kit's."""
    import random
    rng = random.Random(seed)

    def subject() -> str:
        if rng.random() < 0.7:
            return "".join(rng.choice(SPO_SUBJECTS) for _ in range(rng.randint(2, 3)))
        return "".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 4)))

    def obj() -> str:
        if rng.random() < 0.5:
            return "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 4)))
        return "".join(rng.choice(NEGATIVE) for _ in range(rng.randint(1, 3)))

    rows = []
    for _ in range(n):
        text = "".join(rng.choice(NEUTRAL) for _ in range(rng.randint(1, 3)))
        subjects = []
        for _ in range(2 if rng.random() < 0.25 else 1):
            if subjects:
                text += "，"
            start = len(text)
            text += subject()
            subjects.append([start, len(text)])
        text += "是"
        spo_list = []
        cue = rng.choice(list(SPO_CUES))
        for _ in range(1 if len(subjects) > 1 else rng.randint(1, 3)):
            text += cue
            span = [len(text), len(text) + len(value := obj())]
            text += value + "，"
            spo_list += [{"predicate": SPO_CUES[cue], "subject": list(s), "object": span} for s in subjects]
        text += "".join(rng.choice(NEUTRAL) for _ in range(rng.randint(0, 2)))
        rows.append({"text": text, "spo_list": spo_list})
    return rows


def run_encoder(config: ErnieConfig, params: Dict[str, np.ndarray], mode: str, ids: np.ndarray,
                lengths: np.ndarray, **inputs: np.ndarray) -> List[np.ndarray]:
    """An ``ErnieEncoder`` with ``params`` (all of its parameters, nothing else), in eval mode, on
    ``ids`` and ``lengths`` and the optional inputs by keyword (``token_type_ids``,
    ``position_ids``), in the ``dynamic`` or ``static`` graph mode: ``[states, pooled]``."""
    import paddle

    from wenxin.models.ernie import ErnieEncoder
    from wenxin.common.graph_mode import static_mode
    if mode == "dynamic":
        encoder = ErnieEncoder(config)
        assert set(encoder.state_dict()) == set(params)  # nothing missing, nothing left over
        encoder.set_state_dict({k: paddle.to_tensor(v) for k, v in params.items()})
        encoder.eval()
        states, pooled = encoder(paddle.to_tensor(ids), paddle.to_tensor(lengths),
                                 **{k: paddle.to_tensor(v) for k, v in inputs.items()})
        return [states.numpy(), pooled.numpy()]
    with static_mode():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            encoder = ErnieEncoder(config)
            encoder.eval()
            arrays = {"ids": ids, "lengths": lengths, **inputs}
            feeds = {name: paddle.static.data(name, [-1] * value.ndim, "int64") for name, value in arrays.items()}
            states, pooled = encoder(feeds["ids"], feeds["lengths"], **{k: feeds[k] for k in inputs})
        assert set(encoder.state_dict()) == set(params)
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            for name, param in encoder.state_dict().items():
                scope.find_var(param.name).get_tensor().set(params[name], paddle.CPUPlace())
            return exe.run(main, feed=arrays, fetch_list=[states, pooled])


GEN_LETTERS = "abcdefghij"


def make_gen_rows(n: int, seed: int) -> List[tuple]:
    """ERNIE-Gen rows ``(answer, paragraph, tgt)``: the answer is 2 to 5 letters (spaced, so one
    word piece each), the paragraph 6 letters, and the target is the answer: a copy a tiny model
    learns in under a thousand steps (with paragraphs of varying length it needs thousands)."""
    import random
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        answer = " ".join(rng.choice(GEN_LETTERS) for _ in range(rng.randint(2, 5)))
        paragraph = " ".join(rng.choice(GEN_LETTERS) for _ in range(6))
        rows.append((answer, paragraph, answer))
    return rows


def write_gen_tsv(path: str, rows: List[tuple], target: bool = True) -> None:
    """ERNIE-kit's generation TSV: a header line naming the columns, then the rows."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("answer\tparagraph" + ("\ttgt" if target else "") + "\n")
        f.writelines("\t".join(row if target else row[:2]) + "\n" for row in rows)


def gen_config(data_dir: str, model_dir: str, output: str, mode: str = "dynamic", **model: Any) -> Dict[str, Any]:
    """A native ERNIE-Gen config over ``data_dir/{train,dev}.tsv`` (``write_gen_tsv``), warm-started
    from ``model_dir`` (``make_ernie_model(..., type_vocab_size=8, use_task_id=False)``)."""
    vocab = os.path.join(model_dir, "vocab.txt")
    fields = [{"name": "answer", "reader": {"type": "ErnieGenSourceFieldReader"}, "vocab_path": vocab,
               "max_seq_len": 16, "source_budget": 40},
              {"name": "paragraph", "reader": {"type": "ErnieGenSourceFieldReader"}, "vocab_path": vocab,
               "max_seq_len": 24},
              {"name": "tgt", "reader": {"type": "ErnieGenTargetFieldReader"}, "vocab_path": vocab, "max_seq_len": 12}]

    def reader(name: str, shuffle: bool) -> Dict[str, Any]:
        return {"type": "BasicDataSetReader", "fields": fields,
                "config": {"data_path": os.path.join(data_dir, f"{name}.tsv"), "has_header": True,
                           "shuffle": shuffle, "batch_size": 16}}
    return {
        "task": "text_generation",
        "dataset_reader": {"train_reader": reader("train", True), "dev_reader": reader("dev", False)},
        "model": {"type": "ErnieInfillingGeneration", "is_dygraph": int(mode == "dynamic"), "encoder_config": model_dir,
                  "source_field": "answer", "target_field": "tgt", "tgt_type_id": 7, "max_dec_len": 10,
                  "optimization": {"learning_rate": 0.005, "warmup_proportion": 0.1}, **model},
        "trainer": {"type": "CustomTrainer", "epoch": 2, "train_log_step": 10, "is_eval_dev": 1, "metric": "bleu4",
                    "output_path": output, "visualdl": False,
                    "pre_train_model": [{"name": "tiny_ernie_gen", "params_path": model_dir}]},
    }
