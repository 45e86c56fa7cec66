"""Text corpora (OpenWebText or local stand-ins) for the paper-scale path: loading in a fixed recorded order
(:mod:`.load`), tokenizers (:mod:`.bpe`) and tokenization into the token store (:mod:`.tokenize`).

Submodules import their heavy dependencies (datasets, transformers, tiktoken) lazily, so worker processes
that only tokenize do not pay for them.
"""
