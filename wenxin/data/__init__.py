"""Tokenizers, vocabularies, field readers and dataset readers. Only ``worker_loader`` (tensors,
``paddle.io.DataLoader``) imports Paddle, so reading and converting data runs without it."""
