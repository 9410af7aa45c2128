"""Code that runs inside vLLM (installed as roofline.hooks): the capture plugin and its walk.

Imports nothing heavy at package level; vLLM loads `roofline.hooks.plugin:register` in every
process, and it must cost nothing unless ROOFLINE_CAPTURE is set.
"""
