"""The ``jobrail`` command.

jobrail run       embedded mode: migrate a SQLite file and serve the API with an
                  in-process worker (no services needed)
jobrail api       serve the API
jobrail worker    run Taskiq workers (JOBRAIL_WORKER__QUEUES selects queues)
jobrail scheduler enqueue the modules' periodic jobs (run two: one leads)
jobrail migrate   bring the database schema up to date
jobrail tenants   create tenants, issue and revoke their API keys (prints JSON)

Each command takes --app pkg.module:rail (or JOBRAIL_APP): an app's JobRail, whose
settings, modules and job types it runs with, besides the modules of JOBRAIL_MODULES.

What ``jobrail --help`` and ``jobrail COMMAND --help`` show is written for an operator at
a terminal, in `HELP` (jobrail.cli.parser): this docstring is for the reader of the code.

One module per job: `parser` (the command line and its help texts), `command` (`main`:
the command's dispatch, its one-line errors and Ctrl-C), `serving` (the processes that
serve: the API, the worker, and the checks before they start), `schema` (migrating, and
refusing a database that is not migrated) and `tenants`.
"""

# Nothing of jobrail outside this package is imported here, nor at the top of its
# modules: the command's own imports (about a second) run inside main, where a Ctrl-C is
# one line rather than a traceback.
from jobrail.cli.command import main

__all__ = ["main"]
