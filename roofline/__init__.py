"""roofline: how many bytes each decoded token reads, and what that means for tok/s.

From Python: roofline.audit / capacity / plan / preflight (roofline/api.py), loaded on first use so
that `import roofline` (and the CLI's --help) stays light."""
import sys
import types

__version__ = "0.1.0"

_API = ("audit", "capacity", "plan", "preflight")


def _api_function(name: str):
    def call(*args, **kwargs):
        import importlib

        # by name: the package's own modules import roofline for __version__ alone
        return getattr(importlib.import_module("roofline.api"), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"roofline {name} from Python: see roofline/api.py {name}()."
    return call


class _Package(types.ModuleType):
    """The package keeps its API functions under their names: importing the submodule roofline.audit
    (the pipeline) binds it on the package, which would hide roofline.audit(); the submodule stays
    in sys.modules, where `from roofline.audit import ...` finds it."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


for _name in _API:
    globals()[_name] = _api_function(_name)
sys.modules[__name__].__class__ = _Package
