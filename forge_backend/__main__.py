"""``python -m forge_backend``: the ``kforge`` command line, for an environment whose scripts are not on PATH."""
from .cli import main

main()
