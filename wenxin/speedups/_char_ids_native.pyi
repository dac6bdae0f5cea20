"""Type hints of the C kernel ``_char_ids_native.c`` (see ``wenxin.speedups.char_ids``)."""
from typing import Dict, List, Optional, Tuple

import numpy as np

NO_LOWER: int  # in the lower table: a character the kernel does not lowercase (its batch is refused)
CHAR_RULE: int  # split: CharTokenizer's token rule
SPLIT_AT_SPACE: int  # split: the runs between whitespace (str.split()); else a separator's code point


class Kernel:
    """Character-tokenizer ids for a batch of texts, from the tables ``CharBatchIds`` builds."""

    def __init__(self, kinds: np.ndarray, classes: np.ndarray, one: np.ndarray, lower: np.ndarray,
                 single_ids: np.ndarray, gram_tables: Tuple[Tuple[np.ndarray, np.ndarray, int, int], ...],
                 many: Dict[int, str], token_to_id: Dict[str, int], unk_id: int, padding_id: int, max_seq_len: int,
                 width: int, ngram: int, truncation_type: int, lowercase: bool, split: int = ...) -> None: ...

    def __call__(self, texts: List[str], out: np.ndarray, lengths: np.ndarray) -> Optional[int]:
        """Fill ``out`` with the padded ids ``[len(texts), width]`` from its start and ``lengths``
        with each text's; the width, or None where the batch is refused."""
