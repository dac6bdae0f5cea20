"""Model building blocks and the ERNIE encoder. Each module that needs Paddle checks the installed
Paddle before it imports it (``wenxin.common.paddle_required``); the decoding strategies
(``decoding``) are numpy and load without it."""
