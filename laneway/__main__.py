"""``python -m laneway``: the ``laneway`` command line (the entry point pyproject.toml names,
:func:`laneway.ops.cli.main`), for an environment whose scripts folder is not on ``PATH``."""

from laneway.ops.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
