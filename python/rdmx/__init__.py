"""rdmx: RDMA-style communication and collectives.

``import rdmx.torch`` registers the ``"rdmx"`` backend for torch.distributed;
``rdmx.info()`` returns what ``rdmx info --json`` prints, as a dict.
"""
# SPDX-License-Identifier: MIT
import json as _json

from rdmx import _core

__version__ = _core.__version__


def info():
    """Providers, devices, host topology and settings in force: the
    ``rdmx info --json`` document (docs/schemas/info.schema.json) as a dict."""
    return _json.loads(_core.info_json())


__all__ = ["__version__", "info"]
