"""The commands around a run: export, inference (fill-mask), cost (info), audit (inspect), demo."""
