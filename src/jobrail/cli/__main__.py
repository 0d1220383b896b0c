"""``python -m jobrail.cli``: the ``jobrail`` command, without its console script."""

from jobrail.cli.command import main

if __name__ == "__main__":
    main()
