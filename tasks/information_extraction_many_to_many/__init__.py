"""Many-to-many information extraction: subject-predicate-object triples from text, each token
labelled with where subjects and objects start (several labels per token), on a pretrained ERNIE
(ERNIE-kit's ``ErnieFcIe``); triple-level precision, recall and F1."""
from . import models  # noqa: F401  (importing registers the task's model; readers and trainers are built in)
