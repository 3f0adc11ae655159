"""Where model directories come from, apart from the operator's own: the embedded
default target converted from its GGUF (`smollm2.py`, `gguf_import.py`,
`gguf_layout.py`) and tiny random models for tests (`tiny.py`).

Nothing in the decode path (engine, rounds, batching) imports this package; the
loader reaches `smollm2` only to resolve the default pair.
"""
