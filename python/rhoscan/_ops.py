"""Loads librhoscan_torch.so, which registers the operators as torch.ops.rhoscan.*.

Where the library is looked for, in order:
  1. the environment variable RHOSCAN_TORCH_LIBRARY (a path to the .so; set by the build's tests);
  2. the path recorded by ``cmake --install`` (``_install_location.py``, relative to this package);
  3. this package's own directory.
"""
import os

import torch

_LIBRARY_NAME = "librhoscan_torch.so"


def _candidates():
    env = os.environ.get("RHOSCAN_TORCH_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from ._install_location import LIBRARY
    except ImportError:
        pass
    else:
        yield os.path.normpath(os.path.join(here, LIBRARY))
    yield os.path.join(here, _LIBRARY_NAME)


def load():
    """Load the operator library once; raise ImportError naming every place that was tried."""
    if _loaded:
        return _loaded[0]
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            torch.ops.load_library(path)
            _loaded.append(path)
            return path
        tried.append(path)
    raise ImportError(
        "rhoscan: cannot find %s (tried: %s). Build it with -DRHOSCAN_TORCH=ON and install it "
        "(cmake --install), or set RHOSCAN_TORCH_LIBRARY to its path." % (_LIBRARY_NAME, ", ".join(tried)))


_loaded = []
