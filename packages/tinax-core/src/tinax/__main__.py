"""``python -m tinax``: the ``tinax`` command, exactly as the console script runs it."""

from _tinax_command import console

console()
