"""The ``wenxin`` commands, one row each (``wenxin.cli_table``): name, what it does, arguments,
handler (``wenxin.cli_handlers``), and what it needs before it runs. ``--help`` and the table of
docs/commands.md are built from these rows."""
from __future__ import annotations

import argparse
from typing import List, Optional, Tuple

from wenxin import cli_handlers as run
from wenxin.cli_table import Arg, Command, CommandTable, arg, replace_docs_table
from wenxin.common.constants import ONEDNN_SETTINGS
from wenxin.common.files import write_text_atomically

EXIT_CODES_HELP = ("exit status: 0 done, 2 usage, task-file or installation error, 3 data error, 4 checkpoint error, "
                   "75 stopped by a signal after saving a checkpoint (resume with trainer.checkpoints.resume=auto), "
                   "130/143 interrupted/terminated before training")
BACKEND_HELP = ("a registered inference backend: paddle, onnxruntime (the folder's model.onnx, or a chat "
                "model's advance_pair.onnx), onnxruntime-int8 (a chat model's advance_pair.int8.onnx), or auto: ONNX "
                "Runtime when the folder has its float32 model and it is installed, else Paddle; a model folder served "
                "with an onnxruntime backend is converted once, into its cache entry")
TASK_HELP = ("a task package to import first (a task file's \"task\"), for a model whose fields use its own "
             "tokenizers or field readers; nothing is imported unless named")
ONEDNN_HELP = ("the Paddle backend's oneDNN; auto: the exported model's rule (e.g. CNN, transformer and ERNIE "
               "models from 8 rows a batch, BoW never), logged and shown by /health")
MODEL_DIR_HELP = ("an exported folder, a checkpoint folder that holds one (inference/), a model folder (ERNIE "
                  "4.5: Baidu's -PT or ERNIEKit's -Paddle layout, or wenxin export --format pt's), or a model's name "
                  "on a hub (owner/model, downloaded once into the cache)")
def hub_args(synopsis: str = "") -> Tuple[Arg, ...]:
    """How a model's name is downloaded (``synopsis``: how the docs' table shows the three)."""
    return (
        arg("--hub", default=None, synopsis=synopsis,
            help="where a model's name (owner/model) is downloaded from: huggingface, modelscope or aistudio "
                 "(default: $WENXIN_HUB, else huggingface)"),
        arg("--revision", default=None, help="a model name's revision (a branch, tag or commit; default: the hub's)"),
        arg("--offline", action="store_true", help="a model's name from the cache only (also $WENXIN_OFFLINE=1, "
                                                   "or the hub's own offline setting, such as HF_HUB_OFFLINE=1)"),
    )


HUB_ARGS = hub_args()
GRAPH_MODE_ARG = arg("--graph_mode", choices=["dynamic", "static"], default="dynamic",
                     help="a model folder: the graph its decode step programs are built in (once, then cached)")


def port(text: str) -> int:
    """A TCP port number for argparse (an error names the value, no traceback)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number} is not a port number (0 to 65535)")
    return number


def seconds_list(text: str) -> Tuple[float, ...]:
    """``10,30,60``: waits in seconds, each from 0 to an hour."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds separated by commas, such as 10,30,60") \
            from None
    if not all(0 <= value <= 3600 for value in values):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r}: each wait is from 0 to 3600 seconds")
    return values


TASK_ARGS: Tuple[Arg, ...] = (
    arg("--param_path", required=True, help="task file (JSON or YAML)", synopsis="--param_path T"),
    arg("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a config value, e.g. --set trainer.epoch=3 (repeatable)", synopsis="[--set k=v]"),
)
BACKEND_ARGS: Tuple[Arg, ...] = (
    arg("--backend", default="auto", help=BACKEND_HELP),
    arg("--onednn", choices=ONEDNN_SETTINGS, default="auto", help=ONEDNN_HELP),
    arg("--task", default="", help=TASK_HELP),
)
SERVE_ARGS: Tuple[Arg, ...] = (
    arg("--model_dir", required=True, help=MODEL_DIR_HELP, synopsis="--model_dir M"),
    GRAPH_MODE_ARG,
    *HUB_ARGS,
    arg("--host", default="127.0.0.1", help="bind address (default: loopback only; any other needs --api_key)",
        synopsis="[--host H --api_key K]"),
    arg("--api_key", default=None, help="what clients send as Authorization: Bearer KEY (default: $WENXIN_API_KEY; "
                                        "none: no key, even off loopback)"),
    arg("--port", type=port, default=8866, help="TCP port, 0 to 65535 (0: any free one; default: %(default)s)"),
    arg("--workers", type=int, default=1, help="service processes, each with the model loaded (one per core to use "
                                               "them all)"),
    arg("--model_threads", type=int, default=1,
        help="threads running model batches in each process (more than 1 helps only onnxruntime)"),
    arg("--num_threads", type=int, default=1,
        help="CPU math threads of each model (a generation batch of many rows is compute-bound: 2 threads on 2 cores "
             "decode more tokens a second; one row a step gains nothing)"),
    arg("--max_batch", type=int, default=256, help="most inputs in one request"),
    arg("--model_batch", type=int, default=64, help="most inputs in one model batch"),
    arg("--max_wait_ms", type=float, default=2.0, help="how long a request waits for others to share its model batch"),
    arg("--max_body_bytes", type=int, default=1 << 20, help="largest request body"),
    arg("--read_timeout", type=float, default=10.0,
        help="seconds for a request's headers, and for its body, to arrive"),
    arg("--max_connections", type=int, default=256,
        help="open connections; a new one closes the oldest idle one (keep-alive, or still sending its headers); "
             "requests get 503 only when all are being answered (/health never)"),
    arg("--max_connections_per_client", type=int, default=128,
        help="open connections of one client address, shed the same way"),
    arg("--max_new_tokens", type=int, default=256,
        help="generation models: the most tokens one /generate or /predict answer may have"),
    arg("--generation_timeout", type=float, default=60.0,
        help="generation models: seconds from a request's arrival to the end of its answer (its prompt's preparation "
             "and any wait included; then finish_reason time_limit)"),
    arg("--max_rows", type=int, default=32,
        help="generation models: cache rows decoding together in each process (a request takes one, a beam search "
             "beam_size)"),
    arg("--max_cached_tokens", type=int, default=65536,
        help="generation models: key/value cache token slots in each process (rows x the longest row, counted at each "
             "request's longest: prompt + max_new_tokens)"),
    arg("--max_waiting", type=int, default=64,
        help="generation models: requests waiting for room; one more is answered 503 with Retry-After"),
    arg("--prefill_tokens", type=int, default=512,
        help="generation models: prompt tokens prefilled in a turn, shared evenly among the prompts being prefilled "
             "(a longer chat prompt goes in parts, one a turn); while answers decode, see --turn_prefill"),
    arg("--turn_prefill", default="all", choices=["all", "rows"],
        help="generation models: prompt tokens a turn prefills while answers decode: all, --prefill_tokens (sooner "
             "first tokens, more tokens a second), or rows, about as many as the rows that decode (at least 16: even "
             "time between tokens, later first tokens)"),
    arg("--prefix_cache_mb", type=int, default=64,
        help="generation models: MB of prompts' key/value caches kept so that later prompts starting the same way (the "
             "chat template and system prompt, a conversation's earlier turns) prefill only the rest; 0: none"),
    arg("--decode_process", default="auto", choices=["auto", "on", "off"],
        help="generation models: decode in a process of its own, so that requests and /health are answered while "
             "a step runs; auto: where the backend keeps Python's lock while it runs (paddle) and --workers is 1"),
    arg("--max_messages", type=int, default=1024, help="chat models: messages in one request"),
    arg("--max_prompt_bytes", type=int, default=256 * 1024,
        help="generation models: a request's prompt text, in UTF-8 bytes"),
    *BACKEND_ARGS,
)

COMMANDS = (
    Command("train", "train (and evaluate) a task", run.train_command, TASK_ARGS, paddle=True, task_file=True,
            doc="train and evaluate (`python run_trainer.py ...` is the same)"),
    Command("evaluate", "score a checkpoint on the task file's dev and test data, or a model folder on a file of "
                        "conversations", run.evaluate_command, (
        arg("--param_path", default="", help="task file (JSON or YAML)", synopsis="--param_path T"),
        TASK_ARGS[1],
        arg("--checkpoint", default="", help="checkpoint folder or params file", synopsis="--checkpoint C"),
        arg("--reader", action="append", default=[], choices=["dev", "test"], synopsis="[--reader dev|test]",
            help="evaluate only this reader (repeatable; default: every one configured)"),
        arg("--model_dir", default="", help="instead of a task's checkpoint: a model folder (ERNIE 4.5), evaluated "
                                            "as it is (no training)"),
        arg("--data", default="", help="with --model_dir: conversations, one JSON object a line (ERNIEKit's SFT "
                                       "format, or alpaca's)"),
        arg("--batch_size", type=int, default=8, help="with --model_dir: conversations in one batch"),
        arg("--max_seq_len", type=int, default=2048,
            help="with --model_dir: a conversation's tokens (its first turns that fit are scored)"),
        GRAPH_MODE_ARG,
        *HUB_ARGS,
    ), paddle=True, task_file=True, checks=(run.check_evaluated, run.check_checkpoint),
        doc="score a checkpoint on the task file's dev and test data; prints the metrics as JSON",
        doc_rows=(("wenxin evaluate --model_dir F --data FILE [--batch_size N --max_seq_len N]",
                   "score a model folder as it is (no training) on a file of conversations: loss, perplexity "
                   "(`ppl`) and token accuracy, as JSON ([chat](chat.md#a-model-folder-is-a-model))"),)),
    Command("predict", "predict raw text with an exported model (or a checkpoint's)", run.predict_command, (
        arg("--model_dir", required=True, help=MODEL_DIR_HELP, synopsis="--model_dir M"),
        arg("--text", action="append", default=[], synopsis="[--text S ...]",
            help="one input (fields separated by tabs; repeatable); default: lines of --input or stdin"),
        arg("--input", default="", help="a text file, one input per line", synopsis="[--input FILE]"),
        arg("--batch_size", type=int, default=64),
        *BACKEND_ARGS,
        arg("--stream", action="store_true", synopsis="[--stream]",
            help="generation models: print each answer as its tokens are chosen (one input at a time)"),
        GRAPH_MODE_ARG,
        *HUB_ARGS,
    ), paddle=True, checks=(run.check_model_dir,),
        doc="predict raw text (or stdin) with an exported model, or the one in a checkpoint folder; prints each "
            "input, a tab, and the result (`--stream`: a generation model's answer as its tokens are chosen)"),
    Command("export", "export a checkpoint as a self-contained inference folder", run.export_command, (
        *TASK_ARGS,
        arg("--checkpoint", required=True, help="checkpoint folder or params file", synopsis="--checkpoint C"),
        arg("--output", default="", help="target folder (default: <checkpoint>/inference, or pretrained)",
            synopsis="[--output D]"),
        arg("--format", choices=["paddle", "onnx", "pt"], default="paddle", synopsis="[--format onnx]",
            help="onnx: also model.onnx (needs wenxin[onnx]), checked against Paddle; pt: the model folder other "
                 "runtimes load (ERNIE 4.5 chat models; LoRA merged; docs/chat.md)"),
        arg("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="--format pt's weights"),
        arg("--max_shard_mb", type=float, default=5000.0, help="--format pt: the largest shard, in MB"),
    ), paddle=True, task_file=True, checks=(run.check_checkpoint, run.check_export_format),
        doc="export a checkpoint as a self-contained inference folder (with `onnx`, also `model.onnx`); `--output` "
            "replaces only an earlier export of the same format ([robustness](robustness.md))",
        doc_rows=(("wenxin export --param_path T --checkpoint C --format pt [--dtype bfloat16|float32] "
                   "[--max_shard_mb N] [--output D]",
                   "an ERNIE 4.5 chat model as the `-PT` model folder other runtimes load (safetensors shards, "
                   "config, tokenizer; LoRA merged) ([chat](chat.md#the-model-folder-other-runtimes-load))"),)),
    Command("chat", "a conversation with a chat model in the terminal: streamed answers, history, /reset, /exit",
            run.chat_command, (
                arg("model", help="a model folder (ERNIE 4.5), its name on a hub (owner/model), an exported chat "
                                  "model, or a checkpoint folder holding one", synopsis="F"),
                arg("--system", default="", help="the system prompt", synopsis="[--system S]"),
                arg("--temperature", type=float, default=None, synopsis="[--temperature T --top_p P --top_k K]",
                    help="sampling's temperature (0: greedy; default: the model's generation_config.json)"),
                arg("--top_p", type=float, default=None, help="sampling: the smallest set of tokens this likely"),
                arg("--top_k", type=int, default=None, help="sampling: the k likeliest tokens (0: all)"),
                arg("--seed", type=int, default=None, help="sampling's seed (the same seed, the same answers)"),
                arg("--max_new_tokens", type=int, default=None, synopsis="[--max_new_tokens N]",
                    help="an answer's tokens at most (default: the model's)"),
                arg("--num_threads", type=int, default=1, help="CPU math threads"),
                arg("--backend", default="auto", help=BACKEND_HELP, synopsis="[--backend B]"),
                GRAPH_MODE_ARG,
                *HUB_ARGS,
            ), paddle=True, checks=(run.check_chat_model,),
            doc="talk with a chat model in the terminal: answers stream, the conversation is kept (fitted to the "
                "model's prompt length as the service fits it), `/reset`, `/system TEXT`, `/exit`; Ctrl-C ends an "
                "answer, not the session ([chat](chat.md#chat-in-the-terminal))"),
    Command("infer", "predict raw text files with an exported model (an infer task file)", run.infer_command,
            TASK_ARGS, paddle=True,
            doc="predict files with an infer task file (`python run_infer.py ...` is the same)"),
    # Paddle only where the serving process runs it (wenxin.inference.server.loads_paddle_here)
    Command("serve", "serve an exported model over HTTP (JSON)", run.serve_command, SERVE_ARGS,
            checks=(run.check_model_dir,),
            doc="the HTTP service ([inference and serving](serving.md)); beyond loopback it asks clients for "
                "`Authorization: Bearer K`"),
    Command("inspect", "show the task's data (lengths, truncation, labels, vocabulary, samples) and model (layers, "
                       "parameters, FLOPs) without training", run.inspect_command, (
        *TASK_ARGS,
        arg("--samples", type=int, default=3, help="sample examples shown per reader"),
        arg("--json", action="store_true", help="print the report as one JSON line instead", synopsis="[--json]"),
    ), paddle=True, task_file=True,
        doc="the task's data (examples, token-length percentiles, truncation, labels, vocabulary and OOV rate, sample "
            "examples as ids) and model (layer tree, parameters, FLOPs per example), without training"),
    Command("sweep", "a hyperparameter sweep (grid, random or Optuna) over config keys, each trial a training run "
                     "(or K, cross-validated); a results table and the best config", run.sweep_command, (
        *TASK_ARGS,
        arg("--sweep", required=True, help="the sweep file (JSON or YAML): method, parameters, ...",
            synopsis="--sweep S"),
    ), paddle=True, task_file=True,  # Paddle: the trials' model keys are checked before any runs
        doc="a hyperparameter sweep (grid, random or Optuna) over config keys, optionally K-fold cross-validated; a "
            "results table and the best config ([the experiment workflow](workflow.md))"),
    Command("lr-find", "the learning-rate range test: loss against a growing learning rate, a suggested rate, a plot",
            run.lr_find_command, (
                *TASK_ARGS,
                arg("--min_lr", type=float, default=1e-7, help="the first step's learning rate",
                    synopsis="[--min_lr A --max_lr B --steps N]"),
                arg("--max_lr", type=float, default=10.0, help="the last step's learning rate"),
                arg("--steps", type=int, default=100,
                    help="most optimizer steps (the rate grows by a constant factor each step)"),
                arg("--diverge", type=float, default=4.0,
                    help="stop when the smoothed loss exceeds this many times its lowest"),
                arg("--output", default="", help="results folder (default: <trainer.output_path>/lr_find)"),
                    ), paddle=True, task_file=True,
            doc="the learning-rate range test: suggests a learning rate and writes the points and a plot "
                "([the experiment workflow](workflow.md))"),
    Command("migrate", "translate an ERNIE-kit task file (or a native one of flat trainer keys) into a native wenxin "
                       "one, its trainer keys grouped", run.migrate_command, (
        arg("param_path", help="the ERNIE-kit or flat task file (JSON or YAML)", synopsis="erniekit.json"),
        arg("-o", "--output", default="", help="write the native task file here (default: print it)",
            synopsis="-o native.json"),
        arg("--force", action="store_true", help="replace a file (or link) already at --output", synopsis="[--force]"),
    ), doc="translate an ERNIE-kit task file (or a native one whose trainer keys are flat) into a native one with the "
           "trainer keys grouped ([the trainer section](training.md#the-trainer-section)); a file or link already at "
           "`-o` is replaced only with `--force` (a link by the file, never through it)"),
    Command("convert", "write a pickled weights file (.pdparams, ERNIE-kit params) or a model folder's weights as "
                       "safetensors, read without running code", run.convert_command, (
        arg("source", help="a .pdparams or params file, or a PaddleNLP / ERNIE-kit model folder", synopsis="PATH"),
        arg("-o", "--output", default="", synopsis="[-o FILE]",
            help="the safetensors file (default: <folder>/model.safetensors, or <file>.safetensors)"),
    ), doc="write a pickled weights file (`.pdparams`, ERNIE-kit's `params`) or a model folder's weights once as "
           "safetensors (`<folder>/model.safetensors`, which the folder then loads first)"),
    Command("distill", "data distillation (ERNIE-kit's run_distill.sh): train a teacher, let it label unlabeled "
                       "texts, train a small student on them", run.distill_command, (
        arg("--teacher", default="", help="the teacher's task file (e.g. an ERNIE classifier)", synopsis="--teacher T"),
        arg("--teacher_model", default="", help="the teacher's exported model: skips training it"),
        arg("--teacher_infer", default="",
            help="an infer file naming the teacher's export (ERNIE-kit's cls_ernie_fc_ch_infer.json)"),
        arg("--student", required=True, synopsis="--student S",
            help="the student's task file (e.g. a BoW or CNN classifier); its training data includes --labels_out"),
        arg("--unlabeled", required=True, help="the unlabeled (augmented) texts: a file or a folder",
            synopsis="--unlabeled U"),
        arg("--labels_out", required=True, help="where the teacher's labels go: student text<TAB>label",
            synopsis="--labels_out L [--teacher_model M] [--teacher_infer I]"),
        arg("--student_column", type=int, default=0, help="the column the student reads (0-based)"),
        arg("--teacher_column", type=int, default=-1, help="the column the teacher reads (default: the last)"),
        arg("--teacher_set", action="append", default=[], metavar="KEY=VALUE",
            help="override a key of the teacher's task file (repeatable), as train's --set"),
        arg("--student_set", action="append", default=[], metavar="KEY=VALUE",
            help="override a key of the student's task file (repeatable)"),
    ), paddle=True,
        doc="data distillation, ERNIE-kit's `run_distill.sh` in one command: train the teacher, label the unlabeled "
            "texts with its export, train the student on them ([tasks](tasks.md#data-distillation))"),
    Command("augment", "augment texts for distillation (unknown-word noise, same-POS replacement, n-gram sampling): "
                       "student text<TAB>teacher text lines", run.augment_command, (
        arg("--input", required=True, help="a file of texts, words split by spaces (word or word/TAG)",
            synopsis="--input F"),
        arg("--output", required=True, help="the augmented lines", synopsis="--output O"),
        arg("--column", type=int, default=0, help="the input's column of words (0-based, tab-separated)"),
        arg("--copies", type=int, default=20, help="copies tried per sentence (repeats are dropped)",
            synopsis="[--copies N --unk P --pos P --ngram P]"),
        arg("--unk", type=float, default=0.1, help="probability of a word becoming [UNK]"),
        arg("--pos", type=float, default=0.1,
            help="probability of a word becoming another of its part of speech (needs word/TAG)"),
        arg("--ngram", type=float, default=0.25, help="probability of cutting a copy to an n-gram"),
        arg("--max_ngram", type=int, default=5, help="the longest n-gram kept"),
        arg("--seed", type=int, default=1),
        arg("--join", default="", help="what joins the words of the teacher's text (\"\": Chinese)"),
    ), doc="augmented texts for distillation (unknown-word noise, same-POS replacement, n-gram sampling), as "
           "`student text<TAB>teacher text` lines"),
    Command("studio", "a web page to launch, watch, compare and restart runs of the task files under a root folder "
                      "(needs wenxin[studio])", run.studio_command, (
        arg("--root", default=".", synopsis="[--root DIR]",
            help="the folder of task files, data and runs (default: here); runs go to ROOT/studio_runs, the studio's "
                 "state to ROOT/.wenxin-studio"),
        arg("--host", default="127.0.0.1", help="bind address (default: loopback only; any other needs a token)",
            synopsis="[--host H --port P --token T --max_runs N]"),
        arg("--port", type=port, default=8870, help="TCP port (0: any free one; default: %(default)s)"),
        arg("--token", default=None, help="the token a browser must present (default: $WENXIN_STUDIO_TOKEN; off "
                                          "loopback, else a new one, printed)"),
        arg("--max_runs", type=int, default=0,
            help="runs at once (default 0: one per two cores); each gets its share of the cores"),
        arg("--restart_budget", type=int, default=3,
            help="restarts of a run that dies (crash, kill) before it counts as failed"),
        arg("--restart_backoff", type=seconds_list, default=(10.0, 30.0, 60.0),
            help="seconds before the 1st, 2nd, ... restart of a run that died, the last one repeated (default: "
                 "10,30,60; 0: at once)"),
    ), doc="a web page to launch, watch, compare, stop, resume and restart runs of the task files under a root "
           "folder; needs `wenxin[studio]` ([the studio](studio.md))"),
    Command("download", "download a model by its name on a hub into wenxin's cache (or find it there); prints its "
                        "folder", run.download_command, (
        arg("name", help="owner/model, such as baidu/ERNIE-4.5-0.3B-PT", synopsis="NAME"),
        *hub_args("[--hub huggingface] [--revision R] [--offline]"),
    ), doc="download a model by name (Hugging Face; `HF_ENDPOINT` for a mirror) into wenxin's cache, going on from "
           "the files an interrupted download finished and checking the hub's checksums; prints the folder. "
           "Wherever a model folder is asked for (`--model_dir`, `wenxin chat`), its name does the same "
           "([chat](chat.md#models-by-name))"),
    Command("cache", "list what wenxin's cache holds (model folders' decode step programs, ONNX programs with their "
                     "weights packed), or clear it",
            run.cache_command, (arg("--clear", action="store_true", help="delete everything it holds",
                                    synopsis="[--clear]"),),
            doc="list the decode step programs built for model folders and the ONNX programs whose weights "
                "ONNX Runtime packed on disk (in `$WENXIN_CACHE`, else `~/.cache/wenxin`), or delete them "
                "([chat](chat.md#a-model-folder-is-a-model), [serving](serving.md#weights-packed-on-disk))"),
    Command("examples", "copy the example task files and data scripts into DIR/examples", run.examples_command, (
        arg("folder", nargs="?", default=".", help="target folder (default: the working folder)", synopsis="[DIR]"),
    ), doc="copy the example task files and data scripts into `DIR/examples`"),
)
TABLE = CommandTable(COMMANDS)
DOCS_EXTRA_ROWS = (("wenxin --version", "wenxin's version and the installed Paddle build"),)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m wenxin.cli_commands [docs/commands.md]``: write the command table into the docs
    (default: print it)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("docs", nargs="?", default="")
    docs = parser.parse_args(argv).docs
    table = TABLE.markdown(DOCS_EXTRA_ROWS)
    if not docs:
        print(table)
        return 0
    with open(docs, encoding="utf-8") as f:
        text = replace_docs_table(f.read(), table)  # before the file is opened for writing
    write_text_atomically(docs, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
