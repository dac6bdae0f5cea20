"""Text matching: pointwise (a pair -> a label) and pairwise (query, positive, negative -> margin
loss) with one encoder shared by both sides; accuracy and AUC."""
from . import models  # noqa: F401  (importing registers the task's models; the trainers are built in)
