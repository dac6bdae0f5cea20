"""Writing a run's model as an inference folder (``wenxin.controller.export``'s layout).

``InferenceExporter`` is handed the engine that holds the model, the dataset readers whose fields
the folder describes, and the task config; the trainer's ``export_inference`` makes one per export.
"""
from __future__ import annotations

import contextlib
import filecmp
import logging
import os
from typing import Any, Callable, Dict, Iterator, List

from wenxin.common import owned_folders
from wenxin.common.errors import ConfigError
from wenxin.controller import export
from wenxin.controller.engine import Batch, ExecutionEngine
from wenxin.data.export_bundle import SHARED_PARAMS
from wenxin.data.dataset_reader import BasicDataSetReader
from wenxin.common.held_state import state_held

logger = logging.getLogger("wenxin")


class InferenceExporter:
    """Exports ``engine``'s model with the preprocessing of ``readers``' fields.

    Args:
        engine: the set-up engine (its model, state and graph saving).
        readers: the run's dataset readers by name.
        config: the task config (its task and model type go into ``preprocess.json``).
        sample: a batch of the exported inputs, for an engine that traces the model with one.
    """

    def __init__(self, engine: ExecutionEngine, readers: Dict[str, BasicDataSetReader], config: Dict[str, Any],
                 sample: Callable[[], Batch]) -> None:
        self.engine, self.readers, self.config, self.sample = engine, readers, config, sample

    def export(self, folder: str, quiet: bool = False) -> str:
        """Write a self-contained inference folder (graph, weights, preprocessing) to ``folder``:
        whole or not at all (an earlier export there stays until the new one is complete; nothing
        but an earlier inference export is ever replaced: ``wenxin.common.owned_folders``)."""
        self._check_raw_text_input()
        with owned_folders.writing(folder, export.KIND) as tmp:
            outputs = self._write(tmp)
        if not quiet:
            logger.info("exported inference model to %s (outputs: %s)", folder, ", ".join(outputs))
        return folder

    def _write(self, tmp: str) -> List[str]:
        """The export's files into the empty folder ``tmp``, sealed; returns the model's outputs."""
        fields = export.inference_fields(self.readers)
        extra: Dict[str, Any] = {}
        with self._export_weights():
            if getattr(self.engine.model, "step_specs", None) is not None:  # generation: its step functions
                if self.engine.model.max_new_tokens_limit < 1:
                    raise ConfigError("export: this generation model's longest prompt (the max_seq_len of its "
                                      "field) takes every position the model has, so its export could add no "
                                      "token; export with a smaller max_seq_len (wenxin export ... --set "
                                      "dataset_reader.train_reader.fields.0.max_seq_len=N)")
                prompt = self.engine.model.prompt_source()
                extra = {"steps": share_step_parameters(tmp, self.engine.save_step_functions(tmp)),
                         "generation": {"settings": self.engine.model.decode_settings().as_dict(),
                                        "prompt": {"inputs": dict(prompt.inputs), "lengths": prompt.lengths},
                                        "max_new_tokens_limit": self.engine.model.max_new_tokens_limit}}
                outputs = list(self.engine.model.prediction_outputs)
            else:
                outputs = self.engine.save_inference_graph(os.path.join(tmp, export.MODEL_PREFIX), fields,
                                                           self.sample)
        names = export.shown_label_names(self.readers)
        extra = {**extra, **({"label_names": names} if names else {})}
        export.write_preprocessing(tmp, fields, outputs, export.label_names(self.readers), self.config,
                                  self.engine.model.prediction_format,
                                  {"onednn_min_rows": self.engine.model.onednn_min_rows,
                                   "sorted_batch_rows": self.engine.model.sorted_batch_rows}, extra)
        export.seal_export(tmp)
        return outputs

    @contextlib.contextmanager
    def _export_weights(self) -> Iterator[None]:
        """Inside: the parameters the model exports with (``BaseModel.export_state``, e.g. LoRA
        adapters merged). After: every changed parameter as it was, bit for bit, so training and
        its checkpoints go on unchanged."""
        state = self.engine.model_state_dict()  # eager: the live parameters; only the changed ones are copied
        with state_held(state, self.engine.model.export_state(state), self.engine.set_model_state_dict):
            yield

    def _check_raw_text_input(self) -> None:
        """A tagger is exported only if it can tag raw sentences as it was trained (or its text
        field says inference input is tokenized like the training data)."""
        if self.engine.model.prediction_format != "tagging":
            return
        for field in export.inference_fields(self.readers):
            trained = self.readers["train_reader"].field(field.name)
            issue = getattr(trained, "raw_text_issue", None)
            if issue:
                raise ConfigError(f"export: {issue}")


def share_step_parameters(folder: str, steps: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """One parameters file for the step functions in ``folder`` when theirs are byte for byte the
    same (each program traced from one model reads all its weights in one order: both engines'
    exports, measured): ``SHARED_PARAMS`` instead of a copy each (at ERNIE-4.5-0.3B's size 1.44 GB
    instead of 4.33), named by each step's ``params``. Otherwise the files stay as written."""
    files = [os.path.join(folder, f"{name}.pdiparams") for name in steps]
    if len(files) < 2 or not all(os.path.isfile(f) for f in files) or \
            not all(filecmp.cmp(files[0], f, shallow=False) for f in files[1:]):
        return steps
    os.replace(files[0], os.path.join(folder, SHARED_PARAMS))
    for path in files[1:]:
        os.remove(path)
    return {name: {**entry, "params": SHARED_PARAMS} for name, entry in steps.items()}
