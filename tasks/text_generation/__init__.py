"""Text generation: ERNIE-Gen's infilling sequence-to-sequence model on a pretrained ERNIE
(ERNIE-kit's ``ErnieInfillingGeneration``), decoded by greedy search, beam search or sampling
over a key/value cache, scored by BLEU-4 and ROUGE-L."""
from . import models  # noqa: F401  (importing registers the task's model; readers and trainers are built in)
