"""Other tools' files in wenxin's terms, read before anything of wenxin's checks them:

- ``erniekit``: ERNIE-kit task and infer files translated into wenxin task files (called by the
  config loader before validation, and by ``wenxin migrate``);
- ``pretrained``: ERNIE/BERT weights in PaddleNLP's and ERNIE-kit's layouts, read without
  unpickling where they are tensor files, and renamed to wenxin's encoder names.

Nothing here imports Paddle or the rest of wenxin above ``wenxin.common``.
"""
