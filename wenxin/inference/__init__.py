"""Inference: batch prediction, the Predictor and the HTTP service. The Paddle backend checks the
installed Paddle (through ``wenxin.compat``) before it imports it."""
