"""assocmem: reproduce and audit Niu et al. (2024), 'Beyond Scaling Laws'.

``assocmem.load_model(path)`` loads a trained model (:func:`assocmem.train.files.load_model`).
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["load_model"]
# public names -> the module defining them, imported on first use, so `import assocmem` stays cheap (no torch).
# The module is named relatively: assocmem.codehash follows "assocmem.x" names, and every stage imports this package,
# and a stage that loads a model imports assocmem.train itself.
_LAZY = {"load_model": ".train.files"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
