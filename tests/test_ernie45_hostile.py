"""A hostile or broken ERNIE 4.5 model folder (issue 56, point 1): every case is one error naming
the file and the key or tensor. None is a traceback, none loads a wrong model silently, none
builds a model larger than the files (a typo in ``vocab_size``), and the index cannot reach
outside the folder. The folders are the PaddleFormers-written fixture with one thing changed."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from typing import Any, Callable, Dict

import numpy as np
import pytest

from conftest import REPO
from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.models.ernie45 import load_ernie45
from wenxin.models.ernie45_folder import generation_defaults

FIXTURE = os.path.join(REPO, "tests", "fixtures", "ernie45", "untied")
INDEX = "model.safetensors.index.json"
TENSOR = "model.layers.0.self_attn.q_proj.weight"  # F32 [64, 64], in the first shard
BAD = (CheckpointError, ConfigError)


def read_safetensors(path: str):
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
        data = f.read()
    return header, data


def write_safetensors(path: str, header: Any, data: bytes) -> None:
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw + data)


def first_shard(folder: str) -> str:
    index = json.load(open(os.path.join(folder, INDEX)))
    return os.path.join(folder, index["weight_map"][TENSOR])


def edit_index(change: Callable[[Dict[str, Any]], Any]) -> Callable[[str], None]:
    def edit(folder: str) -> None:
        path = os.path.join(folder, INDEX)
        index = json.load(open(path))
        changed = change(index)
        with open(path, "w") as f:
            f.write(changed if isinstance(changed, str) else json.dumps(index if changed is None else changed))
    return edit


def edit_header(change: Callable[[Dict[str, Any]], None]) -> Callable[[str], None]:
    """Change the header entry of TENSOR in its shard (the data stay)."""
    def edit(folder: str) -> None:
        path = first_shard(folder)
        header, data = read_safetensors(path)
        change(header[TENSOR])
        write_safetensors(path, header, data)
    return edit


def edit_values(values: Callable[[np.ndarray], np.ndarray]) -> Callable[[str], None]:
    """Replace TENSOR's values in place (same dtype and size)."""
    def edit(folder: str) -> None:
        path = first_shard(folder)
        header, data = read_safetensors(path)
        begin, end = header[TENSOR]["data_offsets"]
        old = np.frombuffer(data[begin:end], dtype="<f4")
        write_safetensors(path, header, data[:begin] + values(old.copy()).astype("<f4").tobytes() + data[end:])
    return edit


def as_bfloat16_with_nan(folder: str) -> None:
    """The first shard rewritten in bfloat16 (as Baidu ships), one value of TENSOR a NaN."""
    path = first_shard(folder)
    header, data = read_safetensors(path)
    header.pop("__metadata__", None)
    written, parts = {}, []
    for name, spec in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = spec["data_offsets"]
        halves = (np.frombuffer(data[begin:end], dtype="<u4") >> 16).astype("<u2")
        if name == TENSOR:
            halves[3] = 0x7FC0  # a bfloat16 NaN
        at = sum(len(p) for p in parts)
        parts.append(halves.tobytes())
        written[name] = {"dtype": "BF16", "shape": spec["shape"], "data_offsets": [at, at + halves.nbytes]}
    write_safetensors(path, written, b"".join(parts))


def edit_file(name: str, content: Any) -> Callable[[str], None]:
    def edit(folder: str) -> None:
        with open(os.path.join(folder, name), "wb") as f:
            f.write(content if isinstance(content, bytes) else json.dumps(content).encode())
    return edit


def edit_config(**values: Any) -> Callable[[str], None]:
    def edit(folder: str) -> None:
        path = os.path.join(folder, "config.json")
        config = json.load(open(path))
        config.update(values)
        with open(path, "w") as f:
            json.dump(config, f)
    return edit


def single_file(content: bytes) -> Callable[[str], None]:
    """The folder as small models come: one model.safetensors, no index."""
    def edit(folder: str) -> None:
        for name in os.listdir(folder):
            if name.endswith(".safetensors") or name == INDEX:
                os.remove(os.path.join(folder, name))
        with open(os.path.join(folder, "model.safetensors"), "wb") as f:
            f.write(content)
    return edit


def rebuilt_pickle() -> bytes:
    return pickle.dumps({"model.embed_tokens.weight": np.zeros((512, 64), dtype=np.float32)})


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def pop_key(key: str) -> Callable[[Dict[str, Any]], None]:
    return lambda spec: spec.pop(key)


CASES = {
    # the index
    "weight_map is a list": (edit_index(lambda i: {**i, "weight_map": list(i["weight_map"])}),
                             rf"{INDEX}: weight_map must be an object"),
    "weight_map has an int value": (edit_index(lambda i: i["weight_map"].update({TENSOR: 5})),
                                    rf"{INDEX}: weight_map\['{TENSOR}'\] must be a shard's file name, got 5"),
    "weight_map is empty": (edit_index(lambda i: {**i, "weight_map": {}}), rf"{INDEX}: weight_map must be"),
    "a deeply nested index": (edit_index(lambda i: '{"weight_map": ' + deep(100_000) + "}"),
                              rf"{INDEX}: not a readable JSON object"),
    "an index that is not JSON": (edit_index(lambda i: "{weight_map"), rf"{INDEX}: not a readable JSON object"),
    "a shard above the folder": (edit_index(lambda i: i["weight_map"].update({TENSOR: "../elsewhere.safetensors"})),
                                 r"names '\.\./elsewhere\.safetensors', outside the model folder"),
    "a shard at an absolute path": (edit_index(lambda i: i["weight_map"].update({TENSOR: "/etc/passwd"})),
                                    r"names '/etc/passwd', outside the model folder"),
    "a tensor the named shard lacks": (
        edit_index(lambda i: i["weight_map"].update({TENSOR: sorted(set(i["weight_map"].values()))[-1]})),
        rf"the index puts '{TENSOR}' here, but the file does not hold it"),
    # the safetensors files
    "a pickle saved as model.safetensors": (single_file(rebuilt_pickle()),
                                            r"model\.safetensors: not a safetensors file"),
    "an empty model.safetensors": (single_file(b""), r"model\.safetensors: not a safetensors file"),
    "a header longer than the file": (single_file((10**6).to_bytes(8, "little") + b"{}"),
                                      r"not a safetensors file \(it does not start with the length"),
    "a header that is a list": (single_file((2).to_bytes(8, "little") + b"[]"),
                                r"its header is a list, not an object of tensors"),
    "a header that is not JSON": (single_file((4).to_bytes(8, "little") + b"\xff\xfe{}"),
                                  r"its header is not JSON"),
    "a tensor without data_offsets": (edit_header(pop_key("data_offsets")),
                                      rf"tensor '{TENSOR}': its data_offsets must be \[begin, end\]"),
    "a BF16 tensor without data_offsets": (edit_header(lambda s: (s.pop("data_offsets"), s.update(dtype="BF16"))),
                                           rf"tensor '{TENSOR}': its data_offsets must be"),
    "a string shape": (edit_header(lambda s: s.update(shape="64,64")),
                       rf"tensor '{TENSOR}': its shape must be a list of sizes, got '64,64'"),
    "a negative size": (edit_header(lambda s: s.update(shape=[-64, -64])), r"its shape must be a list of sizes"),
    "a shape the bytes do not fill": (edit_header(lambda s: s.update(shape=[64, 65])),
                                      r"16384 bytes, but its shape \[64, 65\] of F32 makes 16640"),
    "data_offsets past the end": (edit_header(lambda s: s.update(data_offsets=[0, 10**12])),
                                  r"its data_offsets must be \[begin, end\] inside the file's"),
    "an F32 tensor relabelled I32": (edit_header(lambda s: s.update(dtype="I32")),
                                     rf"tensor '{TENSOR}' is 'I32'; model weights are floating point"),
    "bool weights": (edit_header(lambda s: s.update(dtype="BOOL", shape=[64, 256])),
                     rf"tensor '{TENSOR}' is 'BOOL'"),
    "a tensor of NaN": (edit_values(lambda v: np.full_like(v, np.nan)),
                        rf"tensor '{TENSOR}' holds 4096 NaN or infinite values of 4096"),
    "one infinity": (edit_values(lambda v: np.where(np.arange(v.size) == 7, np.inf, v)),
                     rf"tensor '{TENSOR}' holds 1 NaN or infinite values"),
    "a NaN in a bfloat16 tensor": (as_bfloat16_with_nan, rf"tensor '{TENSOR}' holds 1 NaN or infinite values"),
    # config.json
    "a config that is a list": (edit_file("config.json", [1, 2]), r"config\.json: expected a JSON object"),
    "vocab_size 10^12": (edit_config(vocab_size=10**12), r"config\.json: vocab_size must be an integer from 1 to"),
    "vocab_size larger than the files": (edit_config(vocab_size=10**6),
                                         r"config\.json's sizes make a model of .* parameters, but its weight files"),
    "hidden_size true": (edit_config(hidden_size=True), r"hidden_size must be an integer"),
    "num_attention_heads as a string": (edit_config(num_attention_heads="4"), r"num_attention_heads must be an"),
    "no layers": (edit_config(num_hidden_layers=0), r"num_hidden_layers must be an integer from 1"),
    "head_dim 2.5": (edit_config(head_dim=2.5), r"head_dim must be an integer"),
    "rms_norm_eps 'x'": (edit_config(rms_norm_eps="x"), r"config\.json: rms_norm_eps must be a number between 0"),
    "rms_norm_eps -1": (edit_config(rms_norm_eps=-1), r"rms_norm_eps must be a number between 0 and 1, got -1"),
    "rope_theta 'x'": (edit_config(rope_theta="x"), r"config\.json: rope_theta must be a positive number, got 'x'"),
    "rope_theta -5": (edit_config(rope_theta=-5), r"rope_theta must be a positive number, got -5"),
    "tie_word_embeddings 'no'": (edit_config(tie_word_embeddings="no"),
                                 r"tie_word_embeddings must be true or false, got 'no'"),
    "use_bias 1": (edit_config(use_bias=1), r"use_bias must be true or false, got 1"),
    "max_position_embeddings 2^63": (edit_config(max_position_embeddings=2**63),
                                     r"max_position_embeddings must be an integer from 1 to 2147483647"),
    "eos_token_id 'x'": (edit_config(eos_token_id="x"), r"eos_token_id must be a token id .* got 'x'"),
    "eos_token_id past the vocabulary": (edit_config(eos_token_id=512), r"eos_token_id must be a token id"),
    "pad_token_id -1": (edit_config(pad_token_id=-1), r"pad_token_id must be a token id"),
    "a key twice in config.json": (edit_file("config.json", b'{"hidden_size": 64, "vocab_size": 512, "hidden_size": 65}'),
                                   r"config\.json: the key 'hidden_size' appears twice in one object"),
    "no max_position_embeddings": (edit_config(max_position_embeddings=None), r"config\.json: max_position_embeddings is missing"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_folder_is_one_clear_error(tmp_path, case):
    folder = str(tmp_path / "model")
    shutil.copytree(FIXTURE, folder)
    damage, said = CASES[case]
    damage(folder)
    with pytest.raises(BAD, match=said) as raised:
        load_ernie45(folder)
    assert "Traceback" not in str(raised.value)


GENERATION_CASES = {
    "top_p -1": ({"top_p": -1}, r"generation_config\.json: top_p must be a number above 0 and at most 1, got -1"),
    "top_p 2": ({"top_p": 2}, r"top_p must be a number above 0 and at most 1, got 2"),
    "temperature 'hot'": ({"temperature": "hot"}, r"temperature must be a number of at least 0, got 'hot'"),
    "temperature -0.5": ({"temperature": -0.5}, r"temperature must be a number of at least 0"),
    "top_k 1.5": ({"top_k": 1.5}, r"top_k must be a whole number of at least 0, got 1\.5"),
    "do_sample 'yes'": ({"do_sample": "yes"}, r"do_sample must be true or false, got 'yes'"),
    "eos_token_id 'x'": ({"eos_token_id": "x"}, r"eos_token_id must be a token id or a list of them"),
    "eos_token_id [-1]": ({"eos_token_id": [2, -1]}, r"eos_token_id must be a token id or a list of them"),
}


@pytest.mark.parametrize("case", sorted(GENERATION_CASES))
def test_a_hostile_generation_config_is_one_clear_error(tmp_path, case):
    values, said = GENERATION_CASES[case]
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_p": 0.8, **values}))
    with pytest.raises(ConfigError, match=said):
        generation_defaults(str(tmp_path))


def test_the_fixtures_generation_config_still_reads():
    assert generation_defaults(FIXTURE)["strategy"] in ("greedy", "sample")


TOKENIZER_CASES = {  # each file, and what the tokenizer of the folder must say
    "added_tokens.json: an id past the embedding": (
        "added_tokens.json", b'{"<huge>": 1000000000000}',
        r"added_tokens\.json: '<huge>': id 1000000000000 is past the model's vocabulary \(vocab_size 512"),
    "added_tokens.json: a key twice": ("added_tokens.json", b'{"<a>": 500, "<a>": 501}',
                                       r"added_tokens\.json: the key '<a>' appears twice"),
    "special_tokens_map.json: a number": ("special_tokens_map.json", b"5",
                                          r"special_tokens_map\.json: expected a JSON object, got int"),
    "tokenizer_config.json: a key twice": ("tokenizer_config.json", b'{"cls_token": "<a>", "cls_token": "<b>"}',
                                           r"tokenizer_config\.json: the key 'cls_token' appears twice"),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER_CASES))
def test_a_hostile_tokenizer_file_is_one_clear_error_before_training(tmp_path, case):
    """The tokenizer of a model folder is read with the data, before a model is built: a token id
    past the embedding (which would index outside it) and ambiguous files are refused there."""
    from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer
    name, content, said = TOKENIZER_CASES[case]
    folder = str(tmp_path / "folder")
    shutil.copytree(os.path.join(REPO, "tests", "fixtures", "ernie45", "tied"), folder)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(content)
    with pytest.raises(ConfigError, match=said):
        Ernie45Tokenizer(folder)
