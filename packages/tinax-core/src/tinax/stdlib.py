"""Command-line configuration and logging without global side effects.

:func:`parse_config` parses an explicit argument list (never ``sys.argv``)
into configuration that the caller builds, and :func:`make_stream_logger`
creates a logger that is not registered globally and leaves the root logger
alone. Abseil entry points pass their ``argv[1:]``; tinax has no Abseil
module, and Grain executables still start through ``absl.app.run``.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._stdlib._cli import parse_config as parse_config
from tinax._stdlib._logging import make_stream_logger as make_stream_logger

__all__ = [
    "make_stream_logger",
    "parse_config",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
