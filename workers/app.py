"""The reference application: jobrail with the billing, sync and notifications contexts.

Every process of it starts from this ``JobRail`` (``--app workers.app:rail``, or
``JOBRAIL_APP=workers.app:rail``): the API (``jobrail api``, or ``jobrail run`` in the
embedded mode), the workers, the scheduler and ``jobrail migrate``, which runs the
contexts' Alembic chain after the platform's.
``JOBRAIL_MODULES`` adds installed modules; unset, this application loads ``demo``
(``POST /demo/echo``, and in the embedded mode on SQLite its admin tenant ``demo``, the
README's walkthrough), which a ``JobRail`` loads only where its app names it.
"""

from contexts import billing, catalog, notifications, sync
from jobrail import JobRail, Module

MODULES: tuple[Module, ...] = (
    catalog.module,
    billing.module,
    notifications.module,
    sync.module,
)

rail = JobRail(modules=MODULES, default_modules=["demo"])
