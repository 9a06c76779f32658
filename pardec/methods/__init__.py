"""Methods that bring a model of their own (a drafter). Each subpackage registers its decoding method
when imported; removing a subpackage removes that method and nothing else."""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if _info.ispkg:
        importlib.import_module(f"{__name__}.{_info.name}")
