"""Everything wenxin takes from Paddle's and VisualDL's private or unstable internals, in one
place: each use is checked against the public behaviour it replaces, and each fast path has a
config switch that turns it off (``trainer.compat``)."""
